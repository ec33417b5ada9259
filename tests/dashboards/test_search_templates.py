"""Search templates (BM25, k-NN, hybrid) stored in the real node and run against a small index laid out
like an evalctl index (index_layout.index_body), holding real patent titles from the Lens fixture."""

from __future__ import annotations

import pandas as pd
import pytest

from corpus_helpers import FIXTURES
from evalctl.indexers.index_layout import IndexSettings, index_body, text_field, vector_field
from evalctl.dashboards.search_templates import TEMPLATES, install_templates, template_source

pytestmark = pytest.mark.opensearch

VIEW = "T"
DIM = 6


@pytest.fixture(scope="module")
def docs():
    """The first six Lens rows: publication number -> (title, one-hot vector)."""
    rows = pd.read_csv(FIXTURES / "lens_pizza_sample.csv", encoding="latin-1", nrows=DIM)
    return {num: (title, [1.0 if j == i else 0.0 for j in range(DIM)])
            for i, (num, title) in enumerate(zip(rows["Publication Number"], rows["Title"]))}


@pytest.fixture
def patents(os_client, index_name, docs):
    install_templates(os_client)
    os_client.indices.create(index=index_name, body=index_body([VIEW], DIM, "cosine", IndexSettings(), meta={}))
    for num, (title, vec) in docs.items():
        os_client.index(index=index_name, id=num, body={
            "doc_id": num, "title": title, text_field(VIEW): title, vector_field(VIEW): vec, "loaded_views": [VIEW]})
    os_client.indices.refresh(index=index_name)
    return index_name


def number_of(docs, title):
    return next(num for num, (t, _) in docs.items() if t == title)


def run(client, index, template_id, **params):
    return client.search_template(index=index, body={"id": template_id, "params": {"view": VIEW, **params}})


def render(client, template_id, **params):
    return client.render_search_template(body={"id": template_id, "params": {"view": VIEW, **params}})["template_output"]


def ids(resp):
    return [h["_id"] for h in resp["hits"]["hits"]]


def test_templates_are_stored_as_mustache(os_client, patents):
    for template_id in TEMPLATES:
        script = os_client.get_script(id=template_id)["script"]
        assert script["lang"] == "mustache"
        assert script["source"] == template_source(template_id)


def test_bm25_template_matches_the_view_text(os_client, patents, docs):
    resp = run(os_client, patents, "evalctl-bm25", query_text="coating shells with sauce", size=3)
    assert ids(resp) == [number_of(docs, "Process for coating pizza shells with sauce")]
    # Stemming through the view field's english analyzer: "pans" matches "Pizza Pan".
    top = run(os_client, patents, "evalctl-bm25", query_text="pans")["hits"]["hits"][0]
    assert top["_id"] == number_of(docs, "Pizza Pan")
    assert vector_field(VIEW) not in top["_source"] and top["_source"]["title"] == "Pizza Pan"


def test_bm25_template_defaults_size_and_escapes_quotes(os_client, patents, docs):
    resp = run(os_client, patents, "evalctl-bm25", query_text='pizza "disk')
    assert ids(resp)[0] == number_of(docs, "Method of making pizza with a pizza toppings disk")
    assert len(ids(resp)) == DIM  # every title says pizza; the default size (10) returns them all
    assert render(os_client, "evalctl-bm25", query_text="x")["size"] == 10


def test_knn_template_returns_nearest_vectors(os_client, patents, docs):
    nums = list(docs)
    query = [0.0] * DIM
    query[2], query[3] = 1.0, 0.1  # closest to doc 2, then doc 3, orthogonal to the rest
    resp = run(os_client, patents, "evalctl-knn", vector=query, k=2, size=2)
    assert ids(resp) == [nums[2], nums[3]]
    assert resp["hits"]["hits"][0]["_score"] > resp["hits"]["hits"][1]["_score"]
    assert render(os_client, "evalctl-knn", vector=query)["query"]["knn"][vector_field(VIEW)]["k"] == 10


def test_hybrid_template_renders_a_hybrid_body_of_the_two_sub_queries(os_client, patents, docs):
    nums = list(docs)
    vector = [1.0 if j == 2 else 0.0 for j in range(DIM)]
    params = dict(query_text="sauce", vector=vector, k=3, size=3)
    body = render(os_client, "evalctl-hybrid", **params)
    bm25 = render(os_client, "evalctl-bm25", **params)["query"]
    knn = render(os_client, "evalctl-knn", **params)["query"]
    assert body["query"] == {"hybrid": {"queries": [bm25, knn]}}
    assert body["size"] == 3 and body["_source"] == {"excludes": ["vec_*"]}
    processor = body["search_pipeline"]["phase_results_processors"][0]["normalization-processor"]
    assert processor["normalization"]["technique"] == "min_max"
    # Each sub-query is valid on this node on its own (the hybrid wrapper itself needs neural-search).
    for sub, expected in ((bm25, nums[2]), (knn, nums[2])):
        assert ids(os_client.search(index=patents, body={"size": 1, "query": sub})) == [expected]


@pytest.mark.neural_search
def test_hybrid_template_runs_with_neural_search(os_client, patents, docs):
    vector = [1.0 if j == 2 else 0.0 for j in range(DIM)]
    resp = run(os_client, patents, "evalctl-hybrid", query_text="sauce", vector=vector, k=3, size=3)
    hits = resp["hits"]["hits"]
    assert hits[0]["_id"] == list(docs)[2]  # top of both sub-queries
    assert all(0.0 <= h["_score"] <= 1.0 for h in hits)  # normalised, not raw delimiter scores
