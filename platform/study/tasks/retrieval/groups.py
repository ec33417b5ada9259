"""The done retrieval steps of a report grouped by corpus and views (the headline, the retrieval section and the
per-query pages compare the same groups), and the name a per-query page has in a report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalctl.evaluators.scoring.runs import view_pair
from evalctl.study.abstasks.steps import Recorded

if TYPE_CHECKING:
    from evalctl.study.page.document import Report

KIND = "retrieval"  # the steps grouped: the retrieval task's


@dataclass(frozen=True)
class ViewGroup:
    """The done retrieval steps of one corpus, query view and document view: compared query by query (two runs
    or more). Runs that searched the group's widest query set (`main`) make its comparison; each other query set
    (a sample) gets a comparison of its runs with those on the queries they share (`subsets`)."""

    corpus: str
    query_view: str
    view: str
    steps: tuple[Recorded, ...]
    runs: tuple  # their StoredRuns, in step order
    main: tuple[int, ...]  # positions (in steps and runs) of the runs of the widest query set
    comparison: object | None  # ComparisonReport of the main runs (letters a, b, ...); None for a single one
    subsets: tuple = ()  # ComparisonReport per other query set: its runs and the main ones, on common queries

    @property
    def label(self) -> str:
        """The views as tables show them: "T", or "T→TA" for queries in another view than the documents."""
        return view_pair(self.query_view, self.view)

    @property
    def file_part(self) -> str:
        """The views in a file name: "T", or "T-TA"."""
        return view_pair(self.query_view, self.view, "-")

    @property
    def known_item(self) -> bool:
        return (self.runs[0].manifest.get("qrels_spec") or {}).get("source") == "known_item"

    @property
    def main_runs(self) -> tuple:
        return tuple(self.runs[i] for i in self.main)


def view_groups(report: Report, steps: list[Recorded]) -> list[ViewGroup]:
    """Retrieval steps with stored scores by corpus and views, in plan order; each comparison computed once
    per report (the headline, the tables and the per-query pages read the same one)."""
    by: dict[tuple[str, str, str], list[Recorded]] = {}
    for s in steps:
        if s.kind == KIND and s.scores:
            t = s.target
            by.setdefault((t.corpus, t.query_view or t.view, t.view), []).append(s)
    out = []
    for (corpus, query_view, view), group in by.items():
        runs = tuple(report.runs.stored(s.ref) for s in group)
        query_sets: dict[str, list[int]] = {}
        for i, r in enumerate(runs):
            query_sets.setdefault(r.manifest["query_set"], []).append(i)
        main = max(query_sets.values(), key=lambda idx: len(runs[idx[0]].ranking))  # the first on a tie
        others = [idx for idx in query_sets.values() if idx is not main]
        out.append(ViewGroup(corpus, query_view, view, tuple(group), runs, tuple(main),
                             _compared(report, [runs[i] for i in main]),
                             tuple(_compared(report, [runs[i] for i in (*idx, *main)]) for idx in others)))
    return out


def _compared(report: Report, runs: list):
    """compare_runs of two runs or more (None for one) under the study's protocol, once per report."""
    from evalctl.evaluators.scoring.compare import compare_runs  # pandas, scipy

    key = tuple(r.id for r in runs)
    if len(runs) >= 2 and key not in report.comparisons:
        report.comparisons[key] = compare_runs(runs, protocol=report.statistics)
    return report.comparisons.get(key)


def table_tests(groups: list[ViewGroup]) -> dict[tuple[frozenset[str], str], tuple]:
    """{(the two run ids of a pair, metric): (its test, the family in words)} as the groups' tables tested them
    (the findings read these, so they say what the letters say); a pair a group's main table holds is read
    from it, not from a sample's table over fewer queries."""
    out = {}
    for g in groups:
        for rep in (*g.subsets, g.comparison):
            if rep is None:
                continue
            run_of = dict(zip(rep.systems, rep.run_ids))
            family = ("the system pairs" if rep.protocol.family == "metric" else "the system pairs x metrics")
            for p in rep.pairs:
                out[frozenset((run_of[p.control], run_of[p.treatment])), p.metric] = (
                    p.tested, f"{family} of the {g.corpus} {g.label} table")
    return out


def query_page_name(g: ViewGroup) -> str:
    return f"queries-{g.corpus}-{g.file_part}"
