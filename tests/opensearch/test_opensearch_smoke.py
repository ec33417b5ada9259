"""Smoke tests against the real node: the `english` analyzer, lucene k-NN and the exact scoring script
(hybrid and RRF pipelines: test_native_fusion.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.opensearch

DOCS = {
    "d1": ("Foldable wheelchairs with an electric drive", [1.0, 0.0, 0.0, 0.0]),
    "d2": ("Hearing aid with bone conduction", [0.0, 1.0, 0.0, 0.0]),
    "d3": ("Wheelchair ramp for vehicles", [0.7, 0.7, 0.0, 0.0]),
    "d4": ("Braille display for blind readers", [0.0, 0.0, 1.0, 0.0]),
}


@pytest.fixture
def patents(os_client, index_name):
    os_client.indices.create(index=index_name, body={
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {"properties": {
            "text": {"type": "text", "analyzer": "english",
                     "fields": {"plain": {"type": "text", "analyzer": "standard"}}},
            "vec": {"type": "knn_vector", "dimension": 4,
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}},
        }},
    })
    for doc_id, (text, vec) in DOCS.items():
        os_client.index(index=index_name, id=doc_id, body={"text": text, "vec": vec})
    os_client.indices.refresh(index=index_name)
    return index_name


def ids(resp):
    return [h["_id"] for h in resp["hits"]["hits"]]


def test_english_analyzer_stems(os_client, patents):
    stemmed = ids(os_client.search(index=patents, body={"query": {"match": {"text": "wheelchair"}}}))
    plain = ids(os_client.search(index=patents, body={"query": {"match": {"text.plain": "wheelchair"}}}))
    assert set(stemmed) == {"d1", "d3"}  # "wheelchairs" in d1 matches only through stemming
    assert plain == ["d3"]


def test_knn_lucene(os_client, patents):
    resp = os_client.search(index=patents, body={
        "size": 2, "query": {"knn": {"vec": {"vector": [1.0, 0.1, 0.0, 0.0], "k": 2}}}})
    assert ids(resp) == ["d1", "d3"]


def test_exact_knn_score_script(os_client, patents):
    resp = os_client.search(index=patents, body={"size": 4, "query": {"script_score": {
        "query": {"match_all": {}},
        "script": {"source": "knn_score", "lang": "knn",
                   "params": {"field": "vec", "query_value": [1.0, 0.0, 0.0, 0.0], "space_type": "cosinesimil"}}}}})
    hits = resp["hits"]["hits"]
    assert [h["_id"] for h in hits[:2]] == ["d1", "d3"]
    assert hits[0]["_score"] == pytest.approx(1.0)  # (1 + cos) / 2 with cos = 1
