"""The retrieval section's ties table: how much of each system's score rests on the order inside its ties.

Publications of one family often share their text, so they share a score; the run orders them by the one tie rule
(runs.TIE_RULE) and another scorer may order them otherwise. Per view group, each system's ordinary nDCG@10,
recall@100 and MRR@10 beside their tie-aware values (the mean over every order of the tied documents,
evaluators/scoring/tie_aware.py) on the same queries, with how many queries hold a tie that can move a metric @10;
a system whose tie-aware nDCG@10 lies further from the ordinary one than the width of that score's CI is named."""

from __future__ import annotations

from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.evaluators.scoring.runs import TIE_RULE
from evalctl.evaluators.scoring.tie_aware import tie_scores
from evalctl.study.page.document import Report
from evalctl.study.tasks.retrieval.groups import ViewGroup
from evalctl.study.tasks.retrieval.scores import view_scores

METRICS = (PRIMARY, "recall@100", "mrr@10")
TITLE = "Ties in the rankings"  # a section of its own, after the passage section


def section(report: Report, groups: list[ViewGroup]) -> None:
    import pandas as pd

    rows, apart = [], []
    for g in groups:
        ci = view_scores(g, report.statistics)
        for r in g.main_runs:
            judged = run_queries(r).judged(r.manifest["split"], None, None)
            ordinary = evaluate_run(r, metrics=METRICS).mean
            ties = tie_scores(r.ranking, judged, METRICS, depth=r.manifest["k"])
            score = ci[r.system_name]
            gap = ties.mean(PRIMARY) - ordinary[PRIMARY]
            row = {"system": score.title, "views": g.label, "run": r.id, "queries": len(judged),
                   "queries with a tie in the top 10": ties.tied_queries, "tied documents": ties.tied_documents}
            for m in METRICS:
                row[m] = f"{ordinary[m]:.4f}"
                row[f"{m} tie-aware"] = f"{ties.mean(m):.4f}"
            row[f"{PRIMARY} CI width"] = f"{score.hi - score.lo:.4f}"
            rows.append(row)
            if abs(gap) > score.hi - score.lo:
                apart.append(f"{score.title} ({g.label}: {gap:+.4f})")
    if not rows:
        return
    report.h(TITLE)
    report.p(f"Ties: each run orders documents of equal score by one rule ({TIE_RULE}), in every run, export and "
             "referee; another scorer's rule moves the tied ones. Tie-aware values (McSherry and Najork, ECIR 2008) "
             "are each metric's mean over every order of the tied documents, on the run's judged queries; a tie at "
             "the run's depth is scored as the documents it returned. "
             + (f"Tie-aware {PRIMARY} differs from the ordinary one by more than its CI's width for: "
                f"{', '.join(apart)}." if apart else
                f"No system's tie-aware {PRIMARY} differs from its ordinary one by more than its CI's width."))
    report.table(pd.DataFrame(rows))
