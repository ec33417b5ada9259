"""Passages (issue 41): texts cut into windows of the model's own tokens, a nested field of passage vectors per
view x setting, and `dense-maxp` (nested k-NN, each patent scored by its best passage) on the real node. The corpus
is 30 real USPTO grants as a known-item task (title queries, abstract documents of 100-200 MiniLM tokens), cut
into windows of 32 and 48 tokens: several passages a patent."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from conftest import private_cache
from retrieval_data import grants, write_known_item_beir

MODEL = "all-minilm-l6-v2"
SETTINGS = ("32:24", "48:36")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.models import get_model

    return AutoTokenizer.from_pretrained(str(offline_model_dir(get_model(MODEL))), local_files_only=True)


@pytest.mark.models
def test_spans_are_windows_of_the_models_tokens(tokenizer):
    from evalctl.indexers.passages import PassageSpec, passage_spans

    text = grants(1)[0]["abstract"]
    offsets = [o for o in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
               if o[1] > o[0]]
    spec = PassageSpec(32, 24)
    spans = passage_spans(text, tokenizer, spec)
    starts = [next(i for i, o in enumerate(offsets) if o[0] == s) for s, _ in spans]
    assert len(offsets) > 2 * spec.window and starts[0] == 0  # a real abstract: several windows
    assert all(b - a == spec.stride for a, b in zip(starts[:-2], starts[1:-1]))  # every stride tokens ...
    assert starts[-1] == len(offsets) - spec.window and spans[-1][1] == offsets[-1][1]  # ... the last ends the text
    for s, e in spans:
        assert len(tokenizer(text[s:e], add_special_tokens=False)["input_ids"]) == spec.window
    assert passage_spans("short text", tokenizer, spec) == [(0, 10)]  # one window when the text is shorter


def test_passage_settings_are_written_and_refused_by_name():
    from evalctl.indexers.passages import PassageError, PassageSpec, check_window

    assert PassageSpec.parse("128") == PassageSpec(128, 96) == PassageSpec.parse("w128s96")
    assert PassageSpec.parse("64:64").name == "w64s64"
    for bad, named in (("0", "window 0"), ("10:20", "stride 20"), ("ten", "'ten'")):
        with pytest.raises(PassageError, match=named):
            PassageSpec.parse(bad)
    with pytest.raises(PassageError, match="at most 254"):
        check_window(PassageSpec(256, 200), 254, MODEL)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, os_client):
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.indexers.passages import PassageSpec
    from evalctl.models import get_model

    root = tmp_path_factory.mktemp("passages")
    mp = private_cache(root)
    c = import_corpus("beir", [write_known_item_beir(root / "beir", 30)], name=f"psg-{uuid.uuid4().hex[:8]}").corpus
    first = index_corpus(os_client, c, [load_views()["A"]], get_model(MODEL), progress=False,
                         passages={"A": (PassageSpec.parse(SETTINGS[0]),)})
    assert first.n_loaded == 30
    yield c.name
    os_client.indices.delete(index=f"{corpus_alias(c.name)}--*", ignore_unavailable=True)
    mp.undo()


def _maxp(corpus: str, setting: str, method: str = "dense-maxp", k: int = 10, fusion_mode: str = "native"):
    from evalctl.evaluators.retrieval.params import RetrievalParams
    from evalctl.evaluators.retrieval.retrieve import retrieval_spec, retrieve
    from evalctl.opensearch.connection import make_client

    spec = retrieval_spec(RetrievalParams(corpus, "A", method, MODEL, qrels="given", split="test", k=k,
                                          passages=setting, fusion_mode=fusion_mode))
    return retrieve(make_client(), spec)


@pytest.mark.models
def test_dense_maxp_equals_an_exact_maxp_computed_here(os_client, corpus):
    """Each patent's score is its best passage's, as cosine over every passage vector computed in the test with
    sentence-transformers itself: the same top 10, scores within 1e-5."""
    from sentence_transformers import SentenceTransformer

    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.retrieval.query_bodies import exact_maxp_body, maxp_body
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.models import get_model

    run, exact = _maxp(corpus, SETTINGS[0]), _maxp(corpus, SETTINGS[0], "exact-maxp")
    index, path = index_name(corpus, MODEL), "psg_A_w32s24"
    hits = os_client.search(index=index, body={"size": 100, "_source": [f"{path}.text", f"{path}.start", f"{path}.end"],
                                               "query": {"match_all": {}}})
    passages = [(h["_id"], p["text"]) for h in hits["hits"]["hits"] for p in h["_source"][path]]
    spans = np.array([[p["start"], p["end"]] for h in hits["hits"]["hits"] for p in h["_source"][path]])
    assert len(passages) > 3 * 30  # several passages a patent
    st = SentenceTransformer(str(offline_model_dir(get_model(MODEL))), device="cpu")
    vectors = st.encode([t for _, t in passages], normalize_embeddings=True, batch_size=64)
    c = load_corpus(corpus)
    queries = load_query_set(c, load_qrels(c, "given"), "test", "A")
    asked = [q for q in queries.ids if q in queries.texts]
    query_vectors = st.encode([queries.texts[q] for q in asked], normalize_embeddings=True)
    owners = np.array([d for d, _ in passages])
    for q, qv in zip(asked, query_vectors):
        scores = (1 + vectors @ qv) / 2  # the lucene engine's cosine score
        best = {d: float(scores[owners == d].max()) for d in set(owners) - queries.exclude[q]}
        expected = sorted(best.items(), key=lambda x: -x[1])[:10]
        for got in (run.ranking[q], exact.ranking[q]):
            assert [d for d, _ in got] == [d for d, _ in expected], q
            assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-5), q
        # each hit names its best passage: the offsets of the passage scored highest here
        where = {d: spans[owners == d][scores[owners == d].argmax()].tolist() for d, _ in expected}
        assert run.best_passages()[q] == exact.best_passages()[q] == where, q
    # the exclusion filters patents, not passages, and the engine still fills the depth
    top = [d for d, _ in expected[:3]]
    for body in (maxp_body(path, qv, 10, top), exact_maxp_body(path, qv, "cosinesimil", 10, top)):
        ids = [h["_id"] for h in os_client.search(index=index, body=body)["hits"]["hits"]]
        assert len(ids) == 10 and not set(ids) & set(top) and ids[:7] == [d for d, _ in expected[3:10]]


@pytest.mark.models
def test_sump_and_avgp_rerank_the_maxp_candidates_and_bm25_maxp_takes_the_best_passage(os_client, corpus):
    """dense-sump / dense-avgp: the k patents dense-maxp finds, each scored by the sum / mean of every one of its
    passages' scores, computed here from the passage vectors read back, its best passage named the one of the highest
    score; bm25-maxp: a patent's score is the best of its passages' BM25 scores (the same query's inner hits score
    each passage)."""
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.retrieval.query_bodies import bm25_maxp_body
    from evalctl.indexers.index_layout import index_name

    index, path = index_name(corpus, MODEL), "psg_A_w32s24"
    hits = os_client.search(index=index, body={"size": 100, "_source": [f"{path}.vec", f"{path}.start", f"{path}.end"],
                                               "query": {"match_all": {}}})["hits"]["hits"]
    vectors = {h["_id"]: np.array([p["vec"] for p in h["_source"][path]]) for h in hits}
    spans = {h["_id"]: [[p["start"], p["end"]] for p in h["_source"][path]] for h in hits}
    c = load_corpus(corpus)
    queries = load_query_set(c, load_qrels(c, "given"), "test", "A")
    maxp = _maxp(corpus, SETTINGS[0])
    qvec = _query_vectors(maxp)
    for method, pool in (("dense-sump", np.sum), ("dense-avgp", np.mean)):
        run = _maxp(corpus, SETTINGS[0], method)
        for q, ranked in run.ranking.items():
            if q not in qvec:
                continue
            expected = sorted(((d, float(pool((1 + vectors[d] @ qvec[q]) / 2))) for d, _ in maxp.ranking[q]),
                              key=lambda x: -x[1])
            assert [d for d, _ in ranked] == [d for d, _ in expected], (method, q)
            assert np.allclose([s for _, s in ranked], [s for _, s in expected], atol=1e-5), (method, q)
            best = run.best_passages()[q]
            assert {d: best[d] for d, _ in ranked} == {d: spans[d][int(np.argmax(vectors[d] @ qvec[q]))]
                                                        for d, _ in ranked}, (method, q)
    run = _maxp(corpus, SETTINGS[0], "bm25-maxp")
    for q in [q for q in queries.ids if q in queries.texts][:5]:
        body = bm25_maxp_body(path, queries.texts[q], 10, queries.exclude[q])
        body["query"]["bool"]["must"][0]["nested"]["inner_hits"] = {"size": 100, "_source": False}
        got = os_client.search(index=index, body=body)["hits"]["hits"]
        engine = sorted(((h["_id"], h["_score"]) for h in got), key=lambda x: (-x[1], x[0]))  # the run's tie order
        assert engine == [(d, pytest.approx(s, abs=1e-6)) for d, s in run.ranking[q]]
        for h in got:
            assert h["_score"] == max(i["_score"] for i in h["inner_hits"][path]["hits"]["hits"])
        assert not {h["_id"] for h in got} & queries.exclude[q]


def _query_vectors(run) -> dict:
    """{query id: its vector} as the run encoded it (the embedding cache)."""
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.models import get_model

    c = load_corpus(run.manifest["corpus"])
    queries = load_query_set(c, load_qrels(c, "given"), "test", "A")
    asked = [q for q in queries.ids if q in queries.texts]
    return dict(zip(asked, get_or_encode(get_model(MODEL), "query", "A", asked, [queries.texts[q] for q in asked])))


@pytest.mark.neural_search
@pytest.mark.models
def test_hybrid_and_rrf_fuse_bm25_with_the_passage_clause_natively(os_client, corpus):
    """hybrid-maxp and rrf-maxp are one request through the pipeline, whose scores are the plugin's fusion
    (neural_reference) of the BM25 hits and the MaxP hits each clause returns alone."""
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.fusion.neural_reference import normalized_fusion, rrf
    from evalctl.evaluators.fusion.search_pipelines import pipeline_body
    from evalctl.evaluators.fusion.settings import FusionSpec
    from evalctl.evaluators.retrieval.query_bodies import bm25_body, hybrid_of, maxp_body, maxp_clause
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.indexers.index_layout import index_name
    from evalctl.models import get_model

    def hits(body):
        return [(h["_id"], h["_score"]) for h in os_client.search(index=index, body=body)["hits"]["hits"]]

    index, path, size = index_name(corpus, MODEL), "psg_A_w32s24", 10
    c = load_corpus(corpus)
    queries = load_query_set(c, load_qrels(c, "given"), "test", "A")
    asked = [q for q in queries.ids if q in queries.texts][:3]
    vectors = get_or_encode(get_model(MODEL), "query", "A", asked, [queries.texts[q] for q in asked])
    for q, vec in zip(asked, vectors):
        text, exclude = queries.texts[q], queries.exclude[q]
        lists = [hits(bm25_body("text_A", text, size, exclude)), hits(maxp_body(path, vec, size, exclude))]
        for fusion in (FusionSpec("linear", dense_weight=0.3), FusionSpec("rrf", rank_constant=60)):
            body = hybrid_of("text_A", text, maxp_clause(path, vec, size), size, exclude, pipeline_body(fusion))
            body["size"] = 30  # every fused patent
            expected = (rrf(lists, fusion.weights, 60) if fusion.technique == "rrf" else
                        normalized_fusion(lists, fusion.weights, fusion.normalization, fusion.combination))
            native = hits(body)
            assert {d for d, _ in native} == set(expected), q
            for doc, score in native:
                assert score == pytest.approx(expected[doc], rel=1e-4, abs=1e-5), (q, doc)
    for method in ("hybrid-maxp", "rrf-maxp"):  # the methods send that body, one request a query
        run = _maxp(corpus, SETTINGS[0], method)
        assert run.manifest["fusion_mode"] == "native" and run.manifest["passages"] == "w32s24"
        assert run.best_passages()  # the passage clause names each of its hits' best passage inside the hybrid query
        assert sum(bool(r) for r in run.ranking.values()) >= len(run.ranking) - 1  # the nonsense query may miss


@pytest.mark.models
def test_client_fusion_of_passages_fuses_the_bm25_and_maxp_runs(os_client, corpus):
    """On a node without neural-search, rrf-maxp and hybrid-maxp are ranx fusion of the stored BM25 (document) and
    dense-maxp runs of the same setting and depth: RRF as the reference arithmetic computes it from those runs."""
    from evalctl.evaluators.fusion.neural_reference import rrf
    from evalctl.evaluators.scoring.runs import load_run

    run = _maxp(corpus, SETTINGS[0], "rrf-maxp", fusion_mode="client")
    parts = [load_run(i) for i in run.manifest["components"]]
    assert [(p.manifest["method"], p.manifest.get("passages")) for p in parts] == [("bm25", None),
                                                                                    ("dense-maxp", "w32s24")]
    assert run.manifest["passages"] == "w32s24" and run.label.startswith("rrf-maxp/client@w32s24:")
    for q, docs in run.ranking.items():
        expected = rrf([p.ranking.get(q, []) for p in parts], [1.0, 1.0], 60)
        assert dict(docs) == pytest.approx({d: expected[d] for d, _ in docs}), q
        assert len(docs) == min(10, len(expected))
        maxp_best = parts[1].best_passages().get(q, {})  # the passage part's best passages, for the hits it found
        assert run.best_passages().get(q, {}) == {d: maxp_best[d] for d, _ in docs if d in maxp_best}
    assert run.best_passages()
    hybrid = _maxp(corpus, SETTINGS[0], "hybrid-maxp", fusion_mode="client")
    assert hybrid.manifest["components"] == run.manifest["components"]  # the same two runs, reused


@pytest.mark.models
def test_settings_are_identities_and_a_reload_encodes_nothing_again(os_client, corpus):
    """A second setting joins the same index (every document sent again with both), each setting its own cache
    entry and run identity; a third load of the same settings loads and encodes nothing."""
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.evaluators.retrieval.retrieve import RetrievalError
    from evalctl.indexers.embedding_cache import EmbeddingCache
    from evalctl.indexers.encoder import cache_key
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import index_corpus, read_manifest
    from evalctl.indexers.passages import PassageSpec, passage_unit
    from evalctl.models import get_model

    model, c, view = get_model(MODEL), load_corpus(corpus), load_views()["A"]
    both = tuple(PassageSpec.parse(s) for s in SETTINGS)
    assert index_corpus(os_client, c, [view], model, passages={"A": both}, progress=False).n_loaded == 30
    prompt = model.prompt_for("document", task_type="retrieval")
    entries = [EmbeddingCache(cache_key(model, "document", passage_unit("A", p), None, prompt=prompt)) for p in both]
    assert len({e.dir for e in entries}) == 2 and all(len(e) > 30 for e in entries)
    runs_before = [len(e.runs()) for e in entries]
    again = index_corpus(os_client, c, [view], model, passages={"A": both}, progress=False)
    assert again.n_loaded == 0 and [len(e.runs()) for e in entries] == runs_before  # nothing encoded again
    cost = read_manifest(os_client, index_name(c.name, MODEL))["cost"]  # patents, not Lucene's nested documents
    assert cost["documents"] == 30 and cost["vector_counts"] == {"A": 30, **{passage_unit("A", p): len(e)
                                                                            for p, e in zip(both, entries)}}

    ids = {_maxp(corpus, s).id for s in SETTINGS}
    assert len(ids) == 2 and all("w32s24" in i or "w48s36" in i for i in ids)
    with pytest.raises(RetrievalError, match="no passages w64s48 of view A"):
        _maxp(corpus, "64")


def test_a_window_longer_than_the_model_takes_is_refused_before_the_index_changes(os_client, corpus):
    """A window over the model's 254 tokens is refused before the mapping or _meta names it: the index stays as it
    was, and the next load of its own settings goes on (it once failed naming the refused setting, every time)."""
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import index_corpus, read_manifest
    from evalctl.indexers.passages import PassageError, PassageSpec
    from evalctl.models import get_model

    model, c, view = get_model(MODEL), load_corpus(corpus), load_views()["A"]
    name = index_name(c.name, MODEL)
    before = (read_manifest(os_client, name), os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"])
    with pytest.raises(PassageError, match="a window of 1000 tokens is longer than model all-minilm-l6-v2 takes"):
        index_corpus(os_client, c, [view], model, passages={"A": (PassageSpec.parse("1000"),)}, progress=False)
    after = (read_manifest(os_client, name), os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"])
    assert after == before
    again = index_corpus(os_client, c, [view], model, passages={"A": (PassageSpec.parse(SETTINGS[0]),)},
                         progress=False)
    assert again.n_loaded == 0


def test_a_document_over_the_nested_object_limit_is_refused_naming_the_setting_and_the_count(os_client, corpus):
    """The node refuses a document with more passages than index.mapping.nested_objects.limit: the load says so, with
    the count, instead of advising to correct the record (lowered here to 3 on one document sent again)."""
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.indexers.passages import PassageSpec
    from evalctl.models import get_model

    model, c, view = get_model(MODEL), load_corpus(corpus), load_views()["A"]
    name = index_name(c.name, MODEL)
    victim = next(iter(c.records())).id
    os_client.delete(index=name, id=victim, refresh=True)
    os_client.indices.put_settings(index=name, body={"index.mapping.nested_objects.limit": 3})
    try:
        report = index_corpus(os_client, c, [view], model, passages={"A": (PassageSpec.parse(SETTINGS[0]),)},
                              progress=False)
    finally:
        os_client.indices.put_settings(index=name, body={"index.mapping.nested_objects.limit": 10000})
    assert report.explained == 1 and len(report.failed) == 1 and report.failed[0].startswith(f"{victim}: its passages (")
    assert "are more than the 3 nested objects a document may hold" in report.failed[0]
    assert index_corpus(os_client, c, [view], model, passages={"A": (PassageSpec.parse(SETTINGS[0]),)},
                        progress=False).n_loaded == 1  # the limit back: the rerun loads it


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_a_study_spec_asking_for_passages_is_refused_by_name(tmp_path, monkeypatch):
    """A study entry has no passage setting yet: a passage method there is refused naming the entry, not run."""
    import yaml
    from click.testing import CliRunner

    from conftest import ESPACENET
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "psg-spec", "models": [{"id": MODEL}],
        "corpora": [{"name": "psg-spec", "format": "espacenet", "sources": [str(ESPACENET)],
                     "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
        "retrieval": [{"corpus": "psg-spec", "views": ["T"], "methods": ["dense", "dense-maxp"]}]}))
    r = CliRunner().invoke(cli, ["run", str(spec), "--dry-run"])
    assert r.exit_code == 2 and "retrieval[0]: method dense-maxp searches passages" in r.output, r.output
