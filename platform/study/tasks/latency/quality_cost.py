"""Quality next to cost (issue 42): per corpus, every retrieval system a study both scored and timed, in one
table (nDCG@10 with its CI beside latency with its CIs, vector bytes, graph memory, index size and encoding time),
a table of the indexes' shared parts, two Pareto
charts (nDCG@10 against p95 latency and against index size) and the finding of the best system within the
budget the spec states.

Each system of a corpus's interleaved latency experiment (latency_experiment) is joined to the retrieval step whose
run has the very identity it timed (index, method, queries, depth), so a row's score and cost are of one system; a
system timed with other settings than it was scored with (another k, a tuned hybrid weight) has no row, and the
section says how many. Costs come from the stored experiments (serving_cost): no node is asked.

A system is Pareto-optimal on a cost when no other system costs as much or less and scores more, or costs less
and scores as much. The budget finding is drawn only from a quiet experiment (latency_design: a busy one is
shown, not used). A system is within a p95 budget when its p95's bootstrap CI lies inside it and over it when the
CI lies above it, the CIs at the Bonferroni level over the corpus's systems (the family the finding compares with
the budget); the finding names the best-scoring system within the budget only when every better-scoring system is
over it and, under a p95 bound, its paired p95 difference from the next better-scoring one is beyond the noise (at
the same level), else it says what this machine cannot tell apart. The named system's score is
tested, with the findings' protocol (findings.FindingTests: the comparison table's test where one holds both runs),
against the best system measured overall, or, when that one fits the budget, against the next best measured.

The same weights at two precisions (a model defined `like:` another with its own `precision`) get a table of their
own: the lower precision's encoding time and score beside its float32 twin's, with the comparison table's test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evalctl import results_store
from evalctl.evaluators.retrieval.latency_design import Analysis, apart, bonferroni_level, ranking
from evalctl.evaluators.retrieval.latency_experiment import analyse
from evalctl.evaluators.retrieval.serving_cost import (MB, PER_ENCODE, PER_INDEX, RULES, ServingCost, cost_cells,
                                                       experiment_cost, shared_bytes)
from evalctl.evaluators.scoring.metrics import PRIMARY
from evalctl.models import get_model
from evalctl.study.page.charts import Point, pareto_chart
from evalctl.study.page.names import relative, score_with_ci, system_title
from evalctl.study.page.document import Report, save_figure
from evalctl.study.tasks.retrieval.groups import table_tests, view_groups
from evalctl.study.abstasks.steps import Recorded

if TYPE_CHECKING:
    from evalctl.study.tasks.retrieval import findings as rf

LATENCY, RETRIEVAL = "latency", "retrieval"
AXES = (("end_to_end_p95_ms", "p95 serving latency (ms: query encoding + search, one request in flight)"),
        ("index_mb_per_10k", "index MB per 10,000 patents"))


@dataclass(frozen=True)
class Budget:
    """What a system may cost to be chosen: None leaves that cost unbounded."""

    p95_ms: float | None = None
    index_mb_per_10k: float | None = None

    @property
    def stated(self) -> bool:
        return self.p95_ms is not None or self.index_mb_per_10k is not None

    def verdict(self, c: ServingCost, p95: tuple[float, float] | None) -> str:
        """"within" every stated bound, "over" one, or "unsure": a p95 CI (`p95`: lo, hi) that straddles its bound.
        The p95 is the serving latency (query encoding + search) where the encoding was measured. An unmeasured cost
        is over a bound on it; the index size is a count, not a sample: no interval."""
        size, limit = c.index_mb_per_10k, self.index_mb_per_10k
        if limit is not None and (size is None or size > limit):
            return "over"
        if self.p95_ms is None:
            return "within"
        value = c.end_to_end_p95_ms
        lo, hi = p95 or (value, value)
        if value is None or lo > self.p95_ms:
            return "over"
        return "within" if hi <= self.p95_ms else "unsure"

    def text(self) -> str:
        bounds = ([f"serving p95 ≤ {self.p95_ms:g} ms"] if self.p95_ms is not None else []) + (
            [f"index ≤ {self.index_mb_per_10k:g} MB per 10,000 patents"] if self.index_mb_per_10k is not None else [])
        return " and ".join(bounds)


@dataclass(frozen=True)
class System:
    quality: rf.RetrievalResult
    ci: tuple[float, float]
    cost: ServingCost
    model: str | None  # the model id of a dense or fused system
    precision: str | None  # of its vectors, as its index's manifest records it (None: text only)
    timed: Timed  # its latencies in their experiment


@dataclass(frozen=True)
class Timed:
    """A system's place in its interleaved experiment: the analysis every interval and comparison reads."""

    analysis: Analysis
    i: int
    experiment: str
    busy: bool
    index_manifest: dict
    layout: str  # "serving" (an index of its own) or "study" (the study's index)


def _experiments(steps: list[Recorded]) -> list[results_store.Result]:
    """The stored experiments the latency steps name, newest first."""
    refs = {(s.target.corpus, s.ref) for s in steps if s.kind == LATENCY and s.scores and s.ref}
    found = [results_store.get(corpus, ref) for corpus, ref in refs]
    return sorted(found, key=lambda r: r.manifest["measured_at"], reverse=True)


def joined(report: Report, steps: list[Recorded]) -> tuple[list[System], int]:
    """The systems both scored and timed (each system of the newest experiment that timed it, joined to the
    retrieval step of the run it timed), and how many timed systems found no such score."""
    from evalctl.evaluators.scoring.compare import run_ci  # pandas, scipy: an up-to-date report never pays for them
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    scored = {s.ref: s for s in steps if s.kind == RETRIEVAL and s.scores and s.ref}
    out, unscored, seen = [], 0, set()
    for exp in _experiments(steps):
        _, analysis = analyse(exp, report.statistics)
        for i, system in enumerate(exp.manifest["systems"]):
            run_id = results_store.result_id(system["retrieval"], "run")
            if system["layout_asked"] != exp.manifest["layouts"][0]:
                continue  # another layout of the same system: the Serving latency section compares them
            if run_id in seen:
                continue  # timed again in a newer experiment
            seen.add(run_id)
            step = scored.get(run_id)
            if step is None:
                unscored += 1
                continue
            run = report.runs.stored(step.ref)
            quality = rf.retrieval_result(step.target, run)
            index = run.manifest.get("index_manifest") or {}
            model = step.target.model if index.get("hf_id") else None
            out.append(System(quality, run_ci(list(quality.per_query.values()), report.statistics),
                              experiment_cost(exp, i, analysis), model,
                              index.get("precision", "float32") if model else None,
                              Timed(analysis, i, exp.id, bool(exp.manifest["busy"]), system["index_manifest"] or {},
                                    system["layout"])))
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
                         "layout": s.timed.layout, **cost_cells(s.cost), "Pareto-optimal on": ", ".join(optimal) or "-",
                         "run": s.quality.run_id})
        budget = budgets.get(corpus, Budget())
        report.p(f"Corpus {corpus}: each system's {PRIMARY} beside what serving it costs on this machine. "
                 f"{RULES}. Layout: serving, each system timed and sized in an index holding only what it searches "
                 "(copied from the study's index for the measurement); study, the study's index, which holds every "
                 "view of its model: a figure of the study layout is the layout's, not the system's. Pareto-optimal: "
                 "no other system is as cheap or cheaper and scores more. "
                 + (f"Budget stated in the spec: {budget.text()}." if budget.stated
                    else "No budget stated (`latency: budget:` in the spec names the best system within one)."))
        report.table(pd.DataFrame(rows))
        if unscored:
            report.p(f"{unscored} timed system(s) have no score of the same settings (another depth, split or a "
                     "tuned fusion weight) and are left out.")
        _shared_parts(report, mine)
        for axis, xlabel in AXES:
            points = [Point(s.quality.label, getattr(s.cost, axis), s.quality.mean, *s.ci, fronts[axis][i],
                            *((axis == AXES[0][0] and s.cost.end_to_end_p95_ci) or (None, None)))
                      for i, s in enumerate(mine) if i in fronts[axis]]
            if len(points) < 2:
                continue
            save_figure(pareto_chart(points, xlabel, f"{PRIMARY} (95% CI)"), report, out,
                        f"pareto-{corpus}-{axis}.png",
                        f"{corpus}: {PRIMARY} against {xlabel}; filled diamonds are Pareto-optimal; bars: 95% CIs.")


def _shared_parts(report: Report, systems: list[System]) -> None:
    """Each index the systems are served from, once: its store and the part no system owns (text, _source, ids)."""
    import pandas as pd

    rows: dict[str, dict | None] = {}
    for s in systems:
        m, index = s.timed.index_manifest, s.cost.index
        if index not in rows:
            docs, shared = (m.get("cost") or {}).get("documents"), shared_bytes(m)
            rows[index] = {"index": index, "systems": 0, f"store MB / {PER_INDEX // 1000}k":
                           f"{m['cost']['store_bytes'] / docs * PER_INDEX / MB:,.1f}",
                           f"shared MB / {PER_INDEX // 1000}k (text, _source, ids)":
                           f"{shared / docs * PER_INDEX / MB:,.1f}"} if docs and shared is not None else None
        if rows[index]:
            rows[index]["systems"] += 1
    if any(rows.values()):
        report.p("The indexes the systems are served from, each once: its whole store and its shared part, the store "
                 "less every vector, which every system of the index reads and none owns.")
        report.table(pd.DataFrame([r for r in rows.values() if r]))


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
    """Per corpus with a stated budget: the best system within it, as the module docstring says."""
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    out = []
    for corpus, budget in budgets.items():
        mine = sorted((s for s in systems if s.quality.corpus == corpus), key=lambda s: -s.quality.mean)
        if not budget.stated or not mine:
            continue
        where = f"{corpus}, within {budget.text()}"
        if busy := sorted({s.timed.experiment for s in mine if s.timed.busy}):
            out.append(rf.Finding(f"{where}: no finding: the latency was measured while other work held the machine.",
                                  f"busy experiment(s) {', '.join(busy)} (the Serving latency section shows them)"))
            continue
        level = bonferroni_level(len(mine), tests.protocol.alpha)
        cis = [(ci.lo, ci.hi) for s in mine for a in [s.timed.analysis]
               for ci in [a.percentile(s.timed.i, 95, level, serving=a.has_serving(s.timed.i))]]
        verdicts = [budget.verdict(s.cost, ci) for s, ci in zip(mine, cis)]
        first = next((k for k, v in enumerate(verdicts) if v != "over"), None)
        if first is None:
            out.append(rf.Finding(f"{where}: no system measured fits.", "; ".join(
                f"{s.quality.label}: {_costs(s)}" for s in mine)))
            continue
        best = mine[first]
        if verdicts[first] == "unsure":
            unsure = [f"{s.quality.label} (serving p95 {s.cost.end_to_end_p95_ms:,.1f} ms, {level:.1%} CI "
                      f"[{lo:,.1f}, {hi:,.1f}])"
                      for s, v, (lo, hi) in zip(mine, verdicts, cis) if v == "unsure"]
            out.append(rf.Finding(
                f"{where}: this machine cannot tell whether {best.quality.label}, the best-scoring system not over "
                f"the budget, is within it: its p95's CI straddles the bound.",
                f"straddling the budget: {'; '.join(unsure)}; CIs at the Bonferroni level over {len(mine)} systems "
                f"(experiment {best.timed.experiment})"))
            continue
        other = mine[0] if first else (mine[1] if len(mine) > 1 else None)
        head = (f"{where}: the best system is {best.quality.label} ({PRIMARY} {best.quality.mean:.4f}, {_costs(best)}; "
                f"p95 {level:.1%} CI [{cis[first][0]:,.1f}, {cis[first][1]:,.1f}])")
        if other is None:
            out.append(rf.Finding(f"{head}, the only one measured.", f"run {best.quality.run_id}"))
            continue
        d = rf.between(tests, best.quality, other.quality)
        if first:
            above = mine[first - 1]  # the next better-scoring system, over the budget: how far, paired
            a = best.timed.analysis
            both = a.has_serving(best.timed.i) and a.has_serving(above.timed.i)
            gap = a.difference(best.timed.i, above.timed.i, 95, level, serving=both) \
                if above.timed.experiment == best.timed.experiment else None
            claim = (f"{head}; the best measured, {other.quality.label} ({_costs(other)}), scores "
                     f"{relative(other.quality.mean, best.quality.mean)} more, {d.verdict}.")
        else:
            gap = None
            claim = (f"{head}, also the best measured, {relative(best.quality.mean, other.quality.mean)} over the "
                     f"next, {other.quality.label} ({_costs(other)}): {d.verdict}.")
        if gap is not None and budget.p95_ms is not None and not apart(gap):
            out.append(rf.Finding(
                f"{where}: this machine cannot tell {best.quality.label} from {above.quality.label}, the next "
                f"better-scoring system, in serving p95: their paired difference is within the noise.",
                f"p95 of {above.quality.label} - {best.quality.label}, paired: {gap.value:+,.1f} ms "
                f"[{gap.lo:+,.1f}, {gap.hi:+,.1f}] at {level:.1%} (experiment {best.timed.experiment})"))
            continue
        latency = "" if gap is None else (
            f"; p95 of {mine[first - 1].quality.label} - {best.quality.label}, paired: {gap.value:+,.1f} ms "
            f"[{gap.lo:+,.1f}, {gap.hi:+,.1f}] ({'beyond' if apart(gap) else 'within'} the noise)")
        out.append(rf.Finding(claim, f"{other.quality.label} - {best.quality.label}: {d.text()} (runs "
                                     f"{best.quality.run_id}, {other.quality.run_id}; experiment "
                                     f"{best.timed.experiment}{latency}; p95 CIs at the Bonferroni level over "
                                     f"{len(mine)} systems)",
                              rf.relative_size(other.quality.mean, best.quality.mean)))
    return out


def experiment_section(report: Report, result: results_store.Result, statistics) -> None:
    """One interleaved experiment: each system's percentiles with their CIs, which neighbours (by p95) the noise
    cannot tell apart, what coming first in the order cost, and the rounds' load."""
    import pandas as pd

    m = result.manifest
    rounds, analysis = analyse(result, statistics)
    names = [f"{system_title(s['retrieval'])} on {s['view']}" + (f" ({s['layout']} layout)" if len(m["layouts"]) > 1
                                                                  else "") for s in m["systems"]]
    rows = []
    for i, s in enumerate(m["systems"]):
        p50, p95 = analysis.percentile(i, 50), analysis.percentile(i, 95)
        serving = analysis.percentile(i, 95, serving=True) if analysis.has_serving(i) else None
        rows.append({"system": names[i], "p50 ms [95% CI]": f"{p50.value:,.1f} [{p50.lo:,.1f}, {p50.hi:,.1f}]",
                     "p95 ms [95% CI]": f"{p95.value:,.1f} [{p95.lo:,.1f}, {p95.hi:,.1f}]",
                     "query encode p50 ms": f"{np.median(analysis.encode[i]):,.1f}" if s.get("encoding") and serving
                     else "-",
                     "serving p95 ms [95% CI]": f"{serving.value:,.1f} [{serving.lo:,.1f}, {serving.hi:,.1f}]"
                     if serving else "-", "errors": analysis.errors[i], "index": s["index"]})
    report.p(f"Corpus {m['corpus']}: {len(names)} systems timed together (experiment {result.id}, "
             f"{m['measured_at']}): after a warm-up of {m['warmup']} queries, {len(m['quiet'])} rounds "
             f"({sum(m['quiet'])} quiet) of {len(m['queries'])} queries, each query sent to every system in turn, "
             f"the order rotated by query and round; "
             f"{m['measured']}. Other work's CPU share per round: {', '.join(f'{x:.2f}' for x in m['other_load'])}, "
             f"while the queries were encoded: {m['encode_other_load']:.2f}; {m['busy_rule']}. "
             + (f"The analysis reads the {len(rounds.kept)} " + ("rounds" if rounds.busy else "quiet rounds") + ". ")
             + f"CIs: percentile bootstrap over queries and rounds ({statistics.n_bootstrap:,} resamples)."
             + (" **Busy: no finding is drawn from this measurement.**" if m["busy"] else ""))
    report.table(pd.DataFrame(rows))
    _layout_table(report, m, names, analysis, statistics.alpha)
    encoded = "; ".join(f"{e['model']} ({e['query_view']} queries): {e['setting']}"
                        for e in m["encoding_settings"].values())
    report.p("Serving p95: each query's encoding (alone, batch 1, on this machine) plus its search, per round; "
             "a text-only system encodes nothing, a chunked query's encoding is not measured (-)."
             + (f" Queries encoded on: {encoded}." if encoded else ""))
    steps = ranking(analysis, range(len(names)), 95, statistics.alpha)
    if steps:
        level = bonferroni_level(len(steps), statistics.alpha)
        report.p(f"Neighbours by p95, each difference paired (the same resampled queries and rounds), its CI at "
                 f"{level:.1%} (Bonferroni over the {len(steps)} comparisons):")
        report.table(pd.DataFrame([{"faster": names[a], "slower": names[b],
                                    "p95 difference ms [CI]": f"{d.value:+,.1f} [{d.lo:+,.1f}, {d.hi:+,.1f}]",
                                    "verdict": "slower beyond the noise" if sep else
                                    "cannot be told apart on this machine"} for a, b, d, sep in steps]))
    effect = analysis.position_effect(rounds)
    report.p("Mean latency by place in a query's order (every system took each place alike): "
             + ", ".join(f"{k + 1}: {v:,.1f} ms" for k, v in enumerate(effect)) + ".")


def _layout_table(report: Report, m: dict, names: list[str], analysis: Analysis, alpha: float) -> None:
    """Each system timed in two layouts: its p95 search latency in each and their paired difference."""
    import pandas as pd

    if len(m["layouts"]) < 2:
        return
    arms = {(s["label"], s["layout_asked"]): i for i, s in enumerate(m["systems"])}
    first, second = m["layouts"][:2]
    pairs = [(i, arms[(s["label"], second)]) for i, s in enumerate(m["systems"]) if s["layout_asked"] == first]
    level = bonferroni_level(len(pairs), alpha)
    rows = []
    for a, b in pairs:
        why = m["systems"][a]["why_not_served"] or m["systems"][b]["why_not_served"] or "-"
        pa, pb, d = analysis.percentile(a, 95), analysis.percentile(b, 95), analysis.difference(a, b, 95, level)
        rows.append({"system": names[a].rsplit(" (", 1)[0], f"p95 ms, {first} [95% CI]": f"{pa.value:,.1f} "
                     f"[{pa.lo:,.1f}, {pa.hi:,.1f}]", f"p95 ms, {second} [95% CI]": f"{pb.value:,.1f} "
                     f"[{pb.lo:,.1f}, {pb.hi:,.1f}]", f"{second} − {first} ms [CI]": f"{d.value:+,.1f} "
                     f"[{d.lo:+,.1f}, {d.hi:+,.1f}]", "verdict": "apart" if apart(d) else
                     "cannot be told apart on this machine",
                     "why not served": why})
    report.p(f"Layouts: each system timed in its {first} and its {second} layout in the same rounds; the difference "
             f"paired, its CI at {level:.1%} (Bonferroni over the {len(pairs)} systems). Findings read the {first} "
             "layout only.")
    report.table(pd.DataFrame(rows))


def _costs(s: System) -> str:
    c = s.cost
    size = f"{c.index_mb_per_10k:,.1f}" if c.index_mb_per_10k is not None else "-"
    return f"serving p95 {c.end_to_end_p95_ms:,.1f} ms, index {size} MB per 10,000 patents"


def tests_for(report: Report, steps: list[Recorded]) -> rf.FindingTests:
    """The findings' tests: the comparison tables' own where a table holds both runs."""
    from evalctl.study.tasks.retrieval import findings as rf  # scipy

    return rf.FindingTests(report.statistics, table_tests(view_groups(report, steps)))
