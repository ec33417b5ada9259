"""Byte vectors (`data_type: byte` in configs/index.yaml): evalctl quantises the cached float vectors to int8 with
one scale per index (evalctl.indexers.byte_vectors), records the rule in the manifest and applies it to every query
vector; the setting is part of the index identity. Checked on the quickstart's own corpus (the bundled OPS pizza
sample, citation qrels, MiniLM on titles) against a float index of the same vectors on the shared node: search
(dense, exact, hybrid, RRF) against exact fp32, read-back and `index verify` within half a quantisation step, and
the store size of float, sq and byte indexes (printed with the retrieval numbers: docs/index-layout.md)."""

from __future__ import annotations

import numpy as np
import pytest

from pizza_variants import MODEL, indexed_variants, on_variant


def test_byte_vectors_need_encoder_flat_and_the_lucene_engine():
    from evalctl.config_files import SpecError
    from evalctl.indexers.index_layout import load_index_settings, vector_properties
    from evalctl.study.plan.cost_plan import component_bytes

    byte = load_index_settings(data_type="byte")
    field = vector_properties(["T"], 384, "cosine", byte)["vec_T"]
    assert field["data_type"] == "byte" and field["method"]["engine"] == "lucene"
    assert component_bytes(byte) == 1 and component_bytes(load_index_settings()) == 4  # the cost plan's graph memory
    assert "data_type" not in vector_properties(["T"], 384, "cosine", load_index_settings())["vec_T"]
    with pytest.raises(SpecError, match=r"configs/index.yaml.*data_type byte with encoder sq: byte vectors are "
                                        r"already quantised"):
        load_index_settings(data_type="byte", encoder="sq")
    with pytest.raises(SpecError, match=r"configs/index.yaml.*data_type byte needs engine lucene, not faiss"):
        load_index_settings(data_type="byte", engine="faiss")
    with pytest.raises(SpecError, match=r"configs/index.yaml.*data_type"):
        load_index_settings(data_type="int8")


def test_the_rule_uses_every_level_and_reads_back_within_half_a_step():
    from evalctl.errors import BadInput
    from evalctl.indexers.byte_vectors import dequantise, max_abs, quantisation, quantise

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rule = quantisation(max_abs([x[:50], x[50:]]))
    q = quantise(x, rule["scale"])
    assert q.dtype == np.int8 and int(np.abs(q).max()) == 127  # the largest component takes the last level
    assert np.abs(dequantise(q, rule["scale"]) - x).max() <= 0.5 / rule["scale"]
    # beyond the index's largest component (a view added later): clipped, never wrapped around
    assert quantise(np.array([[2.0, -2.0]]), rule["scale"]).tolist() == [[127, -127]]
    # cosine is scale-free: a query quantised by the same rule ranks documents as its float vector does, up to rounding
    assert np.corrcoef(q[1:].astype(np.float32) @ q[0], x[1:] @ x[0])[0, 1] > 0.99
    with pytest.raises(BadInput, match="data_type byte: the vectors to load have largest .component. 0.0"):
        quantisation(max_abs([np.zeros((3, 4))]))


@pytest.fixture(scope="module")
def pizza(tmp_path_factory, os_client):
    """The quickstart's corpus, MiniLM on titles, indexed with float vectors (flat and sq) and byte vectors."""
    yield from indexed_variants(tmp_path_factory.mktemp("byte-vectors"), os_client,
                                {"float": {}, "sq": {"encoder": "sq"}, "byte": {"data_type": "byte"}})


def _export(os_client, pizza, key: str):
    from evalctl.corpus.views import load_views
    from evalctl.evaluators.vectors.export import ViewVectors, export_vectors

    on_variant(pizza, key)
    return export_vectors(os_client, ViewVectors(pizza["corpus"], load_views()["T"], MODEL), progress=False).export


def _run(os_client, pizza, key: str, method: str):
    from evalctl.evaluators.retrieval.params import RetrievalParams
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, retrieval_spec, retrieve

    on_variant(pizza, key)
    spec = retrieval_spec(RetrievalParams(pizza["corpus"].name, "T", method, MODEL, k=10))  # a fused method's own technique
    return retrieve(os_client, spec, RetrievalOptions(progress=False))


@pytest.mark.models
def test_a_byte_index_stores_int8_by_its_recorded_rule_and_keeps_to_it(os_client, pizza):
    from evalctl.corpus.views import load_views
    from evalctl.indexers.byte_vectors import RULE
    from evalctl.indexers.index_layout import load_index_settings, vector_field
    from evalctl.indexers.index_loader import IndexMismatch, index_corpus, read_manifest
    from evalctl.models import get_model

    floats = _export(os_client, pizza, "float").vectors
    name = on_variant(pizza, "byte")
    meta = read_manifest(os_client, name)
    assert meta["data_type"] == "byte" and meta["encoder"] == "flat"
    # the scale is the rule's, from the corpus's own vectors (those the float index holds, bit for bit)
    assert meta["byte_quantisation"] == {"rule": RULE, "scale": 127 / float(np.abs(floats).max())}
    mapping = os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"][vector_field("T")]
    assert mapping["data_type"].lower() == "byte"  # the node writes it upper-case
    hits = os_client.search(index=name, body={"size": 20, "query": {"exists": {"field": vector_field("T")}}})
    values = np.array([h["_source"][vector_field("T")] for h in hits["hits"]["hits"]])
    assert values.shape == (20, 384) and np.all(values == np.rint(values)) and np.abs(values).max() <= 127
    with pytest.raises(IndexMismatch, match="data_type: index has 'byte', this load has 'float'"):
        index_corpus(os_client, pizza["corpus"], [load_views()["T"]], get_model(MODEL),
                     settings=load_index_settings(), progress=False)
    float_name = on_variant(pizza, "float")
    with pytest.raises(IndexMismatch, match="data_type: index has 'float', this load has 'byte'"):
        index_corpus(os_client, pizza["corpus"], [load_views()["T"]], get_model(MODEL),
                     settings=load_index_settings(data_type="byte"), progress=False)
    assert os_client.count(index=name)["count"] == os_client.count(index=float_name)["count"] == len(pizza["corpus"])
    # a rerun of the byte load keeps the index's rule and loads nothing again
    on_variant(pizza, "byte")
    again = index_corpus(os_client, pizza["corpus"], [load_views()["T"]], get_model(MODEL),
                         settings=load_index_settings(data_type="byte"), progress=False)
    assert again.n_loaded == 0 and read_manifest(os_client, name)["byte_quantisation"] == meta["byte_quantisation"]


@pytest.mark.models
def test_read_back_and_verify_dequantise_within_half_a_step(os_client, pizza):
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_loader import read_manifest
    from evalctl.indexers.index_verify import verify_index
    from evalctl.models import get_model

    floats, byte = _export(os_client, pizza, "float"), _export(os_client, pizza, "byte")
    scale = read_manifest(os_client, on_variant(pizza, "byte"))["byte_quantisation"]["scale"]
    assert byte.ids == floats.ids and byte.vectors.dtype == np.float32
    err = np.abs(np.asarray(byte.vectors) - np.asarray(floats.vectors))
    # half a step, up to the float32 rounding of x and of q / scale (a few 1e-8 at |x| 0.3)
    assert 0 < err.max() <= 0.5 / scale + 1e-7
    assert byte.manifest["dequantised"]["scale"] == scale
    assert byte.manifest["dequantised"]["tolerance"] == pytest.approx(0.5 / scale + 1e-5)
    assert "dequantised" not in floats.manifest
    rep = verify_index(os_client, pizza["corpus"], load_views(), get_model(MODEL))
    assert not rep.problems, rep.problems
    assert any("sampled vectors read back" in c and "byte vectors dequantised" in c for c in rep.checks), rep.checks


def _store_bytes(os_client, index: str) -> int:
    os_client.indices.refresh(index=index)
    return int(os_client.cat.indices(index=index, format="json", bytes="b")[0]["pri.store.size"])


def _assert_byte_run_identity(runs: dict, methods: tuple[str, ...]) -> None:
    for m in methods:
        byte, flt = runs["byte", m], runs["float", m]
        assert byte.id != flt.id and byte.manifest["index_identity"]["data_type"] == "byte"
        assert "data_type" not in flt.manifest["index_identity"]  # float runs keep the identity they had
        assert byte.manifest["n_empty"] == flt.manifest["n_empty"]


@pytest.mark.models
def test_byte_search_against_exact_fp32(os_client, pizza, capsys):
    from evalctl.evaluators.scoring.metrics import ann_loss, evaluate_run

    fp32 = _run(os_client, pizza, "float", "exact")
    runs = {(key, m): _run(os_client, pizza, key, m) for key in ("float", "sq", "byte") for m in ("dense", "exact")
            if (key, m) != ("sq", "exact")}
    _assert_byte_run_identity(runs, ("dense", "exact"))
    recall = {k: ann_loss(run, fp32)["ann_recall_of_exact@10"] for k, run in runs.items()}
    ndcg = {k: evaluate_run(run).mean["ndcg@10"] for k, run in runs.items()}
    size = {key: _store_bytes(os_client, on_variant(pizza, key)) for key in ("float", "sq", "byte")}
    with capsys.disabled():
        print(f"\n{len(fp32.ranking)} title queries, k=10, one segment each; nDCG@10 exact fp32 "
              f"{ndcg['float', 'exact']:.4f}")
        for key in ("float", "sq", "byte"):
            print(f"  {key}: store {size[key]} B; dense nDCG@10 {ndcg[key, 'dense']:.4f}, recall of exact fp32@10 "
                  f"{recall[key, 'dense']:.4f}" + (f"; exact nDCG@10 {ndcg[key, 'exact']:.4f}, recall "
                                                   f"{recall[key, 'exact']:.4f}" if key == "byte" else ""))
    # brute force over the byte vectors finds nearly what fp32 finds; HNSW over them loses no more than a few points
    assert recall["byte", "exact"] > 0.95 and recall["byte", "dense"] > 0.9
    # within half the quickstart's bootstrap CI (about +-0.02) of the float index, method by method
    assert all(abs(ndcg["byte", m] - ndcg["float", m]) < 0.01 for m in ("dense", "exact"))
    # the vectors' bytes: a quarter of float32's in Lucene's vector format (the text and _source copy stay)
    assert size["byte"] < size["float"]


@pytest.mark.neural_search
@pytest.mark.models
def test_byte_native_fusion_against_float(os_client, pizza, capsys):
    from evalctl.evaluators.scoring.metrics import evaluate_run

    runs = {(key, m): _run(os_client, pizza, key, m) for key in ("float", "byte") for m in ("hybrid", "rrf")}
    _assert_byte_run_identity(runs, ("hybrid", "rrf"))
    ndcg = {k: evaluate_run(run).mean["ndcg@10"] for k, run in runs.items()}
    with capsys.disabled():
        print("\n" + "; ".join(f"{key} {m} nDCG@10 {v:.4f}" for (key, m), v in ndcg.items()))
    assert all(abs(ndcg["byte", m] - ndcg["float", m]) < 0.01 for m in ("hybrid", "rrf"))


def test_each_layout_records_its_index_cost(os_client, pizza, capsys):
    """The manifest's cost section of the float, sq and byte indexes: what each layout takes on disk and in memory."""
    from evalctl.indexers.index_loader import read_manifest

    n = len(pizza["corpus"])
    cost = {key: read_manifest(os_client, on_variant(pizza, key))["cost"] for key in ("float", "sq", "byte")}
    with capsys.disabled():
        print(f"\n{n} documents x 384 dims: " + "; ".join(
            f"{key} {c['store_bytes_per_patent']:.0f} B per patent, {c['vector_bytes_per_dimension']} vector B per "
            f"dimension, graph file {c['hnsw_graph_file_bytes']} B, native memory {c['native_memory_bytes']}"
            for key, c in cost.items()))
    for key, c in cost.items():
        assert c["documents"] == n and c["store_bytes"] > 0 and c["store_bytes_per_patent"] > 0
        assert c["layout"]["engine"] == "lucene" and c["warmed"] is True
        # Lucene-engine graphs are no native memory on OpenSearch 3.5: null with the reason, never a made-up number
        assert c["native_memory_bytes"] is None and "engine lucene" in c["native_memory_null_because"]
    assert cost["sq"]["layout"]["encoder"] == "sq" and cost["byte"]["layout"]["data_type"] == "byte"
    # float32 vectors take 4 bytes a component in vec; sq keeps them and adds its 1-byte copy (veq); byte takes 1
    # (a few records have no title, hence no vector, and count in the denominator: a little under)
    assert 3.9 < cost["float"]["vector_bytes_per_dimension"] < 4.1
    assert 4.9 < cost["sq"]["vector_bytes_per_dimension"] < 5.2 and "veq" in cost["sq"]["vector_files_bytes"]
    assert 0.95 < cost["byte"]["vector_bytes_per_dimension"] < 1.1
    assert cost["byte"]["store_bytes"] < cost["float"]["store_bytes"]
