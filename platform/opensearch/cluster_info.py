"""What the configured cluster is: version, health, plugins (for `evalctl opensearch status`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from evalctl.errors import BadInput, Failure
from evalctl.opensearch.connection import load_settings, make_client, resolve_url
from evalctl.opensearch.node import VECTOR_MODULE, ManagedNode


class ClusterUnavailable(Failure, RuntimeError):
    pass


class EngineUnavailable(BadInput, ValueError):
    """A k-NN engine the node cannot run: refused before any field asks for it."""


def require_engine(engine: str) -> None:
    """Refuse a native k-NN engine (faiss) on the managed node when its plugin lacks the native libraries:
    the first such field kills the JVM ("fatal error"), and the shard it leaves stops the node from
    starting again. Configured clusters are not checked: evalctl cannot see their files."""
    if engine == "lucene" or load_settings().external:
        return
    node = ManagedNode()
    if node.native_knn() is False:
        raise EngineUnavailable(
            f"engine {engine!r} (configs/index.yaml) needs the k-NN plugin's native libraries, and the managed "
            f"node's plugin ({node.knn_plugin}) has none (it comes from Maven Central): "
            f"the first {engine} field would crash the node. Use engine: lucene, or point EVALCTL_OPENSEARCH_URL "
            f"at an OpenSearch distribution that ships them.")


class IndexUnavailable(Failure, RuntimeError):
    """An index with a shard that no node holds (red): named at once instead of waited on."""


def wait_until_settled(client, index: str, wait: str = "120s") -> dict:
    """The index's health once no copy of it is initializing or relocating (or `wait` has passed: 408)."""
    # the health API's own `timeout` goes into the path: opensearch-py reads a `timeout` param as its request timeout
    return client.transport.perform_request(
        "GET", f"/_cluster/health/{quote(index)}?wait_for_no_initializing_shards=true"
               f"&wait_for_no_relocating_shards=true&timeout={wait}", params={"ignore": 408})


def require_available(client, index: str, wait: str = "10s", done: str = "nothing was sent") -> None:
    """Refuse an index in red health: a shard without a started primary (every node holding a copy is gone),
    whose searches would miss its documents and whose loads would wait on it and time out. A red index is
    given `wait` to turn yellow first (a node starting again); `done` says what became of the command's work."""
    # the health API's own `timeout` is in the path (see wait_until_settled); 408: still red when the wait ends
    health = client.transport.perform_request(
        "GET", f"/_cluster/health/{quote(index)}?wait_for_status=yellow&timeout={wait}", params={"ignore": 408})
    if health.get("status") != "red":
        return
    rows = client.cat.shards(index=index, format="json", h="shard,prirep,state,node,unassigned.reason")
    lost = sorted({int(r["shard"]) for r in rows if r["prirep"] == "p" and r["state"] not in ("STARTED", "RELOCATING")})
    why = sorted({r["unassigned.reason"] for r in rows if int(r["shard"]) in lost and r.get("unassigned.reason")})
    raise IndexUnavailable(
        f"index {index} is red: shard(s) {', '.join(map(str, lost))} of {health.get('active_primary_shards', 0) + len(lost)} "
        f"have no copy on any of the cluster's {health.get('number_of_nodes')} node(s) (unassigned: "
        f"{', '.join(why) or '?'}); {done}. "
        + ("Start the node(s) that held them again (`evalctl index status` lists every copy), or restore the index; "
           "replicas (evalctl index --replicas 1) keep a shard when one node is lost" if "NODE_LEFT" in why else
           "GET _cluster/allocation/explain says why the cluster cannot place them"))


_snapshot: dict | None = None  # answers kept inside node_snapshot()


@contextmanager
def node_snapshot() -> Iterator[None]:
    """Inside the block, answers about the node's state (its plugins, index manifests) are read once
    and reused: for code that reads one consistent picture of the node (the report, which asks for
    each of 48 steps' index manifest twice), never around code that changes it."""
    global _snapshot
    outer = _snapshot
    _snapshot = {} if outer is None else outer
    try:
        yield
    finally:
        _snapshot = outer


def snapshot_read(key: tuple, read: Callable[[], Any]) -> Any:
    """read(), or inside node_snapshot() the answer kept for `key` (a copy: callers may change it)."""
    if _snapshot is None:
        return read()
    if key not in _snapshot:
        _snapshot[key] = read()
    return copy.deepcopy(_snapshot[key])


def installed_plugins(client) -> list[str]:
    return snapshot_read(("plugins",), lambda: sorted(plugin_versions(client)))


def plugin_versions(client) -> dict[str, str]:
    return {p["component"]: p["version"] for p in client.cat.plugins(format="json")}


def simd_vectors(client) -> bool | None:
    """Whether a node of the cluster may compute vector similarities with Lucene's SIMD code (its JVM reads the
    Vector API module), so that two builds of an index, or one query asked before and after the JIT compiled
    that code, can score differently in the last bits (evalctl.opensearch.node, simd_vectors). None: unknown,
    for a user whose role may not read node info (a load or a search must not fail on a fact for its manifest)."""
    from opensearchpy.exceptions import AuthorizationException  # deferred: opensearchpy

    def read():
        try:
            nodes = client.nodes.info(metric="jvm", filter_path="nodes.*.jvm.input_arguments")["nodes"]
        except AuthorizationException:
            return None
        return any(VECTOR_MODULE in arg for n in nodes.values() for arg in n["jvm"]["input_arguments"])

    return snapshot_read(("simd_vectors",), read)


def cluster_status() -> dict:
    from opensearchpy.exceptions import ConnectionError as OSConnectionError  # deferred: opensearchpy
    from opensearchpy.exceptions import TransportError

    settings = load_settings()
    url = resolve_url(settings)
    client = make_client(settings)
    info = {"where": settings.describe(), "url": url}
    try:
        root = client.info()
        health = client.cluster.health()
        info.update(
            version=root["version"]["number"],
            distribution=root["version"].get("distribution", "?"),
            health=health["status"],
            nodes=health["number_of_nodes"],
            indices=len(client.cat.indices(format="json")),
            plugins={n: {"version": v} for n, v in sorted(plugin_versions(client).items())},
            simd_vectors=simd_vectors(client),
        )
    except OSConnectionError:
        raise  # reported by the CLI with the URL and what to do (cli.explain)
    except TransportError as e:
        hint = "" if settings.external else " Start it with `evalctl opensearch start`."
        raise ClusterUnavailable(f"no OpenSearch answers at {url} ({settings.describe()}): {e.__class__.__name__}.{hint}") from None
    if not settings.external:
        node = ManagedNode()
        st = node.running_state()
        if st:
            info.update(pid=st.pid, log=str(node.log_file))
            for name, record in node.installed_plugins().items():  # where each plugin zip came from
                if name in info["plugins"]:
                    info["plugins"][name]["source"] = record.get("source") or record.get("zip")
    return info
