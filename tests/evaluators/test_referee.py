"""Peers as referees: exports round-trip through evalctl's own BEIR/DAPFAM importers; trec_eval
(pytrec_eval) agrees with evalctl's metrics on a hand-made run with ties; and on a real landscape,
trec_eval, MTEB (dense, same model) and Pyserini (Lucene BM25) score the very task evalctl scores.

The landscape is the EPO OPS pizza dataset's 2011-2015 pages (view TA, citation qrels). Each test naming an
optional tool skips, naming it, when the tool is missing.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import uuid
from pathlib import Path

import pytest

from conftest import share_embeddings
from real_data import OPS, USPTO_60

MODEL = "all-minilm-l6-v2"


def _needs(module: str, package: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{package} is not installed (pip install 'evalctl[referee]')")


needs_trec_eval = _needs("pytrec_eval", "pytrec-eval-terrier")
needs_mteb = _needs("mteb", "mteb")
needs_pyserini = _needs("pyserini", "pyserini")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --------------------------------------------------------------------------- a citation corpus with families

# id, family, ipc, cited ids: P1 and P2 are one family (EP member), so exclusion drops the member.
LAYOUT = [
    ("US9000001", "F1", ["A61K31/00"], ["US9000003", "US9000005"]),
    ("EP3000002", "F1", ["A61K31/00"], []),
    ("US9000003", None, ["A61K9/00"], []),
    ("US9000004", None, ["G06F3/01"], ["US9000006", "US9000007"]),
    ("US9000005", None, ["B65D81/00"], []),
    ("US9000006", None, ["G06F16/00"], []),
    ("US9000007", None, [], []),
    ("EP3000008", None, ["H04L9/00"], ["EP3000009", "US9000003"]),
    ("EP3000009", None, ["H04W4/00"], []),
]


def _grants() -> list[dict]:
    csv.field_size_limit(1 << 24)
    with open(USPTO_60, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["patent_title"].strip() and r["abstract"].strip()]


def _citation_corpus(tmp_path: Path):
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.import_formats.fields import split_claims
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels

    rows = _grants()
    path = tmp_path / "cit.jsonl"
    with open(path, "w") as f:
        for (rid, fam, ipc, cites), r in zip(LAYOUT, rows[10:]):
            f.write(json.dumps({
                "id": rid, "jurisdiction": rid[:2], "family_id": fam, "title": r["patent_title"],
                "abstract": r["abstract"], "claims": [{"text": c.text, "independent": c.independent}
                                                      for c in split_claims(r["claims_text"])[:3]],
                "ipc": ipc, "citations": [{"target": t, "type": "search_report", "direction": "cited"} for t in cites],
            }) + "\n")
    corpus = import_corpus("native", [path], name="cit").corpus
    return corpus, build_citation_qrels(corpus, QrelsSpec(dev_fraction=0.0))


# --------------------------------------------------------------------------- export round trips


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_beir_export_round_trips_through_the_beir_importer(tmp_path):
    from evalctl.corpus.export import export_landscape, read_beir_export
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.views import load_views

    corpus, qset = _citation_corpus(tmp_path)
    views = load_views()
    s = export_landscape(corpus, qset, "beir", tmp_path / "beir", view="TA", split="test")
    assert (s.documents, s.queries, s.pairs, s.queries_without_text) == (9, 3, 6, 0)
    back = import_corpus("beir", [tmp_path / "beir"], name="back").corpus
    original = {r.id: r for r in corpus.records()}
    # records: title and the view's other fields come back; title + separator + text is the view again
    assert {r.id: views["TA"].render(r) for r in back.records()} == {i: views["TA"].render(r) for i, r in original.items()}
    # queries: the query view's text (importers collapse whitespace runs, the view's "\n" included)
    assert {q.id: q.abstract for q in back.queries()} == {q: " ".join(views["TA"].render(original[q]).split())
                                                          for q in qset.qrels("test")}
    # qrels: the same pairs and scores
    assert load_qrels(back, "given").qrels() == qset.qrels(split="test")
    # the family exclusion BEIR cannot carry travels beside it
    task = read_beir_export(tmp_path / "beir")
    assert task.excluded["US9000001"] == {"US9000001", "EP3000002"}
    assert task.corpus["US9000001"]["title"] == original["US9000001"].title


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_dapfam_export_round_trips_through_the_dapfam_importer(tmp_path):
    import pyarrow.parquet as pq

    from evalctl.corpus.export import export_landscape
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.views import field_text, load_views

    corpus, qset = _citation_corpus(tmp_path)
    export_landscape(corpus, qset, "dapfam", tmp_path / "dapfam", view="TAC", split="test", query_view="TA")
    assert pq.read_schema(tmp_path / "dapfam" / "qrels_all.parquet").names == [
        "query_id", "relevant_id", "relevance_score", "domain_rel"]
    assert pq.read_table(tmp_path / "dapfam" / "queries.parquet").column("claims_text").null_count == 3  # TA queries
    back = import_corpus("dapfam", [tmp_path / "dapfam"], name="back")
    assert not back.problems
    original = {r.id: r for r in corpus.records()}
    fields = ("title", "abstract", "claims")
    assert {r.id: [field_text(r, f) for f in fields] for r in back.corpus.records()} == \
        {i: [field_text(r, f) for f in fields] for i, r in original.items()}
    assert {q.id: load_views()["TA"].render(q) for q in back.corpus.queries()} == \
        {q: load_views()["TA"].render(original[q]) for q in qset.qrels("test")}
    got = load_qrels(back.corpus, "given")
    assert got.qrels() == qset.qrels(split="test")
    # IN/OUT labels travel; a pair without codes on one side stays unlabelled
    assert {(p.query_id, p.doc_id): p.domain for p in got.pairs} == \
        {(p.query_id, p.doc_id): p.domain for p in qset.pairs}


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_export_names_a_bad_view_or_split(tmp_path):
    from evalctl.corpus.export import ExportError, export_landscape

    corpus, qset = _citation_corpus(tmp_path)
    with pytest.raises(ExportError, match="unknown view 'XY'"):
        export_landscape(corpus, qset, "beir", tmp_path / "x", view="XY", split="test")
    with pytest.raises(ExportError, match="no 'dev' queries"):
        export_landscape(corpus, qset, "beir", tmp_path / "x", view="TA", split="dev")
    assert not (tmp_path / "x").exists()


@needs_mteb
@pytest.mark.parametrize("task_name, domain", [("DAPFAMAllTitlAbsToTitlAbsClmRetrieval", None),
                                               ("DAPFAMInTitlAbsToTitlAbsClmRetrieval", "IN"),
                                               ("DAPFAMOutTitlAbsToTitlAbsClmRetrieval", "OUT")])
@pytest.mark.slow  # imports MTEB
def test_mteb_own_dapfam_tasks_read_the_export_offline(tmp_path, monkeypatch, task_name, domain):
    """MTEB's DAPFAM code builds its texts from the export: queries exactly evalctl's view, documents
    title + " " + the rest joined by "\n" with claims as numbered in DAPFAM's claims_text."""
    import datasets

    from evalctl.corpus.export import export_landscape
    from evalctl.evaluators.referee.peers import mteb_dapfam_task
    from evalctl.corpus.views import load_views

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    corpus, qset = _citation_corpus(tmp_path)
    export_landscape(corpus, qset, "dapfam", tmp_path / "dapfam", view="TAC", split="test", query_view="TA")
    docs, queries, qrels = mteb_dapfam_task(tmp_path / "dapfam", task_name).load_data()
    views, original = load_views(), {r.id: r for r in corpus.records()}
    assert queries["train"] == {q: views["TA"].render(original[q]) for q in qset.qrels("test")}
    for rid, r in original.items():
        numbered = "\n".join(f"{i}. {c.text}" for i, c in enumerate(r.claims, 1))
        assert docs["train"][rid] == {"title": r.title, "text": f"{r.abstract}\n{numbered}"}
    assert qrels["train"] == qset.qrels(split="test", domain=domain)


# --------------------------------------------------------------------------- trec_eval on a hand-made run


@needs_trec_eval
def test_trec_eval_agrees_with_evalctl_metrics_including_ties_and_empty_runs():
    from evalctl.evaluators.referee.peers import trec_eval_scores
    from evalctl.evaluators.scoring.runs import ranked
    from evalctl.evaluators.scoring.metrics import METRICS, score

    qrels = {"q1": {"d1": 1, "d3": 1}, "q2": {"d9": 1}, "q3": {"x": 1}, "q4": {"a": 2, "b": 1}}
    ranking = {
        "q1": ranked([("d3", 0.5), ("d2", 0.9), ("d1", 0.5)]),  # a tie evalctl breaks by id: d2, d1, d3
        "q2": [],
        "q3": ranked([(f"n{i:02d}", 1.0 - i / 100) for i in range(10)] + [("x", 0.5)]),
        # q4 is not in the run at all; graded relevance
    }
    ranking["q5"] = [("a", 1.0)]  # a run query without qrels is not scored by either
    ours = score(ranking, qrels).per_query
    theirs = trec_eval_scores(ranking, qrels)
    for m in METRICS:
        assert theirs[m] == pytest.approx(ours[m], abs=1e-9), m
    # the tie order matters: trec_eval on the raw engine scores would put d3 (larger id) before d1
    assert ours["map@100"]["q1"] == pytest.approx((1 / 2 + 2 / 3) / 2)


# --------------------------------------------------------------------------- the real landscape


def _ops_landscape(root: Path) -> dict:
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels

    # The 2011-2015 pages (689 patents, 85 citation queries): every referee still sees real citations, and
    # MTEB's second encoding of the corpus costs a quarter of the whole sample's (that was 16 min of the suite).
    pages = sorted(OPS.glob("pizza_2011-2015_*.json.gz"))
    corpus = import_corpus("ops", pages, name=f"ref-ops-{uuid.uuid4().hex[:8]}").corpus
    build_citation_qrels(corpus, QrelsSpec(direction="both"))
    return {"corpus": corpus.name, "view": "TA", "query_view": None, "qrels": "citations"}


@pytest.fixture(scope="module")
def refereed(tmp_path_factory, os_client):
    from evalctl.evaluators.referee.table import LandscapeSpec, referee_landscape
    from evalctl.indexers.index_layout import corpus_alias

    root = tmp_path_factory.mktemp("referee")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    share_embeddings(root / "cache")  # the 2011-2015 texts the report page's tests encode too
    land = _ops_landscape(root)
    try:
        yield referee_landscape(os_client, LandscapeSpec(model=MODEL, **land), root / "out")
    finally:
        os_client.indices.delete(index=f"{corpus_alias(land['corpus'])}--*", ignore_unavailable=True)
        mp.undo()


def _rows(report, referee: str):
    if referee in report.skipped:
        pytest.skip(f"{referee}: {report.skipped[referee]}")
    return [r for r in report.rows if r.referee == referee]


@pytest.mark.opensearch
@pytest.mark.models
@needs_trec_eval
def test_trec_eval_scores_evalctl_runs_identically(refereed):
    rows = _rows(refereed, "trec_eval")
    assert {r.system for r in rows} == {"exact", "dense", "bm25"} and len(rows) == 18
    for r in rows:
        assert abs(r.diff) <= 1e-6, r


@pytest.mark.opensearch
@pytest.mark.models
def test_the_nodes_rank_eval_scores_evalctl_runs_identically(refereed):
    """The node searches each run's bodies again, ties in evalctl's order: every query's nDCG@10, recall@100 and
    MRR@10 equal ranx's but where a tie crosses the metric's cut (the run kept the engine's pick of the tied
    documents, `_rank_eval` the lowest ids), which a k-NN search cannot have; native fusion is listed as what it
    cannot judge."""
    rows = _rows(refereed, "_rank_eval")
    assert {(r.system, r.metric) for r in rows} == {(s, m) for s in ("exact", "dense", "bm25")
                                                    for m in ("ndcg@10", "recall@100", "mrr@10")}
    at_cut = refereed.facts["_rank_eval queries that differ at a tie across the metric's cut"]
    n = refereed.export["queries"]
    for r in rows:
        assert abs(r.diff) <= at_cut[r.system][r.metric] / n + 1e-9, (r, at_cut)
    assert not any(at_cut["dense"].values())
    assert max(refereed.facts["_rank_eval largest per-query difference (not at a tie across the cut)"].values()) <= 1e-6
    assert "search_pipeline" in refereed.facts["_rank_eval cannot judge"]
    tie_aware = refereed.facts["evalctl tie-aware (every order of the ties)"]
    assert set(tie_aware) == {"exact", "dense", "bm25"} and all(set(v) == {"ndcg@10", "recall@100", "mrr@10"}
                                                                for v in tie_aware.values())


@pytest.mark.opensearch
@pytest.mark.models
@needs_mteb
def test_mteb_dense_matches_evalctl_exact(refereed):
    rows = _rows(refereed, "MTEB")
    assert [r.metric for r in rows] == ["ndcg@10", "ndcg@100"]
    assert refereed.facts["MTEB top-10 overlap with evalctl exact"] >= 0.98
    # what is left is tie order (identical texts score alike): MTEB's own ranking in evalctl's tie order,
    # and evalctl's run in trec_eval's tie order, each land next to the other tool's number
    unrounded = refereed.facts["MTEB ranking scored by evalctl (unrounded)"]
    in_trec_order = refereed.facts["evalctl exact in trec_eval's tie order (engine scores)"]
    # MTEB encodes the texts itself: its vectors differ from evalctl's by float noise (another batch
    # composition and padding), which can swap two near-tied documents. One swap moves one query's
    # nDCG by at most 1 - 1/log2(3) (ranks 1 and 2, binary gains), the mean by that over the number of
    # queries; two such swaps are allowed, plus MTEB's rounding to 5 decimals. A real difference in
    # scoring moves many queries and exceeds this.
    n_queries = refereed.export["queries"]
    tie_swaps = 2 * (1 - 1 / math.log2(3)) / n_queries + 1e-5
    for r in rows:
        assert abs(unrounded[r.metric] - r.evalctl) <= tie_swaps, (r, unrounded, tie_swaps)
        assert abs(in_trec_order[r.metric] - r.value) <= tie_swaps, (r, in_trec_order, tie_swaps)
        assert abs(r.diff) <= 2 * tie_swaps, r  # MTEB's number against evalctl's: both effects at once


@pytest.mark.opensearch
@pytest.mark.models
@needs_pyserini
def test_pyserini_bm25_is_close_to_opensearch_bm25(refereed):
    rows = {r.metric: r for r in _rows(refereed, "Pyserini")}
    assert refereed.facts["Pyserini"]["k1"] == 1.2 and refereed.facts["Pyserini"]["b"] == 0.75
    assert refereed.facts["Pyserini"]["documents"] == refereed.export["documents"]
    assert abs(rows["ndcg@10"].diff) <= 0.01, rows["ndcg@10"]
    assert refereed.facts["Pyserini top-10 overlap with evalctl bm25"] >= 0.9


def test_referee_table_puts_each_referee_beside_evalctl():
    from evalctl.evaluators.referee.peers import Row, format_table

    rows = [Row("exact", "ndcg@10", 0.5, "trec_eval", 0.5), Row("bm25", "ndcg@10", 0.4, "trec_eval", 0.4),
            Row("exact", "ndcg@10", 0.5, "MTEB", 0.501), Row("bm25", "ndcg@10", 0.4, "Pyserini", 0.39)]
    head, _, line = [[c.strip() for c in row.strip().strip("|").split("|")] for row in format_table(rows).splitlines()]
    assert head == ["metric", "evalctl exact", "trec_eval (exact)", "MTEB (exact)", "evalctl bm25", "trec_eval (bm25)",
                    "Pyserini (bm25)"]
    assert line == ["ndcg@10", "0.500000", "0.500000 (+0.000000)", "0.501000 (+0.001000)", "0.400000",
                    "0.400000 (+0.000000)", "0.390000 (-0.010000)"]
