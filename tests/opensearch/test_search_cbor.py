"""CBOR search responses (read-back's pages) against the real node: the same hits as JSON, floats
bit-identical, and errors raised as opensearch-py's exceptions."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from opensearchpy.exceptions import ConnectionError as OSConnectionError, RequestError

from evalctl.opensearch.connection import ConnectionSettings, make_client, search_cbor


@pytest.fixture(scope="module")
def floats_index(os_client):
    name = f"evalctl-test-cbor-{uuid.uuid4().hex[:8]}"
    vecs = np.random.default_rng(0).standard_normal((20, 16)).astype(np.float32)
    os_client.indices.create(index=name, body={"settings": {"index": {"knn": True}}, "mappings": {"properties": {
        "doc_id": {"type": "keyword"}, "v": {"type": "knn_vector", "dimension": 16,
              # lucene: faiss needs native libraries the Maven-built node lacks (creating one crashes it)
              "method": {"name": "hnsw", "engine": "lucene", "space_type": "l2"}}}}})
    for i, v in enumerate(vecs):
        os_client.index(index=name, id=str(i), body={"doc_id": f"d{i:02d}", "v": v.tolist()})
    os_client.indices.refresh(index=name)
    yield name, vecs
    os_client.indices.delete(index=name)


def test_cbor_page_equals_json_page(os_client, floats_index):
    name, vecs = floats_index
    body = {"size": 50, "sort": [{"doc_id": "asc"}], "_source": ["doc_id", "v"], "query": {"match_all": {}}}
    as_json = os_client.search(index=name, body=body)["hits"]["hits"]
    as_cbor = search_cbor(os_client, body, index=name)["hits"]["hits"]
    assert [h["_id"] for h in as_cbor] == [h["_id"] for h in as_json]
    assert np.array_equal(np.array([h["_source"]["v"] for h in as_cbor], dtype=np.float32), vecs)


def test_errors_are_opensearch_py_exceptions(os_client, floats_index):
    name, _ = floats_index
    with pytest.raises(RequestError) as e:
        search_cbor(os_client, {"size": "many"}, index=name)
    assert e.value.status_code == 400 and e.value.error
    dead = make_client(ConnectionSettings(url="http://127.0.0.1:9"))  # nothing listens on the discard port
    with pytest.raises(OSConnectionError):
        search_cbor(dead, {"size": 1})
