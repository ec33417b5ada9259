"""Segments and k-NN hits after a load, on 1,000 real Lens patents (MiniLM titles): a full load ends in one
segment, which no merge rebuilds, and two such builds give identical k-NN hits (ids and scores), also when the
first runs on a node just started; a load that leaves several segments (resumed loads) is force-merged to one
(merge_to_one_segment, on by default), which the manifest records (segments, graph_merged, simd_vectors).

Identical hits need both: no merge (Lucene 10.3's MergingHnswGraphBuilder inserts nodes in a hash set's order,
which a JVM-wide counter seeds: 36-55 of 60 queries differed with a coarse m=4 graph; fixed in Lucene 10.4), and
Lucene's plain Java vector code, which the managed node runs (configs/opensearch.yaml simd_vectors: false): with
its SIMD code the first build after a start scored differently from the next (docs/index-layout.md).
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from corpus_wrapper import CorpusWrapper

from conftest import LENS

pytestmark = [pytest.mark.opensearch, pytest.mark.models]
MODEL = "all-minilm-l6-v2"


class First(CorpusWrapper):
    """The corpus as far as its first `n` records: a load that stops there, resumed later by a full load."""

    def __init__(self, corpus, n: int):
        self.corpus, self.n = corpus, n

    def records(self, columns=None):
        for i, r in enumerate(self.corpus.records(columns)):
            if i == self.n:
                return
            yield r


@pytest.fixture(scope="module")
def env(tmp_path_factory, os_client):
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.models import get_model

    root = tmp_path_factory.mktemp("ann")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    corpus = import_corpus("lens", [LENS], name=f"ann-{uuid.uuid4().hex[:8]}").corpus
    settings = load_index_settings()
    prefixes = [f"ann{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield {"corpus": corpus, "view": load_views()["T"], "model": get_model(MODEL), "settings": settings,
           "prefixes": prefixes, "mp": mp}
    for p in prefixes:
        os_client.indices.delete(index=f"{p}-*", ignore_unavailable=True)
    mp.undo()


def _build(client, env, prefix: str, pieces: int):
    """Load in `pieces` resumed loads without merging (one segment each), then the rest with the merge."""
    from evalctl.indexers.index_loader import index_corpus, read_manifest, segment_count

    env["mp"].setenv("EVALCTL_INDEX_PREFIX", prefix)
    corpus, step = env["corpus"], len(env["corpus"]) // (pieces + 1)
    unmerged = dataclasses.replace(env["settings"], merge_to_one_segment=False)
    for i in range(1, pieces + 1):
        rep = index_corpus(client, First(corpus, i * step), [env["view"]], env["model"], settings=unmerged,
                           progress=False)
    before = segment_count(client, rep.index)
    rep = index_corpus(client, corpus, [env["view"]], env["model"], settings=env["settings"], progress=False)
    return rep, before, read_manifest(client, rep.index)


def test_a_load_is_merged_to_one_segment_and_the_manifest_says_so(os_client, env):
    """merge_to_one_segment (on by default) merges the segments of resumed loads into one after the last;
    false leaves them as they are."""
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.indexers.index_loader import index_corpus, read_manifest

    assert load_index_settings().merge_to_one_segment  # on by default (configs/index.yaml)
    merged, before, manifest = _build(os_client, env, env["prefixes"][0] + "m", pieces=4)
    assert before == 4 and merged.segments == manifest["segments"] == 1 and merged.merge_seconds > 0
    assert merged.segments_loaded == 5 and manifest["graph_merged"]
    assert merged.n_loaded + merged.n_already == len(env["corpus"]) - merged.missing_view["T"]
    env["mp"].setenv("EVALCTL_INDEX_PREFIX", env["prefixes"][1] + "x")
    unmerged = dataclasses.replace(env["settings"], merge_to_one_segment=False)
    try:
        for n in (300, 600):
            rep = index_corpus(os_client, First(env["corpus"], n), [env["view"]], env["model"], settings=unmerged,
                               progress=False)
        manifest = read_manifest(os_client, rep.index)
        assert rep.segments == rep.segments_loaded == manifest["segments"] == 2 and not manifest["graph_merged"]
    finally:
        for p in (env["prefixes"][0] + "m", env["prefixes"][1] + "x"):
            os_client.indices.delete(index=f"{p}-*", ignore_unavailable=True)


def test_two_full_builds_on_a_node_just_started_give_identical_knn_hits(on_private_node, env):
    """Two full loads of the same corpus, vectors and settings into new indexes, the first on a node started just
    before (its vector code not compiled by the JIT yet): documents go in corpus order, one bulk request in
    flight, refresh off until the end, so each load ends in one segment whose graph was built in the same order,
    and no merge rebuilds it. The ids and scores of 40 k-NN queries agree on a coarse m=4 graph, where another
    graph changes the hits (two merges of the same segments: 36 of 60 differed)."""
    from evalctl.evaluators.retrieval.query_bodies import knn_body
    from evalctl.indexers.index_layout import HnswSettings, vector_field
    from evalctl.indexers.index_loader import index_corpus, read_manifest
    from evalctl.opensearch.cluster_info import simd_vectors
    from evalctl.opensearch.connection import load_settings, make_client

    node = on_private_node
    node.stop()
    logged = node.log_file.stat().st_size if node.log_file.exists() else 0
    node.start(echo=lambda *_: None)
    client = make_client(load_settings())
    assert not simd_vectors(client)  # configs/opensearch.yaml: simd_vectors false
    with open(node.log_file, errors="replace") as log:  # what Lucene said at this start
        log.seek(logged)
        assert "Java vector incubator module is not readable" in log.read()
    settings = dataclasses.replace(env["settings"], hnsw=HnswSettings(m=4, ef_construction=16, ef_search=10))
    indexes = []
    try:
        for prefix in env["prefixes"]:
            env["mp"].setenv("EVALCTL_INDEX_PREFIX", prefix)
            rep = index_corpus(client, env["corpus"], [env["view"]], env["model"], settings=settings, progress=False)
            indexes.append(rep.index)
            manifest = read_manifest(client, rep.index)
            assert rep.segments_loaded == rep.segments == manifest["segments"] == 1
            assert not manifest["graph_merged"] and manifest["simd_vectors"] is False
        field = vector_field(env["view"].name)
        docs = client.search(index=indexes[0], body={"size": 60, "sort": [{"doc_id": "asc"}], "_source": [field]})
        queries = [d["_source"][field] for d in docs["hits"]["hits"] if field in d["_source"]][:40]

        def hits(index: str) -> list[list[tuple[str, float]]]:
            return [[(h["_id"], h["_score"]) for h in client.search(index=index, body=knn_body(field, q, 10))["hits"]["hits"]]
                    for q in queries]

        first = hits(indexes[0])
        assert len(queries) == 40 and all(first)  # a coarse graph's search may stop short of k (9 of 10 here)
        assert hits(indexes[1]) == first
    finally:
        for index in indexes:
            client.indices.delete(index=index, ignore_unavailable=True)
