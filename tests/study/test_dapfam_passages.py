"""DAPFAM's document-vs-passage spec (configs/experiments/dapfam-passages.yaml) run on a small slice in DAPFAM's own
layout: real USPTO grants (the dataset uspto-grants-2019: title, abstract, full claims) written with DAPFAM's columns
into corpus.parquet and queries.parquet, relations with relevance scores and IN/OUT labels made by hand in
qrels_all.parquet. DAPFAM itself is out of reach here (Hugging Face), and no real description text is, so the slice
has no description_en and the spec runs on its TAC view; its all-MiniLM-L6-v2 entry otherwise runs as shipped, with
one of its passage settings."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from report_tables import section_tables
from retrieval_data import grants

TARGETS, QUERIES = 10, 3
# (query, target, relevance_score, domain_rel): DAPFAM's own columns, the labels taken as given
RELATIONS = [(0, 0, 1.0, "IN"), (0, 4, 1.0, "OUT"), (1, 1, 2.0, "IN"), (1, 7, 1.0, "OUT"), (2, 2, 1.0, "OUT"),
             (2, 9, 1.0, "IN"), (2, 5, 0.0, "IN")]


def _slice(root):
    rows = grants(TARGETS + QUERIES, skip=20)

    def text(r):
        claims = r["claims_text"].strip("[]")  # the CSV's list of claims, as one text as DAPFAM gives it
        return {"title_en": r["patent_title"], "abstract_en": r["abstract"], "claims_text": claims,
                "description_en": None}
    root.mkdir()
    pd.DataFrame([{"relevant_id": f"T{i}", **text(r)} for i, r in enumerate(rows[:TARGETS])]).to_parquet(
        root / "corpus.parquet")
    pd.DataFrame([{"query_id": f"Q{i}", **text(r)} for i, r in enumerate(rows[TARGETS:])]).to_parquet(
        root / "queries.parquet")
    pd.DataFrame([{"query_id": f"Q{q}", "relevant_id": f"T{t}", "relevance_score": s, "domain_rel": d}
                  for q, t, s, d in RELATIONS]).to_parquet(root / "qrels_all.parquet")
    return root


@pytest.mark.opensearch
@pytest.mark.models
def test_the_dapfam_spec_compares_documents_with_passages_on_a_slice(os_client, tmp_path, monkeypatch):
    from evalctl.cli.main import cli
    from evalctl.corpus.store import load_corpus
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import experiment_path, load_experiment

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    doc = yaml.safe_load(experiment_path("dapfam-passages").read_text())
    corpus, model = f"dapfam-{uuid.uuid4().hex[:6]}", "all-minilm-l6-v2"
    # the spec's own corpus in DAPFAM's layout: a folder of DAPFAM's three files, as the dataset's are
    doc["corpora"][0] = {**{k: v for k, v in doc["corpora"][0].items() if k != "dataset"}, "name": corpus,
                         "format": "dapfam", "sources": [str(_slice(tmp_path / "dapfam"))]}
    entry = next(e for e in doc["retrieval"] if e["models"] == [model])
    entry.update(corpus=corpus, views=["TAC"], passages=entry["passages"][:1])
    doc.update(retrieval=[entry], models=[{"id": model}])
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    setting = "w128s96"
    try:
        steps = {s.key for s in plan(load_experiment(str(path)))}
        assert {f"index {corpus} {model} [TAC] [TAC@{setting}]",
                *(f"retrieve {corpus} {model} TAC {m} {setting}" for m in ("dense-maxp", "bm25-maxp", "rrf-maxp")),
                f"retrieve {corpus} {model} TAC dense-maxp {setting} chunked"} <= steps
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and "0 failed" in r.output, r.output
        records = list(load_corpus(corpus).records())
        assert len(records) == TARGETS and all(len(rec.claims) > 1 for rec in records)  # the claims came in, split

        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        scores, costs = section_tables(md, "Document vs passage")
        pairs = {(row["document"].split(" · ")[0].split(" (")[0], row["passages"]) for row in scores}  # RRF (how)
        assert pairs == {("Dense", setting), ("Dense", f"{setting}, queries chunked"), ("BM25", setting),
                         ("RRF", setting)}
        for row in scores:  # the given IN/OUT labels split the queries: each domain has some
            assert row["IN change"] != "no queries" and row["OUT change"] != "no queries"
        # TAC with its claims is longer than MiniLM takes, for every target: what the passages are for
        truncated = {row["truncated by the model"] for row in costs if row["truncated by the model"] != "none"}
        assert {t.split(":")[0] for t in truncated} == {"documents", "none; queries (chunked here)"}
        documents = [t for t in truncated if t.startswith("documents")]
        assert all(t.startswith(f"documents: 100% of {TARGETS} over 254 tokens") for t in documents)
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)

