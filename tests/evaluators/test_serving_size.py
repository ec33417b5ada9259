"""What each system stores (evaluators/retrieval/serving_cost.py): two indexes of one corpus, MiniLM (384-d) and mpnet
(768-d) over the same views, as index_cost.measure_index_cost records them (the same documents and vector counts,
their store with the same text): the vectors' bytes come from count x dimension x bytes per value, so mpnet's are
exactly twice MiniLM's; the graph is the node's figure where it has one, else the HNSW estimate, labelled; the
shared part is the same for every system of an index and counted once."""

from __future__ import annotations

import pytest

from evalctl.evaluators.retrieval.serving_cost import MB, PER_INDEX, cost_cells, cost_row, shared_bytes
from evalctl.indexers.index_cost import vector_bytes

DOCS, TEXT = 2_973, 3_100_000  # the quickstart's patents; its index's text, _source and ids in bytes
VIEWS = {"T": DOCS, "A": DOCS - 12, "TA": DOCS}  # documents holding a vector of each view


def _manifest(model: str, dim: int, native: int | None = None) -> dict:
    m = {"model": model, "dim": dim, "hnsw": {"m": 16, "ef_construction": 100}, "data_type": "float"}
    vectors = vector_bytes(VIEWS, dim, m)
    m["cost"] = {"documents": DOCS, "store_bytes": TEXT + vectors, "vector_bytes": vectors, "vector_counts": VIEWS,
                 "vector_fields": len(VIEWS), "dim": dim, "native_memory_bytes": native}
    return m


def _system(model: str, manifest: dict, method: str = "dense", view: str = "T") -> dict:
    return {"method": method, "view": view, "retrieval": {}, "index_manifest": manifest,
            "index": f"evalctl-qs--{model}"}


def _cost(system: dict):
    return cost_row(system, "lat", "now", concurrency=1, p50_ms=1.0, p95_ms=2.0, qps=None, busy=False)


def test_a_768_d_field_stores_exactly_twice_a_384_d_one():
    minilm, mpnet = _manifest("all-minilm-l6-v2", 384), _manifest("all-mpnet-base-v2", 768)
    for view in VIEWS:
        small, big = _cost(_system("minilm", minilm, view=view)), _cost(_system("mpnet", mpnet, view=view))
        assert big.vector_mb_per_10k == 2 * small.vector_mb_per_10k
        assert small.vector_mb_per_10k == pytest.approx(VIEWS[view] * 384 * 4 / DOCS * PER_INDEX / MB, rel=1e-12)
        assert big.index_mb_per_10k > small.index_mb_per_10k  # the same text, more vector bytes
        # no native figure here: the estimate, 1.1 x (4d + 8m) bytes per vector, and said so
        estimate = 1.1 * (4 * 384 + 8 * 16) * VIEWS[view] / DOCS * PER_INDEX / MB
        assert small.graph_source == "estimate" and small.graph_mb == pytest.approx(estimate, rel=1e-12)
        assert cost_cells(small)["graph MB / 10k"].endswith(" (est.)")


def test_the_shared_part_is_each_indexs_own_and_no_systems():
    minilm = _manifest("all-minilm-l6-v2", 384)
    assert shared_bytes(minilm) == TEXT == shared_bytes(_manifest("all-mpnet-base-v2", 768))
    bm25, dense_t, dense_ta = (_cost(_system("minilm", minilm, m, v)) for m, v in
                               (("bm25", "T"), ("dense", "T"), ("dense", "TA")))
    assert bm25.vector_mb_per_10k is None and bm25.graph_mb is None  # BM25 stores no vector
    assert bm25.index_mb_per_10k == TEXT / DOCS * PER_INDEX / MB  # the shared part, whole, not a share of it
    for d in (dense_t, dense_ta):  # each dense system: the whole shared part plus its own vectors only
        assert d.index_mb_per_10k == pytest.approx(bm25.index_mb_per_10k + d.vector_mb_per_10k, rel=1e-12)


def test_a_native_graph_figure_is_taken_for_an_index_with_one_vector_field():
    one = _manifest("all-minilm-l6-v2", 384, native=5_000_000)
    one["cost"]["vector_counts"] = {"T": DOCS}
    one["cost"]["vector_bytes"] = vector_bytes({"T": DOCS}, 384, one)
    c = _cost(_system("minilm", one))
    assert c.graph_source == "native memory" and c.graph_mb == 5_000_000 / DOCS * PER_INDEX / MB
    several = _manifest("all-minilm-l6-v2", 384, native=5_000_000)  # the node's figure is the index's, not T's
    assert _cost(_system("minilm", several)).graph_source == "estimate"


def test_an_experiment_stored_in_an_older_form_is_not_read(tmp_path, monkeypatch):
    """A results store kept across versions (a CI machine's cache, a user's) may hold an experiment whose manifest
    predates the fields the report reads: it is not adopted nor costed, so it is measured again."""
    from evalctl import results_store
    from evalctl.evaluators.retrieval.latency_experiment import FORMAT, KIND, stored

    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path))
    old, new = (results_store.write(KIND, "qs", {"name": "exp", "format": f}, {}) for f in (FORMAT - 1, FORMAT))
    assert [r.id for r in stored("qs")] == [new.id] and old.id != new.id
