"""What a latency measurement ran under, for its manifest: the client host (CPUs, their model, RAM, load
average) and the node (version, heap, the index's shards and replicas, SIMD vector code, the node's own load).
A latency is a fact about these as much as about the index: two figures are comparable only beside them."""

from __future__ import annotations

import os
import platform

from evalctl.host import cpu_name
from evalctl.opensearch.cluster_info import simd_vectors

# The machine is marked busy when its 1-minute load average exceeded this share of its CPUs as the measurement
# began: other work then held cores the client threads and (on one host) the node would have used.
BUSY_SHARE = 0.5


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages of the client host."""
    return [round(x, 2) for x in os.getloadavg()]


def is_busy(load_1m: float, cpus: int) -> bool:
    return load_1m > cpus * BUSY_SHARE


def client_host() -> dict:
    """The client machine: CPU count and model, RAM, OS and Python."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every OS names them
        ram = None
    return {"cpus": os.cpu_count(), "cpu_model": cpu_name(), "ram_bytes": ram, "platform": platform.platform(),
            "python": platform.python_version()}


def _per_node(read, metric: str, fields: str) -> dict | None:
    """`read` (nodes.stats or nodes.info) of `metric`, filtered to `fields` per node; None for a user who may not
    read it (a fact for a manifest must not fail the measurement)."""
    from opensearchpy.exceptions import AuthorizationException  # deferred: opensearchpy

    try:
        wanted = ",".join(f"nodes.*.{f}" for f in ("name", *fields.split(",")))
        answer = read(metric=metric, filter_path=wanted)
    except AuthorizationException:
        return None
    return answer.get("nodes", {})


def node_settings(client, index: str) -> dict:
    """The settings that shape the node's answer time: version; per node its heap (`_nodes/stats/jvm`), RAM and
    the processors it uses; the index's shards and replicas; whether vectors are compared by Lucene's SIMD code
    (cluster_info.simd_vectors, as `evalctl opensearch status` reports it)."""
    stats = _per_node(client.nodes.stats, "jvm,os", "jvm.mem.heap_max_in_bytes,os.mem.total_in_bytes")
    info = _per_node(client.nodes.info, "os", "os.allocated_processors") or {}
    settings = next(iter(client.indices.get_settings(index=index, name="index.number_of_*").values()))["settings"]
    nodes = None if stats is None else {
        n["name"]: {"heap_max_bytes": n["jvm"]["mem"]["heap_max_in_bytes"],
                    "ram_bytes": n["os"]["mem"]["total_in_bytes"],
                    "processors": info.get(node_id, {}).get("os", {}).get("allocated_processors")}
        for node_id, n in stats.items()}
    return {
        "version": client.info()["version"]["number"],
        "nodes": nodes,
        "shards": int(settings["index"]["number_of_shards"]),
        "replicas": int(settings["index"]["number_of_replicas"]),
        "simd_vectors": simd_vectors(client),
    }


def node_load(client) -> dict | None:
    """Per node: CPU percent and 1-minute load average as the node sees them, and its search thread pool's
    active and queued tasks (other searches in flight)."""
    stats = _per_node(client.nodes.stats, "os,thread_pool", "os.cpu,thread_pool.search")
    if stats is None:
        return None
    out = {}
    for n in stats.values():
        cpu, search = n.get("os", {}).get("cpu", {}), n.get("thread_pool", {}).get("search", {})
        out[n["name"]] = {"cpu_percent": cpu.get("percent"), "load_1m": cpu.get("load_average", {}).get("1m"),
                          "search_active": search.get("active"), "search_queue": search.get("queue")}
    return out


def local_node_pids(client) -> tuple[int, ...]:
    """The process ids of the cluster's nodes that run on this host: their CPU time is the measurement's own work,
    not other work's (latency_design.OtherLoad)."""
    info = _per_node(client.nodes.info, "process", "process.id") or {}
    out = []
    for n in info.values():
        pid = n.get("process", {}).get("id")
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"opensearch" in f.read():
                    out.append(int(pid))
        except (OSError, TypeError):
            continue
    return tuple(out)
