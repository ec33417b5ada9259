"""The retrieval task's part of the report's headline, per corpus: system x view, nDCG@10 with its 95% CI, the
best of each view in bold and significance letters. Every number is the retrieval section's (the same
compare_runs comparison per view); only the letters are renamed, so that one letter names one system across
the corpus's views."""

from __future__ import annotations

from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.study.page import Report
from evalctl.study.retrieval_groups import KIND, ViewGroup, view_groups
from evalctl.study.tasks import Recorded


def headline(report: Report, steps: list[Recorded]) -> None:
    import pandas as pd

    groups = view_groups(report, steps)
    if not groups:
        if any(s.kind == KIND for s in steps):
            report.p("No retrieval results yet (run `evalctl run` first).")
        return
    for corpus in dict.fromkeys(g.corpus for g in groups):
        mine = [g for g in groups if g.corpus == corpus]
        names = list(dict.fromkeys(r.system_name for g in mine for r in g.runs))
        letter = {n: chr(ord("a") + i) for i, n in enumerate(names)}
        rows = {n: {"system": f"{letter[n]} {n}"} for n in names}
        strong = set()
        for g in mine:
            cells, n = _cells(g, letter, report.statistics)
            column = f"{g.label} (n={n})"
            for n in names:
                rows[n][column] = cells[n][1] if n in cells else "-"
            best = max((n for n in cells if cells[n][2]), key=lambda n: cells[n][0])
            strong.add((names.index(best), column))
        kind = " (known-item sanity task)" if mine[0].known_item else ""
        test = next((g.comparison for g in mine if g.comparison), None)
        tested = (f"a letter: significantly better than that system in the same view ({test.protocol.test} "
                  f"test, Holm-corrected, p < {test.protocol.alpha})" if test else "one system per view, no tests")
        sampled = ("; a cell with its own n: a system that searched a sample of the queries, scored on those "
                   "(not in the letters or the bold)" if any(g.subsets for g in mine) else "")
        report.p(f"{corpus}{kind}, qrels {mine[0].runs[0].manifest.get('qrels')}: {PRIMARY} with its 95% "
                 f"bootstrap CI over the view's n queries; bold: best in its view; {tested}{sampled}.")
        report.table(pd.DataFrame(list(rows.values())), strong=strong, css="t headline")


def _cells(g: ViewGroup, letter: dict[str, str], protocol) -> tuple[dict[str, tuple[float, str, bool]], int]:
    """System name -> (mean, cell text, compared with the view's n queries) in one view, from the view's
    comparison (or its one run) and, for a system that searched a sample, its own scores; n queries."""
    from evalctl.evaluators.scoring.compare import run_ci, score_cell  # pandas, scipy

    def alone(run) -> tuple[float, str, int]:  # a run's own mean and CI, as compare_runs would compute them
        scores = evaluate_run(run, metrics=(PRIMARY,))
        values, mean = list(scores.per_query[PRIMARY].values()), scores.mean[PRIMARY]
        return mean, score_cell(mean, [], *run_ci(values, protocol)), len(values)

    sampled = {}
    for i, run in enumerate(g.runs):
        if i not in g.main:
            mean, text, n = alone(run)
            sampled[run.system_name] = (mean, f"{text} (n={n})", False)
    rep = g.comparison
    if rep is None:  # a single run of the widest query set
        mean, text, n = alone(g.runs[g.main[0]])
        return {g.runs[g.main[0]].system_name: (mean, text, True), **sampled}, n
    name_of = {x: r.system_name for x, r in zip(rep.letters, g.main_runs)}  # the comparison's letter -> system
    return {name_of[x]: (rep.means[s][PRIMARY], score_cell(
        rep.means[s][PRIMARY], sorted(letter[name_of[y]] for y in rep.better_than(s, PRIMARY)), *rep.ci[s][PRIMARY]),
        True) for s, x in zip(rep.systems, rep.letters)} | sampled, rep.n_queries
