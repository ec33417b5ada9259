"""Lucene scalar quantisation (`encoder: sq` in configs/index.yaml): an index setting checked where it is given,
part of the index identity (a load with another encoder is refused), and its cost in retrieval measured on the
quickstart's own corpus (the OPS pizza dataset, citation qrels, title queries against titles, MiniLM):
the sq index's HNSW hits against exact fp32 search and against the flat index's, on the shared node."""

from __future__ import annotations

import pytest

from pizza_variants import MODEL, indexed_variants, on_variant


def test_an_encoder_needs_its_engine():
    from evalctl.indexers.index_layout import IndexSettings, knn_method, load_index_settings
    from evalctl.config_files import SpecError

    sq = load_index_settings(encoder="sq")
    assert knn_method("cosine", sq)["parameters"]["encoder"] == {"name": "sq", "parameters": {"bits": 7}}
    assert "encoder" not in knn_method("cosine", IndexSettings())["parameters"]
    with pytest.raises(SpecError, match=r"configs/index.yaml.*encoder sq needs engine lucene, not faiss"):
        load_index_settings(encoder="sq", engine="faiss")
    with pytest.raises(SpecError, match=r"encoder sq_fp16 needs engine faiss, not lucene"):
        load_index_settings(encoder="sq_fp16")


@pytest.fixture(scope="module")
def pizza(tmp_path_factory, os_client):
    """The quickstart's corpus, MiniLM on titles, indexed flat and sq."""
    yield from indexed_variants(tmp_path_factory.mktemp("quantisation"), os_client,
                                {"flat": {"encoder": "flat"}, "sq": {"encoder": "sq"}})


def _run(os_client, pizza, encoder: str, method: str):
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve

    on_variant(pizza, encoder)
    spec = RetrievalSpec(corpus=pizza["corpus"].name, view="T", method=method, model=MODEL, k=10)
    return retrieve(os_client, spec, RetrievalOptions(progress=False))


@pytest.mark.models
def test_sq_is_part_of_the_index_identity(os_client, pizza):
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_contract import REENCODE_TOLERANCE, IndexState
    from evalctl.indexers.index_layout import load_index_settings, vector_field
    from evalctl.indexers.index_loader import IndexMismatch, index_corpus, read_manifest
    from evalctl.models import get_model

    name = on_variant(pizza, "sq")
    meta = read_manifest(os_client, name)
    method = os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"][vector_field("T")]["method"]
    assert meta["encoder"] == "sq" and method["parameters"]["encoder"] == {"name": "sq", "parameters": {"bits": 7}}
    # the float32 vectors stay in _source: read-back is held to the flat index's tolerance
    assert IndexState(name, meta, ()).tolerance == REENCODE_TOLERANCE
    with pytest.raises(IndexMismatch, match="encoder: index has 'sq', this load has 'flat'"):
        index_corpus(os_client, pizza["corpus"], [load_views()["T"]], get_model(MODEL),
                     settings=load_index_settings(encoder="flat"), progress=False)
    assert os_client.count(index=name)["count"] == len(pizza["corpus"])


@pytest.mark.models
def test_sq_search_against_exact_fp32(os_client, pizza, capsys):
    from evalctl.evaluators.scoring.metrics import ann_loss, evaluate_run

    exact = _run(os_client, pizza, "flat", "exact")
    runs = {enc: _run(os_client, pizza, enc, "dense") for enc in ("flat", "sq")}
    assert runs["flat"].manifest["index_identity"]["encoder"] == "flat"
    assert runs["sq"].manifest["index_identity"]["encoder"] == "sq" and runs["sq"].id != runs["flat"].id
    recall = {enc: ann_loss(run, exact)["ann_recall_of_exact@10"] for enc, run in runs.items()}
    ndcg = {enc: evaluate_run(run).mean["ndcg@10"] for enc, run in {**runs, "exact": exact}.items()}
    with capsys.disabled():
        print(f"\n{len(exact.ranking)} title queries, k=10: recall of exact fp32@10 flat {recall['flat']:.4f}, "
              f"sq {recall['sq']:.4f}; nDCG@10 exact {ndcg['exact']:.4f}, flat {ndcg['flat']:.4f}, "
              f"sq {ndcg['sq']:.4f}")
    # bounded by half the quickstart's bootstrap CI (about +-0.02) and a recall loss of a few points
    assert recall["sq"] > 0.9 and abs(ndcg["sq"] - ndcg["exact"]) < 0.01


def test_exact_queries_is_checked_at_spec_load(tmp_path):
    import yaml

    from evalctl.config_files import SpecError
    from evalctl.study.plan.loading import experiment_path, load_experiment

    data = yaml.safe_load(experiment_path("quickstart").read_text())
    data["retrieval"][0]["exact_queries"] = 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"bad.yaml: retrieval\[0\]: exact_queries 0: must be 1 or more"):
        load_experiment(str(bad))
    data["retrieval"][0]["exact_queries"] = 100
    bad.write_text(yaml.safe_dump(data))
    assert load_experiment(str(bad)).entries("retrieval")[0].exact_queries == 100
    data["retrieval"][0]["query_sample"] = 0
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"bad.yaml: retrieval\[0\]: query_sample 0: must be 1 or more"):
        load_experiment(str(bad))


@pytest.mark.models
def test_exact_on_a_seeded_query_sample_checks_ann_fidelity(os_client, pizza):
    """`exact_queries: N` (RetrievalSpec.query_sample): brute force on N of the split's queries, the same N on
    every run, a run of its own; ANN recall is then measured on those N."""
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.evaluators.scoring.metrics import ann_loss

    on_variant(pizza, "flat")
    spec = RetrievalSpec(corpus=pizza["corpus"].name, view="T", method="exact", model=MODEL, k=10, query_sample=100)
    sample = retrieve(os_client, spec, RetrievalOptions(progress=False))
    again = retrieve(os_client, spec, RetrievalOptions(progress=False, reuse=False))
    full = _run(os_client, pizza, "flat", "exact")
    assert len(sample.ranking) == 100 and set(sample.ranking) < set(full.ranking)
    assert list(again.ranking) == list(sample.ranking) and again.manifest["query_set"] == sample.manifest["query_set"]
    assert sample.manifest["query_set"] != full.manifest["query_set"]
    assert sample.id != full.id and sample.manifest["query_sample"] == {"n": 100, "seed": 0}
    # the sampled queries' exact hits are the full run's: sampling changes which queries, never their answers
    assert all(sample.ranking[q] == full.ranking[q] for q in sample.ranking)
    dense = _run(os_client, pizza, "flat", "dense")
    on_sample, on_all = (ann_loss(dense, exact)["ann_recall_of_exact@10"] for exact in (sample, full))
    # a 100-query sample estimates the full recall (flat 0.97 on all 509) within its sampling error
    assert on_sample > 0.9 and abs(on_sample - on_all) < 0.05
