"""The retrieval task's part of the report's headline, per corpus: the answer first (the best system with its CI
and its relative gain over BM25 and over dense in the same view), then a compact system x view table of
nDCG@10 with CIs and significance letters under readable names (systems that ran in fewer views in a table of
their own, not rows of blanks), a legend of the views and methods, and the main-result chart. Every number is
the retrieval section's (retrieval_scores: the same compare_runs comparison per view), and so are its letters:
one letter names one system across the corpus's views and pages (retrieval_scores.corpus_letters)."""

from __future__ import annotations

from pathlib import Path

from evalctl.evaluators.scoring.metrics import PRIMARY
from evalctl.study.page.charts import Bar, Series, grouped_bars
from evalctl.study.page.names import method_legend, relative, view_legend
from evalctl.study.page.document import Report, save_figure
from evalctl.study.tasks.retrieval.groups import KIND, ViewGroup, view_groups
from evalctl.study.tasks.retrieval.scores import Score, corpus_letters, view_scores
from evalctl.study.abstasks.steps import Recorded

Scores = dict[str, dict[str, Score]]  # view label -> system name -> its score there


def headline(report: Report, steps: list[Recorded], out: Path) -> None:
    groups = view_groups(report, steps)
    if not groups:
        if any(s.kind == KIND for s in steps):
            report.p("No retrieval results yet (run `evalctl run` first).")
        return
    letters = corpus_letters(groups)
    for corpus in dict.fromkeys(g.corpus for g in groups):
        mine = [g for g in groups if g.corpus == corpus]
        scores = {g.label: view_scores(g, report.statistics) for g in mine}
        report.p(_answer(corpus, mine, scores))
        _tables(report, mine, scores, {n: x for (c, n), x in letters.items() if c == corpus})
        _chart(report, corpus, scores, out)


def _answer(corpus: str, groups: list[ViewGroup], scores: Scores) -> str:
    """The best system of the corpus (on the queries its view's comparison is over), its CI, and its change
    over BM25 and over dense in its view, each said significant or not as the letters say."""
    kind = " (known-item sanity task)" if groups[0].known_item else ""
    view, best = max(((v, s) for v, by in scores.items() for s in by.values() if s.compared), key=lambda vs: vs[1].mean)
    text = (f"{corpus}{kind}: the best system is {best.title} on view {view}, {PRIMARY} {best.mean:.4f} "
            f"[95% CI {best.lo:.3f}, {best.hi:.3f}] over {best.n} queries.")
    same = [s for s in scores[view].values() if s.compared and s.system != best.system]
    dense = [s for s in same if s.method == "dense"]
    baselines = [next((s for s in same if s.method == "bm25"), None),
                 next((s for s in dense if s.model == best.model), max(dense, key=lambda s: s.mean, default=None))]
    for b in filter(None, baselines):
        verdict = "significant" if b.system in best.beats else "not significant"
        text += f" Over {b.title} ({b.mean:.4f}): {relative(best.mean, b.mean)}, {verdict} under the report's test."
    return text


def _tables(report: Report, groups: list[ViewGroup], scores: Scores, letter: dict[str, str]) -> None:
    """One table of the systems that ran in the most views, one per other set of views; letters per corpus,
    bold only for a view's best that is significantly better than every other system of that view."""
    import pandas as pd

    from evalctl.evaluators.scoring.compare import score_cell, significance_note  # pandas, scipy

    names = list(dict.fromkeys(s for by in scores.values() for s in by))
    columns = {v: f"{v} (n={next(s.n for s in by.values() if s.compared)})" for v, by in scores.items()}
    proven = {v: best.system for v, by in scores.items()
              if (best := max((s for s in by.values() if s.compared), key=lambda s: s.mean))
              and {s.system for s in by.values() if s.compared} - {best.system} <= set(best.beats)
              and len([s for s in by.values() if s.compared]) > 1}
    tests = "; ".join(f"{g.label}: {significance_note(g.comparison)}" for g in groups if g.comparison)
    tested = (f"a letter: significantly better than that system in the same view ({tests}); bold: a view's best, "
              "significantly better than every other system of the view" if tests else "one system per view, no tests")
    sampled = ("; a cell with its own n: a system that searched a sample of the queries, scored on those (not "
               "in the letters or the bold)" if any(g.subsets for g in groups) else "")
    report.p(f"{PRIMARY} with its 95% bootstrap CI over the view's n queries, qrels "
             f"{groups[0].runs[0].manifest.get('qrels')}; {tested}{sampled}.")
    shown = (v for g in groups if g.label in scores for v in (g.query_view, g.view))
    report.p(f"Views: {view_legend(shown)}. Methods: "
             f"{method_legend(s.method for by in scores.values() for s in by.values())}.")
    by_views: dict[tuple[str, ...], list[str]] = {}
    for n in names:
        by_views.setdefault(tuple(v for v in scores if n in scores[v]), []).append(n)
    for i, (views, systems) in enumerate(sorted(by_views.items(), key=lambda kv: -len(kv[0]))):
        if i:
            report.p(f"Systems run only in view{'s' if len(views) > 1 else ''} {', '.join(views)}:")
        rows, strong = [], set()
        for r, n in enumerate(systems):
            row = {"system": f"{letter[n]} {next(scores[v][n].title for v in views)}"}
            for v in views:
                s = scores[v][n]
                cell = score_cell(s.mean, sorted(letter[x] for x in s.beats), s.lo, s.hi)
                row[columns[v]] = cell if s.compared else f"{cell} (n={s.n})"
                if proven.get(v) == n:
                    strong.add((r, columns[v]))
            rows.append(row)
        report.table(pd.DataFrame(rows), strong=strong, css="t headline")


def _chart(report: Report, corpus: str, scores: Scores, out: Path) -> None:
    """Every system's bar per view with its CI, a system not run in a view labelled there."""
    names = list(dict.fromkeys(s for by in scores.values() for s in by))
    titles = [next(by[n].title for by in scores.values() if n in by) for n in names]
    series = [Series(v, tuple(Bar(by[n].mean, by[n].lo, by[n].hi) if n in by else None for n in names))
              for v, by in scores.items()]
    fig = grouped_bars(titles, series, f"{PRIMARY} (95% bootstrap CI)", blank="not run in this view")
    save_figure(fig, report, out, f"main-{corpus}.png",
                f"{corpus}: {PRIMARY} per system and view, 95% bootstrap CIs (the numbers of the table above)")
