"""Quality next to cost (issue 42): per corpus, every retrieval system a study both scored and timed, in one
table (nDCG@10 with its CI beside latency, throughput, index size, HNSW memory and encoding time), two Pareto
charts (nDCG@10 against p95 latency and against index size) and the finding of the best system within the
budget the spec states.

A latency step is joined to the retrieval step whose run has the very identity it timed (index, method, queries,
depth: serving_cost reads it from the latency result), so a row's score and cost are of one system; a system timed
with other settings than it was scored with (another k, a tuned hybrid weight) has no row, and the section says
how many. Costs come from the stored latency results (serving_cost): no node is asked.

A system is Pareto-optimal on a cost when no other system costs as much or less and scores more, or costs less
and scores as much. The budget finding names the best-scoring system within the budget and tests it, with the
findings' protocol (findings.FindingTests: the comparison table's test where one holds both runs), against the
best system measured overall, or, when that one fits the budget, against the next best measured.

The same weights at two precisions (a model defined `like:` another with its own `precision`) get a table of their
own: the lower precision's encoding time and score beside its float32 twin's, with the comparison table's test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalctl import results_store
from evalctl.evaluators.retrieval.serving_cost import PER_ENCODE, RULES, ServingCost, cost_cells, serving_cost
from evalctl.evaluators.scoring.metrics import PRIMARY
from evalctl.models import get_model
from evalctl.study.page.charts import Point, pareto_chart
from evalctl.study.page.names import relative, score_with_ci
from evalctl.study.page.document import Report, save_figure
from evalctl.study.tasks.retrieval.groups import table_tests, view_groups
from evalctl.study.abstasks.steps import Recorded

if TYPE_CHECKING:
    from evalctl.study.tasks.retrieval import findings as rf

LATENCY, RETRIEVAL = "latency", "retrieval"
AXES = (("p95_ms", "p95 latency (ms, concurrency 1)"), ("index_mb_per_10k", "index MB per 10,000 patents"))


@dataclass(frozen=True)
class Budget:
    """What a system may cost to be chosen: None leaves that cost unbounded."""

    p95_ms: float | None = None
    index_mb_per_10k: float | None = None

    @property
    def stated(self) -> bool:
        return self.p95_ms is not None or self.index_mb_per_10k is not None

    def fits(self, c: ServingCost) -> bool:
        """Within every stated bound (an unmeasured cost never fits a bound on it)."""
        return all(limit is None or (value is not None and value <= limit)
                   for value, limit in ((c.p95_ms, self.p95_ms), (c.index_mb_per_10k, self.index_mb_per_10k)))

    def text(self) -> str:
        bounds = ([f"p95 ≤ {self.p95_ms:g} ms"] if self.p95_ms is not None else []) + (
            [f"index ≤ {self.index_mb_per_10k:g} MB per 10,000 patents"] if self.index_mb_per_10k is not None else [])
        return " and ".join(bounds)


@dataclass(frozen=True)
class System:
    quality: rf.RetrievalResult
    ci: tuple[float, float]
    cost: ServingCost
    model: str | None  # the model id of a dense or fused system
    precision: str | None  # of its vectors, as its index's manifest records it (None: text only)


def joined(report: Report, steps: list[Recorded]) -> tuple[list[System], int]:
    """The systems both scored and timed (a latency step's newest stored result joined to the retrieval step of
    the run it timed), and how many timed systems found no such score."""
    from evalctl.evaluators.scoring.compare import run_ci  # pandas, scipy: an up-to-date report never pays for them
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    scored = {s.ref: s for s in steps if s.kind == RETRIEVAL and s.scores and s.ref}
    out, unscored = [], 0
    for s in steps:
        if s.kind != LATENCY or not s.scores or not s.ref:
            continue
        latency = results_store.get(s.target.corpus, s.ref)
        step = scored.get(results_store.result_id(latency.manifest["retrieval"], "run"))
        if step is None:
            unscored += 1
            continue
        run = report.runs.stored(step.ref)
        quality = rf.retrieval_result(step.target, run)
        index = run.manifest.get("index_manifest") or {}
        model = step.target.model if index.get("hf_id") else None
        out.append(System(quality, run_ci(list(quality.per_query.values()), report.statistics), serving_cost(latency),
                          model, index.get("precision", "float32") if model else None))
    return out, unscored


def pareto_optimal(points: list[tuple[float, float]]) -> list[bool]:
    """For (cost, score) pairs: whether each is on the front (see the module docstring)."""
    return [not any((c2 <= c and s2 > s) or (c2 < c and s2 >= s) for c2, s2 in points) for c, s in points]


def _fronts(systems: list[System]) -> dict[str, dict[int, bool]]:
    """Per cost axis, {index in systems: optimal} over the systems that have that cost measured."""
    out = {}
    for axis, _ in AXES:
        have = [i for i, s in enumerate(systems) if getattr(s.cost, axis) is not None]
        out[axis] = dict(zip(have, pareto_optimal([(getattr(systems[i].cost, axis), systems[i].quality.mean)
                                                   for i in have])))
    return out


def section(report: Report, systems: list[System], unscored: int, budgets: dict[str, Budget], out: Path) -> None:
    """The quality-and-cost table and the two Pareto charts of each corpus."""
    import pandas as pd

    report.h("Quality and cost")
    if not systems:
        report.p("No retrieval system of this spec is both scored and timed yet (a `latency:` entry times the "
                 "systems a `retrieval:` entry scores, with the same settings).")
        return
    for corpus in dict.fromkeys(s.quality.corpus for s in systems):
        mine = [s for s in systems if s.quality.corpus == corpus]
        fronts = _fronts(mine)
        rows = []
        for i, s in enumerate(mine):
            optimal = [name for (axis, _), name in zip(AXES, ("latency", "size")) if fronts[axis].get(i)]
            rows.append({"system": s.quality.label, f"{PRIMARY} [95% CI]": score_with_ci(s.quality.mean, *s.ci, False),
                         **cost_cells(s.cost), "Pareto-optimal on": ", ".join(optimal) or "-",
                         "run": s.quality.run_id})
        budget = budgets.get(corpus, Budget())
        report.p(f"Corpus {corpus}: each system's {PRIMARY} beside what serving it costs on this machine. "
                 f"{RULES}. Pareto-optimal: no other system is as cheap or cheaper and scores more. "
                 + (f"Budget stated in the spec: {budget.text()}." if budget.stated
                    else "No budget stated (`latency: budget:` in the spec names the best system within one)."))
        report.table(pd.DataFrame(rows))
        if unscored:
            report.p(f"{unscored} timed system(s) have no score of the same settings (another depth, split or a "
                     "tuned fusion weight) and are left out.")
        for axis, xlabel in AXES:
            points = [Point(s.quality.label, getattr(s.cost, axis), s.quality.mean, *s.ci, fronts[axis][i])
                      for i, s in enumerate(mine) if i in fronts[axis]]
            if len(points) < 2:
                continue
            save_figure(pareto_chart(points, xlabel, f"{PRIMARY} (95% CI)"), report, out,
                        f"pareto-{corpus}-{axis}.png",
                        f"{corpus}: {PRIMARY} against {xlabel}; filled diamonds are Pareto-optimal.")


def precision_pairs(systems: list[System]) -> list[tuple[System, System]]:
    """(the float32 system, a system of the same weights at another precision): the same corpus, view and method,
    and models of one hf id, revision and folder (a variant defined `like:` the other, docs/performance.md)."""

    def twin(s: System) -> tuple:  # what two systems at two precisions share
        spec = get_model(s.model)
        return s.quality.corpus, s.quality.view, s.quality.method, spec.hf_id, spec.revision, spec.path

    full = {twin(s): s for s in systems if s.precision == "float32"}
    return [(full[twin(s)], s) for s in systems if s.precision not in (None, "float32") and twin(s) in full]


def precision_section(report: Report, systems: list[System], tests: rf.FindingTests) -> None:
    """The same weights at two precisions, side by side: what the lower one saves in encoding and costs in score,
    with the paired test of the comparison table that holds both runs (findings.between)."""
    import pandas as pd

    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    pairs = precision_pairs(systems)
    if not pairs:
        return
    rows = []
    for base, s in pairs:
        d = rf.between(tests, base.quality, s.quality)
        a, b = base.cost.encode_s_per_1k, s.cost.encode_s_per_1k
        rows.append({"corpus": s.quality.corpus, "system": s.quality.label, "precision": s.precision,
                     f"encode s / {PER_ENCODE // 1000}k": f"{b:,.1f}" if b else "-",
                     "encoding speed × float32": f"{a / b:.2f}" if a and b else "-",
                     f"{PRIMARY} [95% CI]": score_with_ci(s.quality.mean, *s.ci, False),
                     "float32 twin": base.quality.label, f"{PRIMARY} − float32 twin": d.text(),
                     "p95 ms": cost_cells(s.cost)["p95 ms"]})
    report.p("Precision: the same weights encoded at float32 and at a lower precision (a model defined `like:` "
             "another with its own `precision`), each system's encoding time and score beside its float32 twin's. "
             "The difference is tested as the comparison table that holds both runs tests it.")
    report.table(pd.DataFrame(rows))


def budget_findings(systems: list[System], budgets: dict[str, Budget], tests: rf.FindingTests) -> list[rf.Finding]:
    """Per corpus with a stated budget: the best system within it, tested as the module docstring says."""
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    out = []
    for corpus, budget in budgets.items():
        mine = sorted((s for s in systems if s.quality.corpus == corpus), key=lambda s: -s.quality.mean)
        if not budget.stated or not mine:
            continue
        fits = [s for s in mine if budget.fits(s.cost)]
        where = f"{corpus}, within {budget.text()}"
        if not fits:
            out.append(rf.Finding(f"{where}: no system measured fits.", "; ".join(
                f"{s.quality.label}: {_costs(s)}" for s in mine)))
            continue
        best = fits[0]
        other = mine[0] if mine[0] is not best else (mine[1] if len(mine) > 1 else None)
        head = f"{where}: the best system is {best.quality.label} ({PRIMARY} {best.quality.mean:.4f}, {_costs(best)})"
        if other is None:
            out.append(rf.Finding(f"{head}, the only one measured.", f"run {best.quality.run_id}"))
            continue
        d = rf.between(tests, best.quality, other.quality)
        if other is mine[0]:
            claim = (f"{head}; the best measured, {other.quality.label} ({_costs(other)}), scores "
                     f"{relative(other.quality.mean, best.quality.mean)} more, {d.verdict}.")
        else:
            claim = (f"{head}, also the best measured, {relative(best.quality.mean, other.quality.mean)} over the "
                     f"next, {other.quality.label} ({_costs(other)}): {d.verdict}.")
        out.append(rf.Finding(claim, f"{other.quality.label} - {best.quality.label}: {d.text()} (runs "
                                     f"{best.quality.run_id}, {other.quality.run_id}; latencies {best.cost.latency_id}, "
                                     f"{other.cost.latency_id})", rf.relative_size(other.quality.mean, best.quality.mean)))
    return out


def _costs(s: System) -> str:
    c = cost_cells(s.cost)
    return f"p95 {c['p95 ms']} ms, {c['index MB / 10k']} MB per 10,000 patents"


def tests_for(report: Report, steps: list[Recorded]) -> rf.FindingTests:
    """The findings' tests: the comparison tables' own where a table holds both runs."""
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    return rf.FindingTests(report.statistics, table_tests(view_groups(report, steps)))
