"""A real 3-node OpenSearch 3.5 cluster on 127.0.0.1 (issue 28, items 1 and 4): one LocalCluster for the module
(512 MB heap a node, a copy of the shared node's distribution in a home of its own, ports 9410-9412 / 9510-9512;
never the shared node), the quickstart's corpus (the OPS pizza sample, 2,973 publications, citation qrels),
BM25 on titles, indexes of 3 shards. Faults: a node killed (SIGKILL) while `evalctl index` loads, the elected
cluster manager killed while `evalctl retrieve` searches, each command run as its own process against the
cluster's host list; an index whose shard lost its only copy (no replica) named as red with its shard instead
of waited on, before a command and in the middle of a load."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from real_data import OPS

pytestmark = [pytest.mark.cluster, pytest.mark.opensearch]
HTTP_PORT = 9410


def _cli(*args):
    from evalctl.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def _evalctl(*args, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from evalctl.cli.main import main; main()", *map(str, args)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory, os_client):
    """The cluster, the environment pointing evalctl at it, the corpus, and the unfaulted BM25 run of an index of 3
    shards with 1 replica; a second index of 3 shards without replicas (one primary on each node). It takes
    os_client so that the session's client exists before the environment points at the cluster: made inside it
    (this module run first), every later module's client pointed at the stopped cluster."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import QrelsSpec, build_qrels
    from evalctl.opensearch.connection import make_client
    from evalctl.opensearch.local_cluster import LocalCluster
    from evalctl.opensearch.node import ManagedNode

    shared = ManagedNode()
    if not shared.assembled():
        pytest.skip("no assembled OpenSearch distribution to copy (evalctl opensearch start assembles it)")
    # under /tmp itself: as root the nodes run as a service user who must be able to enter their home
    home = Path(tempfile.mkdtemp(prefix="evalctl-cluster-"))
    shutil.copytree(shared.dist, home / "dist" / shared.dist.name, symlinks=True)
    cluster = LocalCluster(3, home=home, http_port=HTTP_PORT, heap="512m")
    root = tmp_path_factory.mktemp("cluster")
    mp = pytest.MonkeyPatch()
    try:
        start_s = cluster.start(timeout=600, echo=lambda *_: None)
        tag = uuid.uuid4().hex[:6]
        for k, v in {"EVALCTL_OPENSEARCH_URL": ",".join(cluster.urls), "EVALCTL_CACHE": str(root / "cache"),
                     "EVALCTL_RESULTS": str(root / "results-base"), "EVALCTL_INDEX_PREFIX": f"base{tag}",
                     "HF_HUB_OFFLINE": "1"}.items():
            mp.setenv(k, v)
        corpus = import_corpus("ops", [OPS], name=f"pizza-{tag}").corpus
        build_qrels(corpus, QrelsSpec(dev_fraction=0.15, train_fraction=0.15))
        world = {"cluster": cluster, "start_s": start_s, "corpus": corpus.name, "root": root, "mp": mp, "tag": tag,
                 "client": make_client()}
        load = ("index", "--corpus", corpus.name, "--view", "T", "--shards", 3)
        out = _cli(*load, "--replicas", 1)
        assert out.exit_code == 0, out.output
        world["base_run"] = _bm25(world)
        mp.setenv("EVALCTL_INDEX_PREFIX", f"zero{tag}")
        out = _cli(*load, "--replicas", 0)
        assert out.exit_code == 0, out.output
        yield world
    finally:
        mp.undo()
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def _bm25(world, env=None) -> str:
    """The BM25 test-split run (run.trec) of the current prefix, searched here or by a process given env."""
    args = ("retrieve", "--corpus", world["corpus"], "--view", "T", "--method", "bm25")
    out = _cli(*args) if env is None else None
    assert out is None or out.exit_code == 0, out.output
    results = Path((env or os.environ)["EVALCTL_RESULTS"])
    (trec,) = results.rglob("run.trec")
    return trec.read_text()


def _run_difference(one: str, other: str) -> str | None:
    """None when two run.trec texts rank the same: the same score at every rank of every query, and the same
    documents at each score but the last (the k-th), whose ties may be cut elsewhere. Documents of one score may
    come in another order: a tie is broken by shard and Lucene doc id, and a faulted load writes the documents
    in another order. Else the first query that differs, with both rankings."""
    def parse(text: str) -> dict:
        runs: dict[str, list] = {}
        for line in text.splitlines():
            q, _, doc, _, score, _ = line.split()
            runs.setdefault(q, []).append((doc, score))
        return runs

    a, b = parse(one), parse(other)
    if a.keys() != b.keys():
        return f"queries differ: {sorted(a.keys() ^ b.keys())[:10]}"
    for q in a:
        last = a[q][-1][1]
        if [s for _, s in a[q]] != [s for _, s in b[q]] or \
                {x for x in a[q] if x[1] != last} != {x for x in b[q] if x[1] != last}:
            return f"query {q}:\n  {a[q]}\n  {b[q]}"
    return None


def _index_name(world) -> str:
    from evalctl.indexers.index_layout import index_name

    return index_name(world["corpus"], None)


def _env(world, name: str) -> dict:
    """A process environment of its own prefix and results store (the unfaulted run is never reused)."""
    return {**os.environ, "EVALCTL_INDEX_PREFIX": f"{name}{world['tag']}",
            "EVALCTL_RESULTS": str(world["root"] / f"results-{name}")}


def _copies(world, name: str) -> str:
    """Every copy's documents, deletions and segments: what BM25's statistics were read from."""
    cat = world["client"].cat
    return (cat.shards(index=name, v=True, h="shard,prirep,state,docs,node")
            + cat.segments(index=name, v=True, h="shard,prirep,segment,docs.count,docs.deleted,committed,searchable"))


def _victim(world, manager: bool = False) -> int:
    """A member to kill: the elected cluster manager when `manager` (a re-election on top of the lost copies),
    else another one. The client sends to every host in turn, so requests in flight to it are lost and go to
    another host."""
    elected = world["client"].cat.cluster_manager(format="json")[0]["node"]
    return next(i for i, m in enumerate(world["cluster"].members) if (m.member.name == elected) == manager)


def _kill(world, i: int) -> None:
    member = world["cluster"].members[i]
    os.kill(member.read_state().pid, signal.SIGKILL)
    while member.running_state() is not None:
        time.sleep(0.1)


def _indexed(client, name: str) -> int:
    """Documents the index's primaries took so far (refresh is off during a load: indexing stats, not a count)."""
    if not client.indices.exists(index=name):
        return 0
    return client.indices.stats(index=name, metric="indexing")["_all"]["primaries"]["indexing"]["index_total"]


def _wait(predicate, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {seconds} s")


def _finish(proc: subprocess.Popen, args, env) -> tuple[str, int]:
    """The faulted command's output; rerun once when it stopped (a rerun resumes): (output, reruns)."""
    out = proc.communicate(timeout=300)[0]
    if proc.returncode == 0:
        return out, 0
    again = _evalctl(*args, env=env)
    out2 = again.communicate(timeout=300)[0]
    assert again.returncode == 0, out + out2
    return out + out2, 1


def test_three_nodes_hold_the_copies(world, capsys):
    health = world["client"].cluster.health()
    assert health["number_of_nodes"] == 3 and health["status"] == "green"
    world["mp"].setenv("EVALCTL_INDEX_PREFIX", f"base{world['tag']}")
    out = _cli("index", "status")
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("  shards=3 replicas=1 health=green: "))
    copies = line.split(": ", 1)[1].split(", ")
    assert sorted(c.split()[0] for c in copies) == ["0p", "0r", "1p", "1r", "2p", "2r"]
    assert {c.split()[1] for c in copies} == {m.member.name for m in world["cluster"].members}
    with capsys.disabled():
        print(f"\n3-node cluster started in {world['start_s']:.1f} s (load {open('/proc/loadavg').read().split()[:3]})")


def _small_bulks(root: Path) -> Path:
    """The package's configs with `_bulk` requests of 20 documents (not 500): ~150 requests, so the load outlasts the
    replicas' start on an idle machine too (6 requests once ended before the index turned green). Bulk sizes are no
    part of an index's identity."""
    from evalctl.config_files import configs_dir

    folder = root / "configs-small-bulks"
    if not folder.exists():
        shutil.copytree(configs_dir(), folder)
        index_yaml = folder / "index.yaml"
        text = index_yaml.read_text()
        assert "  max_docs: 500\n" in text
        index_yaml.write_text(text.replace("  max_docs: 500\n", "  max_docs: 20\n"))
    return folder


def test_node_killed_during_index(world, capsys):
    """SIGKILL to a node once the load's first documents are in: the load completes (or a rerun resumes), the
    index verifies, and its BM25 run equals the unfaulted index's up to the order of tied documents."""
    env = {**_env(world, "fault"), "EVALCTL_CONFIGS": str(_small_bulks(world["root"]))}
    world["mp"].setenv("EVALCTL_INDEX_PREFIX", env["EVALCTL_INDEX_PREFIX"])
    name = _index_name(world)
    args = ("index", "--corpus", world["corpus"], "--view", "T", "--shards", 3, "--replicas", 1, "--chunk-docs", 200)
    proc = _evalctl(*args, env=env)
    client = world["client"]

    # once the first documents are in and every replica has started (a replica still recovering is not promoted)
    _wait(lambda: (_indexed(client, name) > 0 and client.cluster.health(index=name)["status"] == "green") or proc.poll() is not None,
          "the load's first documents")
    assert proc.poll() is None, "the load ended before a node could be killed"
    victim = _victim(world)
    _kill(world, victim)
    world["dead"] = victim
    out, reruns = _finish(proc, args, env)
    verify = _cli("index", "verify", "--corpus", world["corpus"])
    assert verify.exit_code == 0 and "verified" in verify.output, verify.output
    world["mp"].setenv("EVALCTL_RESULTS", env["EVALCTL_RESULTS"])
    diff = _run_difference(_bm25(world), world["base_run"])
    assert diff is None, f"{diff}\n{_copies(world, name)}\n{out}"
    with capsys.disabled():
        print(f"\nnode {victim} killed during evalctl index: completed with {reruns} rerun(s); index verified; "
              "BM25 run equal to the unfaulted one")


def test_a_red_index_is_named_with_its_shard(world):
    """With that node down the index without replicas lost a shard: retrieve and index say which, at once."""
    if "dead" not in world:
        pytest.skip("needs the node killed by test_node_killed_during_index")
    client, cluster = world["client"], world["cluster"]
    world["mp"].setenv("EVALCTL_INDEX_PREFIX", f"zero{world['tag']}")
    world["mp"].setenv("EVALCTL_RESULTS", str(world["root"] / "results-red"))
    name = _index_name(world)
    _wait(lambda: client.cluster.health(index=name)["status"] == "red", f"{name} red")
    try:
        t0 = time.monotonic()
        for args in (("retrieve", "--corpus", world["corpus"], "--view", "T", "--method", "bm25"),
                     ("index", "--corpus", world["corpus"], "--view", "T", "--shards", 3, "--replicas", 0)):
            out = _cli(*args)
            assert out.exit_code == 1, out.output
            assert f"index {name} is red: shard(s) " in out.output and "no copy on any of the cluster's 2 node(s)" in out.output
        assert time.monotonic() - t0 < 60
    finally:
        cluster.start_member(world.pop("dead"))
    _wait(lambda: client.cluster.health()["status"] == "green", "the cluster green again")


def test_an_index_turning_red_mid_load_is_named(world, capsys):
    """A node killed while an index without replicas loads: its shard has no copy left, and the load stops at the
    first chunk refused for it, naming the index and the shard, instead of waiting a minute on every later chunk.
    With the node back, a rerun loads the rest and the index verifies."""
    env = _env(world, "redload")
    world["mp"].setenv("EVALCTL_INDEX_PREFIX", env["EVALCTL_INDEX_PREFIX"])
    name = _index_name(world)
    # requests of 10 documents (a copied configs folder): the load is still sending when the node is gone; the
    # node holds a document for the lost shard 5 s, not a minute, before refusing it
    configs = world["root"] / "configs-small-bulk"
    shutil.copytree(REPO / "configs", configs)
    index_yaml = configs / "index.yaml"
    small = index_yaml.read_text().replace("  max_docs: 500", "  max_docs: 10").replace("  timeout: 1m", "  timeout: 5s")
    assert "timeout: 5s" in small
    index_yaml.write_text(small)
    env["EVALCTL_CONFIGS"] = str(configs)
    args = ("index", "--corpus", world["corpus"], "--view", "T", "--shards", 3, "--replicas", 0)
    proc = _evalctl(*args, env=env)
    client, cluster = world["client"], world["cluster"]
    _wait(lambda: _indexed(client, name) > 0 or proc.poll() is not None, "the load's first documents")
    assert proc.poll() is None, "the load ended before a node could be killed"
    victim = _victim(world)
    _kill(world, victim)
    t0 = time.monotonic()
    try:
        out = proc.communicate(timeout=300)[0]
        stopped_s = time.monotonic() - t0
        assert proc.returncode == 1, out
        assert f"index {name} is red: shard(s) " in out and "a rerun of the same command loads the rest" in out, out
        assert "Traceback" not in out, out
    finally:
        cluster.start_member(victim)
    _wait(lambda: client.cluster.health()["status"] == "green", "the cluster green again")
    again = _evalctl(*args, env=env)
    rerun = again.communicate(timeout=300)[0]
    assert again.returncode == 0 and " 0 already present" not in rerun and " already present" in rerun, rerun
    verify = _cli("index", "verify", "--corpus", world["corpus"])
    assert verify.exit_code == 0 and "verified" in verify.output, verify.output
    with capsys.disabled():
        print(f"\nnode {victim} killed during a load without replicas: stopped {stopped_s:.0f} s later naming the red "
              "shard; the rerun after the restart resumed and verified")


def test_node_killed_during_retrieve(world, capsys):
    """SIGKILL to the elected cluster manager once the searches started: the other two elect a new one, the
    retrieve completes (or a rerun resumes) on the other hosts and its run equals the unfaulted one."""
    env = _env(world, "base")
    env["EVALCTL_RESULTS"] = str(world["root"] / "results-retrieve")
    args = ("retrieve", "--corpus", world["corpus"], "--view", "T", "--method", "bm25")
    client = world["client"]

    def searched() -> int:
        stats = client.nodes.stats(metric="indices", index_metric="search")["nodes"].values()
        return sum(n["indices"]["search"]["query_total"] for n in stats)

    before = searched()
    proc = _evalctl(*args, env=env)
    _wait(lambda: searched() > before + 10 or proc.poll() is not None, "the first searches")
    assert proc.poll() is None, "the retrieve ended before a node could be killed"
    victim = _victim(world, manager=True)
    _kill(world, victim)
    out, reruns = _finish(proc, args, env)
    diff = _run_difference(_bm25(world, env), world["base_run"])
    assert diff is None, f"{diff}\n{out}"
    with capsys.disabled():
        print(f"\nnode {victim} (the elected cluster manager) killed during evalctl retrieve: completed with {reruns} "
              "rerun(s); run equal to the unfaulted one")


def test_an_index_whose_shards_cannot_be_placed_is_named(os_client, index_name):
    """Red from the start (an allocation rule no node meets), on the shared node: named with its shards and the
    reason within the wait, not after a load's or a search's timeout."""
    from evalctl.opensearch.cluster_info import IndexUnavailable, require_available

    os_client.indices.create(index=index_name, params={"wait_for_active_shards": "0"}, body={"settings": {
        "number_of_shards": 2, "number_of_replicas": 0, "index.routing.allocation.require._name": "no-such-node"}})
    t0 = time.monotonic()
    with pytest.raises(IndexUnavailable, match=rf"index {index_name} is red: shard\(s\) 0, 1 of 2 have no copy .*"
                                               r"\(unassigned: INDEX_CREATED\).*allocation/explain"):
        require_available(os_client, index_name, wait="2s")
    assert time.monotonic() - t0 < 10
