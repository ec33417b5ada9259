"""The retrieval section's per-query pages, one per corpus and view with citation qrels: each query's cited patents,
every system's rank for each (within the run's depth k), and the citations no system finds.

A page opens with the view's headline pair (its best system against BM25, or against the runner-up when BM25 is
best): win/tie/loss over the queries and a plot of the per-query differences. Its index links every query to
its section. Queries with at least two citations are ranked by how much the systems disagree on them (the spread
of their nDCG@10), so a query where BM25 and dense part, or that a fine-tuned model moved, is near the top; a
query with a single citation has its score set by one document's rank (a large spread from one document is
noise more than disagreement) and is listed after them, by id. The queries are those of the view's widest query set; a system that searched a sample of
them shows "not searched" on the others. Under each query, a passage system (dense-maxp) names the passage of each
citation it found that matched: its character offsets in the view's text and its words."""

from __future__ import annotations

from pathlib import Path

from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.study.page.charts import difference_plot
from evalctl.study.page.document import Report, save_figure
from evalctl.study.tasks.retrieval.groups import ViewGroup, query_page_name
from evalctl.study.tasks.retrieval.scores import Score, corpus_letters, view_scores

NOT_SEARCHED = "not searched"  # a system that searched a sample of the queries, on one outside it
MIN_CITED = 2  # a query needs this many citations to be ranked by the systems' spread
QUERY = "Query {}"  # a query's heading, which the index links to


def query_pages(report: Report, groups: list[ViewGroup], out: Path) -> list[tuple[str, Report]]:
    """(file name without suffix, page) for each view group of the report that has citation qrels; the pages'
    plots are saved into `out`."""
    letters = corpus_letters(groups)
    return [(query_page_name(g), _page(g, out, {r.system_name: letters[(g.corpus, r.system_name)] for r in g.runs},
                                       report.statistics)) for g in groups if not g.known_item]


def headline_pair(scores: dict[str, Score]) -> tuple[Score, Score] | None:
    """(baseline, best) of a view's compared systems: the best against BM25, or against the runner-up when BM25
    is the best or absent; None for fewer than two systems."""
    ranked = sorted((s for s in scores.values() if s.compared), key=lambda s: -s.mean)
    if len(ranked) < 2:
        return None
    best = ranked[0]
    return next((s for s in ranked[1:] if s.method == "bm25"), ranked[1]), best


def _page(g: ViewGroup, out: Path, letters: dict[str, str], protocol: StatsProtocol) -> Report:
    """`letters`: each system's, the report's (one per system across the corpus's views); `protocol`: the
    study's, which the headline pair's scores are computed under."""
    import pandas as pd

    basis = run_queries(g.main_runs[0])
    qset, split = basis.qset, g.runs[0].manifest["split"]
    qrels = basis.judged(split)
    domain = {(p.query_id, p.doc_id): p.domain for p in qset.pairs if split is None or p.split == split}
    scored = view_scores(g, protocol)
    names = [letters[r.system_name] for r in g.runs]
    ranks = [{q: {doc: i for i, (doc, _) in enumerate(hits, 1)} for q, hits in r.ranking.items()} for r in g.runs]
    scores = [evaluate_run(r, metrics=(PRIMARY,)).per_query[PRIMARY] for r in g.runs]
    corpus = load_corpus(g.corpus)
    titles = {rec.id: rec.title or "" for recs in (corpus.records(columns=("title",)), corpus.queries())
              for rec in recs}
    k = g.runs[0].manifest.get("k")
    best = [r.best_passages() for r in g.runs]  # passage systems: each hit's best passage
    cited = {d for ds in qrels.values() for d in ds}
    texts = _view_texts(corpus, g.view, cited) if any(best) else {}

    def rank(i: int, q: str, doc: str) -> str:
        return str(ranks[i].get(q, {}).get(doc, "-")) if q in scores[i] else NOT_SEARCHED

    def ndcg(i: int, q: str):
        return round(scores[i][q], 4) if q in scores[i] else NOT_SEARCHED

    def missed(q: str) -> list[str]:
        return [d for d in qrels[q] if all(d not in r.get(q, {}) for r in ranks)]

    def row(q: str) -> dict:
        return {"query": q, "title": titles.get(q, ""), "cited": len(qrels[q]), "found by none": len(missed(q)),
                **{n: ndcg(i, q) for i, n in enumerate(names)}, "spread": round(spread[q], 4)}

    spread = {q: max(s[q] for s in scores if q in s) - min(s[q] for s in scores if q in s) for q in qrels}
    ranked = sorted((q for q in qrels if len(qrels[q]) >= MIN_CITED), key=lambda q: (-spread[q], q))
    single = sorted(q for q in qrels if len(qrels[q]) < MIN_CITED)
    page = Report(f"Per query: {g.corpus}, view {g.label}")
    page.p(f"{len(qrels)} queries, qrels {g.runs[0].manifest.get('qrels')} ({split or 'all'} split), top {k} "
           f"retrieved per system. A rank of '-' means not in the top {k}. Systems: "
           + "; ".join(f"{letters[s.system]} = {s.title}" for s in scored.values()) + ".")
    _pair(page, g, scored, scores, letters, out)
    page.h("Index")
    page.p(f"The {len(ranked)} queries with at least {MIN_CITED} citations, by the spread of their {PRIMARY} over "
           "the systems (largest first: where the systems disagree most); each links to its section." if ranked
           else f"No query has {MIN_CITED} citations or more: none is ranked.")
    if ranked:
        page.table(pd.DataFrame([row(q) for q in ranked]), anchors={"query": QUERY})
    if single:
        page.p(f"The {len(single)} queries with fewer than {MIN_CITED} citations, not ranked (one document's rank "
               "sets a single citation's score, so its spread says little), by id:")
        page.table(pd.DataFrame([row(q) for q in single]), anchors={"query": QUERY})
    for q in ranked + single:
        page.h(QUERY.format(q))
        page.p(f"{titles.get(q, '')} ({len(qrels[q])} cited)".strip())
        page.table(pd.DataFrame([{"cited": d, "title": titles.get(d, ""), "domain": domain.get((q, d), ""),
                                  **{f"rank {n}": rank(i, q, d) for i, n in enumerate(names)}}
                                 for d in sorted(qrels[q])]))
        lost = missed(q)
        page.p(f"Found by no system in its top {k}: {', '.join(sorted(lost))}." if lost
               else "Every citation is found by at least one system.")
        for i, n in enumerate(names):
            spans = best[i].get(q, {})
            if matched := [d for d in sorted(qrels[q]) if d in spans]:
                page.p(f"The passage that matched, in {n}'s top {k} ({g.view} characters): " + "; ".join(
                    f"{d} (rank {rank(i, q, d)}, {spans[d][0]}-{spans[d][1]}): \"{_excerpt(texts.get(d, ''), *spans[d])}\""
                    for d in matched))
    return page


EXCERPT = 240  # characters of a matched passage a page shows


def _view_texts(corpus, view: str, ids: set[str]) -> dict[str, str]:
    spec = load_views()[view]
    return {r.id: spec.render(r) or "" for r in corpus.records(columns=spec.columns) if r.id in ids}


def _excerpt(text: str, start: int, end: int) -> str:
    part = " ".join(text[start:end].split())
    return part if len(part) <= EXCERPT else part[:EXCERPT - 1] + "…"


def _pair(page: Report, g: ViewGroup, scored: dict[str, Score], scores: list[dict], letters: dict, out: Path) -> None:
    """The headline pair's win/tie/loss over the queries both searched, and its per-query difference plot."""
    pair = headline_pair(scored)
    if pair is None:
        return
    base, best = pair
    a, b = (scores[[r.system_name for r in g.runs].index(s.system)] for s in (base, best))
    diffs = [b[q] - a[q] for q in sorted(set(a) & set(b))]
    wins, ties, losses = sum(d > 0 for d in diffs), sum(d == 0 for d in diffs), sum(d < 0 for d in diffs)
    page.h("Headline pair")
    page.p(f"{letters[best.system]} {best.title} against {letters[base.system]} {base.title}, per query: "
           f"{wins} wins, {ties} ties, {losses} losses over {len(diffs)} queries (a tie is most often both at 0).")
    fig = difference_plot(diffs, f"{PRIMARY} difference", f"{best.title} minus {base.title}: "
                                                          f"{wins} wins, {ties} ties, {losses} losses")
    save_figure(fig, page, out, f"{query_page_name(g)}-pair.png",
                f"Per-query {PRIMARY} difference, {best.title} minus {base.title}, sorted (green: wins, red: losses)")
