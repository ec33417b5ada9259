"""The retrieval section's per-query pages, one per corpus and view with citation qrels: each query's cited patents, every
system's rank for each (within the run's depth k), and the citations no system finds. Queries come in order of
how much the systems disagree on them (the spread of their nDCG@10), so a query where BM25 and dense part, or
that a fine-tuned model moved, is near the top. The queries are those of the view's widest query set; a system
that searched a sample of them shows "not searched" on the others."""

from __future__ import annotations

from evalctl.corpus.store import load_corpus
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.study.page import Report
from evalctl.study.retrieval_groups import ViewGroup, query_page_name

NOT_SEARCHED = "not searched"  # a system that searched a sample of the queries, on one outside it


def query_pages(report: Report, groups: list[ViewGroup]) -> list[tuple[str, Report]]:
    """(file name without suffix, page) for each view group of the report that has citation qrels."""
    return [(query_page_name(g), _page(g)) for g in groups if not g.known_item]


def _page(g: ViewGroup) -> Report:
    import pandas as pd

    basis = run_queries(g.main_runs[0])
    qset, split = basis.qset, g.runs[0].manifest["split"]
    qrels = basis.judged(split)
    domain = {(p.query_id, p.doc_id): p.domain for p in qset.pairs if split is None or p.split == split}
    names = [r.system_name for r in g.runs]
    ranks = [{q: {doc: i for i, (doc, _) in enumerate(hits, 1)} for q, hits in r.ranking.items()} for r in g.runs]
    scores = [evaluate_run(r, metrics=(PRIMARY,)).per_query[PRIMARY] for r in g.runs]
    corpus = load_corpus(g.corpus)
    titles = {rec.id: rec.title or "" for recs in (corpus.records(columns=("title",)), corpus.queries())
              for rec in recs}
    k = g.runs[0].manifest.get("k")

    def rank(i: int, q: str, doc: str) -> str:
        return str(ranks[i].get(q, {}).get(doc, "-")) if q in scores[i] else NOT_SEARCHED

    def ndcg(i: int, q: str):
        return round(scores[i][q], 4) if q in scores[i] else NOT_SEARCHED

    def missed(q: str) -> list[str]:
        return [d for d in qrels[q] if all(d not in r.get(q, {}) for r in ranks)]

    spread = {q: max(s[q] for s in scores if q in s) - min(s[q] for s in scores if q in s) for q in qrels}
    order = sorted(qrels, key=lambda q: (-spread[q], q))
    page = Report(f"Per query: {g.corpus}, view {g.label}")
    page.p(f"{len(order)} queries, qrels {g.runs[0].manifest.get('qrels')} ({split or 'all'} split), top {k} "
           f"retrieved per system. A rank of '-' means not in the top {k}. Queries by the spread of their {PRIMARY} "
           "over the systems, largest first.")
    page.table(pd.DataFrame([{"query": q, "title": titles.get(q, ""), "cited": len(qrels[q]),
                              "found by no system": len(missed(q)),
                              **{f"{n} {PRIMARY}": ndcg(i, q) for i, n in enumerate(names)},
                              "spread": round(spread[q], 4)} for q in order]))
    for q in order:
        page.h(f"Query {q}: {titles.get(q, '')}".rstrip(": "))
        page.table(pd.DataFrame([{"cited": d, "title": titles.get(d, ""), "domain": domain.get((q, d), ""),
                                  **{f"rank {n}": rank(i, q, d) for i, n in enumerate(names)}}
                                 for d in sorted(qrels[q])]))
        lost = missed(q)
        page.p(f"Found by no system in its top {k}: {', '.join(sorted(lost))}." if lost
               else "Every citation is found by at least one system.")
    return page
