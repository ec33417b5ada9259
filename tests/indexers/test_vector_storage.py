"""Vectors kept out of `_source` (`vectors_in_source: false` in configs/index.yaml): an index setting fixed when the
index is made (a load with the other setting is refused), which changes no search result and no vector read back
(read-back and `index verify` read the vector values, not _source), and whose saving is measured on the quickstart's
own corpus (the OPS pizza dataset, MiniLM on titles): store size after the force-merge to one segment, per
vector dimension per document, against a text-only index of the same corpus, on the shared node."""

from __future__ import annotations

import numpy as np
import pytest

from pizza_variants import MODEL, indexed_variants, on_variant



@pytest.fixture(scope="module")
def pizza(tmp_path_factory, os_client):
    """The quickstart's corpus, MiniLM on titles, indexed with the vectors in _source and without them."""
    yield from indexed_variants(tmp_path_factory.mktemp("vector-storage"), os_client,
                                {"in": {}, "out": {"vectors_in_source": False}})


def _store_bytes(os_client, index: str) -> int:
    os_client.indices.refresh(index=index)
    return int(os_client.cat.indices(index=index, format="json", bytes="b")[0]["pri.store.size"])


def test_no_replicas_without_the_vectors_in_source():
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.config_files import SpecError

    with pytest.raises(SpecError, match=r"configs/index.yaml.*replicas 1 with vectors_in_source false: a replica"):
        load_index_settings(vectors_in_source=False, replicas=1)


@pytest.mark.models
def test_source_leaves_out_the_vectors_and_loads_keep_to_the_setting(os_client, pizza):
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import load_index_settings, vector_field
    from evalctl.indexers.index_loader import IndexMismatch, index_corpus, read_manifest
    from evalctl.models import get_model

    docs, cost = {}, {}
    for key in ("in", "out"):
        name = on_variant(pizza, key)
        meta = read_manifest(os_client, name)
        assert meta["vectors_in_source"] is (key == "in")
        cost[key] = meta["cost"]
        assert cost[key]["layout"]["vectors_in_source"] is (key == "in")
        docs[key] = os_client.search(index=name, body={"size": 5, "sort": ["doc_id"]})["hits"]["hits"]
    assert all(vector_field("T") in d["_source"] for d in docs["in"])
    assert not any(vector_field("T") in d["_source"] for d in docs["out"])
    # the index cost (manifest) sees the JSON copy go: fewer store bytes a patent, the same vector files
    assert cost["out"]["store_bytes_per_patent"] < cost["in"]["store_bytes_per_patent"]
    assert cost["out"]["vector_files_bytes"]["vec"] == pytest.approx(cost["in"]["vector_files_bytes"]["vec"], rel=0.01)
    # the rest of each document is unchanged
    assert [{k: v for k, v in d["_source"].items() if k != vector_field("T")} for d in docs["in"]] == \
        [d["_source"] for d in docs["out"]]
    name = on_variant(pizza, "out")
    with pytest.raises(IndexMismatch, match="vectors_in_source: index has False, this load has True"):
        index_corpus(os_client, pizza["corpus"], [load_views()["T"]], get_model(MODEL),
                     settings=load_index_settings(), progress=False)
    assert os_client.count(index=name)["count"] == len(pizza["corpus"])


@pytest.mark.models
def test_read_back_verify_and_search_do_not_need_the_vectors_in_source(os_client, pizza):
    from evalctl.corpus.views import load_views
    from evalctl.evaluators.vectors.export import ViewVectors, export_vectors
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.indexers.index_verify import verify_index
    from evalctl.models import get_model

    exports, runs = {}, {}
    for key in ("in", "out"):
        on_variant(pizza, key)
        rep = verify_index(os_client, pizza["corpus"], load_views(), get_model(MODEL))
        assert not rep.problems, rep.problems
        assert any("sampled vectors read back, max |diff| 0" in c for c in rep.checks), rep.checks
        of = ViewVectors(pizza["corpus"], load_views()["T"], MODEL)
        exports[key] = export_vectors(os_client, of, progress=False).export
        spec = RetrievalSpec(corpus=pizza["corpus"].name, view="T", method="dense", model=MODEL, k=10)
        runs[key] = retrieve(os_client, spec, RetrievalOptions(progress=False))
    titled = sum(1 for r in pizza["corpus"].records() if load_views()["T"].render(r))  # 8 records have no title
    assert exports["in"].ids == exports["out"].ids and len(exports["out"].ids) == titled
    assert np.array_equal(exports["in"].vectors, exports["out"].vectors)
    # the same hits; scores may differ in the last float32 bit (each build's graph scores in its own order)
    assert {q: [d for d, _ in hits] for q, hits in runs["in"].ranking.items()} == \
        {q: [d for d, _ in hits] for q, hits in runs["out"].ranking.items()}
    assert all(np.allclose([s for _, s in hits], [s for _, s in runs["out"].ranking[q]], rtol=0, atol=1e-6)
               for q, hits in runs["in"].ranking.items())


@pytest.mark.models
def test_bytes_per_dimension_with_and_without_the_vectors_in_source(os_client, pizza, capsys):
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model

    n, dim = len(pizza["corpus"]), get_model(MODEL).dim
    size = {key: _store_bytes(os_client, on_variant(pizza, key)) for key in ("in", "out")}
    on_variant(pizza, "out")  # a text-only index of the same corpus and view: what the vectors add to
    index_corpus(os_client, pizza["corpus"], [load_views()["T"]], None, progress=False)
    text = _store_bytes(os_client, index_name(pizza["corpus"].name, None))
    per = {key: (s - text) / (n * dim) for key, s in size.items()}
    with capsys.disabled():
        print(f"\n{n} documents x {dim} dims, one segment: store {size['in']} B with vectors in _source, "
              f"{size['out']} B without, {text} B text only; vector bytes per dimension per document "
              f"{per['in']:.2f} in _source, {per['out']:.2f} without (float32 floor 4, plus the HNSW graph)")
    # the float32 values and the graph stay (at least the 4-byte floor); the JSON copy in _source goes
    assert 4 <= per["out"] < 5 < per["in"]
