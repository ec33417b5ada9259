"""Native hybrid and RRF against the real neural-search plugin: every normalisation, combination and
weight setting evalctl can ask for, and RRF's rank constant and weights, give the scores evalctl's reading
of the plugin's arithmetic (evaluators/fusion/neural_reference.py) computes from the two sub-queries' own hits.
The bodies are evalctl's (hybrid_body with its exclusion filter, pipeline_body)."""

from __future__ import annotations

import itertools

import pytest

from evalctl.evaluators.fusion.neural_reference import normalized_fusion, rrf

pytestmark = pytest.mark.opensearch

DOCS = {  # text, 4-d vector: BM25 and k-NN lists overlap in part
    "d1": ("Foldable wheelchair with an electric drive and a ramp sensor", [1.0, 0.0, 0.0, 0.0]),
    "d2": ("Hearing aid with bone conduction", [0.0, 1.0, 0.0, 0.0]),
    "d3": ("Wheelchair ramp for vehicles", [0.7, 0.7, 0.0, 0.0]),
    "d4": ("Braille display for blind readers", [0.0, 0.0, 1.0, 0.0]),
    "d5": ("Portable ramp for wheelchair users at kerbs and steps", [0.9, 0.1, 0.2, 0.0]),
    "d6": ("Stair lift with a folding seat", [0.8, 0.0, 0.0, 0.6]),
    "d7": ("Walking frame with wheels and a seat", [0.6, 0.2, 0.0, 0.3]),
    "d8": ("Wheelchair cushion against pressure sores", [0.2, 0.1, 0.9, 0.1]),
    "d9": ("Vehicle lift for a powered wheelchair", [0.95, 0.05, 0.0, 0.1]),
}
QUERY, VECTOR, EXCLUDE, SIZE = "wheelchair ramp", [1.0, 0.05, 0.0, 0.05], {"d9"}, 6


@pytest.fixture(scope="module")
def index(os_client):
    import uuid

    name = f"test-fusion-{uuid.uuid4().hex[:8]}"
    os_client.indices.create(index=name, body={
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {"properties": {
            "text": {"type": "text", "analyzer": "english"},
            "vec": {"type": "knn_vector", "dimension": 4,
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}}}},
    })
    for doc_id, (text, vec) in DOCS.items():
        os_client.index(index=name, id=doc_id, body={"text": text, "vec": vec})
    os_client.indices.refresh(index=name)
    yield name
    os_client.indices.delete(index=name, ignore_unavailable=True)


def _hits(resp) -> list[tuple[str, float]]:
    return [(h["_id"], h["_score"]) for h in resp["hits"]["hits"]]


@pytest.fixture(scope="module")
def sub_lists(os_client, index):
    from evalctl.evaluators.retrieval.query_bodies import bm25_body, knn_body

    bm25 = _hits(os_client.search(index=index, body=bm25_body("text", QUERY, SIZE, EXCLUDE)))
    knn = _hits(os_client.search(index=index, body=knn_body("vec", VECTOR, SIZE, EXCLUDE)))
    assert len(bm25) >= 3 and len(knn) == SIZE and set(bm25) != set(knn)
    assert "d9" not in dict(bm25) | dict(knn)  # the exclusion filter holds in both sub-queries
    return [bm25, knn]


def _native(os_client, index, fusion) -> list[tuple[str, float]]:
    from evalctl.evaluators.retrieval.methods import BodyContext
    from evalctl.evaluators.retrieval.query_bodies import hybrid_body
    from evalctl.evaluators.fusion.search_pipelines import pipeline_body

    body = hybrid_body(BodyContext("text", "vec", SIZE, {}, pipeline_body(fusion)), QUERY, VECTOR, EXCLUDE)
    body["size"] = len(DOCS)  # every fused document, not only the top SIZE
    return _hits(os_client.search(index=index, body=body))


def _assert_same(native, expected):
    assert {d for d, _ in native} == set(expected)
    for doc, score in native:
        assert score == pytest.approx(expected[doc], rel=1e-4, abs=1e-5), doc
    order = [d for d, _ in native]
    assert [expected[d] for d in order] == sorted((expected[d] for d in order), reverse=True)


COMBOS = [(n, c) for n, c in itertools.product(("min_max", "l2", "z_score"),
                                               ("arithmetic_mean", "geometric_mean", "harmonic_mean"))
          if n != "z_score" or c == "arithmetic_mean"]  # z_score combines with arithmetic_mean only


@pytest.mark.neural_search
@pytest.mark.parametrize("normalization,combination", COMBOS)
@pytest.mark.parametrize("dense_weight", [0.5, 0.7, 1.0])
def test_normalization_processor_matches_reference(os_client, index, sub_lists,
                                                   normalization, combination, dense_weight):
    from evalctl.evaluators.fusion.settings import FusionSpec

    fusion = FusionSpec("linear", normalization, combination, dense_weight)
    expected = normalized_fusion(sub_lists, fusion.weights, normalization, combination)
    _assert_same(_native(os_client, index, fusion), {d: s for d, s in expected.items() if s > 0})


@pytest.mark.neural_search
@pytest.mark.parametrize("rank_constant,dense_weight", [(60, 0.5), (1, 0.5), (20, 0.8)])
def test_score_ranker_rrf_matches_reference(os_client, index, sub_lists, rank_constant, dense_weight):
    from evalctl.evaluators.fusion.settings import FusionSpec

    fusion = FusionSpec("rrf", dense_weight=dense_weight, rank_constant=rank_constant)
    _assert_same(_native(os_client, index, fusion), rrf(sub_lists, fusion.weights, rank_constant))
