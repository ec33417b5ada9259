"""The findings a report opens with, computed from this spec's stored results: best view, best method,
fusion gain over dense, the IN->OUT drop, models ranked, and which recipe helped which task; each with its
relative change ("+12% (+0.0141)"), by which the report ranks them.

Each finding is a short claim plus its evidence (the paired difference with its bootstrap 95% CI, the raw and
Holm-adjusted p of the study's protocol and the family corrected over, the stored runs or results it rests
on), which the report puts in a footnote. A difference is called significant only under that protocol
(significance_params.StatsProtocol): two systems of one comparison table (one corpus and view) take the
table's own test of the pair, so a finding says what the table's letters say; the dense views of a model are
tested as one family (every view pair), and recipe comparisons no table holds (the label tasks, over splits or
seeds) as one family per task. With few units the test is exact, and a claim says when no difference could
reach significance (5 seeds: p >= 2/32 = 0.0625).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from evalctl.evaluators.scoring.significance import PairTest, bootstrap_ci, family_tests
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.evaluators.retrieval.methods import fused_methods
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.study.display_names import method_title, model_title, relative, system_title


@dataclass(frozen=True)
class RetrievalResult:
    corpus: str
    model: str
    view: str  # "TA", or "T→TA" when queries use another view
    method: str
    run_id: str
    label: str
    per_query: dict[str, float]  # PRIMARY per query

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.per_query.values()))) if self.per_query else float("nan")


def retrieval_result(target, run) -> RetrievalResult:
    """A retrieval task step's target and its stored run (scored under the report's empty-query policy) as the
    findings weigh it."""
    return RetrievalResult(target.corpus, model_title(target.model), target.view_label, target.what, run.id,
                           f"{system_title(run.manifest)} on {target.view_label}", evaluate_run(run).per_query[PRIMARY])


@dataclass(frozen=True)
class Finding:
    claim: str  # one short sentence
    evidence: str  # the numbers and stored runs/results behind it
    size: float = 0.0  # the relative change it reports, (new - old) / old: the report lists the largest first


@dataclass(frozen=True)
class Delta:
    """A paired difference (b - a over the units both hold) with its CI and its test within a family."""

    value: float
    lo: float
    hi: float
    tested: PairTest
    alpha: float
    family: str  # what the correction ran over, in words

    @property
    def n(self) -> int:
        return self.tested.n

    @property
    def significant(self) -> bool:
        return self.tested.significant(self.alpha)

    @property
    def reachable(self) -> bool:
        return self.tested.reachable(self.alpha)

    @property
    def verdict(self) -> str:
        if self.significant:
            return "significant"
        return "not significant" if self.reachable else f"cannot reach significance with n={self.n}"

    def text(self) -> str:
        t = self.tested
        verdict = (f"{self.verdict}, n={self.n}" if self.reachable
                   else f"smallest possible p {t.smallest_p:.4f}; {self.verdict}")
        return (f"{self.value:+.4f} [95% CI {self.lo:+.4f}, {self.hi:+.4f}; p {t.p:.4f}, Holm p {t.p_holm:.4f} "
                f"over {self.family} ({t.family}); {verdict}]")


@dataclass(frozen=True)
class FindingTests:
    """How the findings test differences: the protocol, and the comparison tables' tests of their pairs."""

    protocol: StatsProtocol = StatsProtocol()
    # (the two run ids, metric) -> the table's test of the pair and its family in words
    tables: dict[tuple[frozenset[str], str], tuple[PairTest, str]] = field(default_factory=dict)

    def family(self, pairs: list[tuple[dict[str, float], dict[str, float]]], name: str) -> list[Delta]:
        """(a, b) per comparison, tested as one family called `name`."""
        diffs = [_diff(a, b) for a, b in pairs]
        return [self._delta(d, t, name) for d, t in zip(diffs, family_tests(diffs, self.protocol))]

    def table(self, ids: tuple[str, str], metric: str, a: dict[str, float], b: dict[str, float]) -> Delta | None:
        """b - a, as the comparison table holding both runs tested it (None: no table holds both)."""
        found = self.tables.get((frozenset(ids), metric))
        return None if found is None else self._delta(_diff(a, b), *found)

    def between(self, base: RetrievalResult, other: RetrievalResult) -> Delta:
        """other - base: the table's test; two runs no table holds together: a family of their own."""
        return (self.table((base.run_id, other.run_id), PRIMARY, base.per_query, other.per_query)
                or self.family([(base.per_query, other.per_query)], "this pair alone")[0])

    def _delta(self, d: np.ndarray, tested: PairTest, family: str) -> Delta:
        lo, hi = bootstrap_ci(d, self.protocol.n_bootstrap, self.protocol.seed)
        return Delta(float(d.mean()) if len(d) else float("nan"), lo, hi, tested, self.protocol.alpha, family)


def _diff(a: dict[str, float], b: dict[str, float]) -> np.ndarray:
    return np.array([b[k] - a[k] for k in sorted(set(a) & set(b))])


def _fmt_runs(*results: RetrievalResult) -> str:
    return "runs " + ", ".join(r.run_id for r in results)


def _evidence(base: RetrievalResult, other: RetrievalResult, d: Delta) -> str:
    return f"{other.label} - {base.label}: {d.text()} ({_fmt_runs(base, other)})"


def retrieval_findings(results: list[RetrievalResult], tests: FindingTests = FindingTests()) -> list[Finding]:
    out: list[Finding] = []
    by_corpus: dict[str, list[RetrievalResult]] = defaultdict(list)
    for r in results:
        by_corpus[r.corpus].append(r)
    for corpus, rs in by_corpus.items():
        ranked = sorted(rs, key=lambda r: -r.mean)
        best, runner = ranked[0], next((r for r in ranked[1:] if r.view == ranked[0].view), None)
        claim = f"{corpus}: the best system is {best.label} ({PRIMARY} {best.mean:.4f})"
        if runner:
            d = tests.between(runner, best)
            out.append(Finding(f"{claim}, {relative(best.mean, runner.mean)} over {runner.label} ({runner.mean:.4f}), "
                               f"{d.verdict}.", _evidence(runner, best, d), relative_size(best.mean, runner.mean)))
        else:
            out.append(Finding(claim + ".", _fmt_runs(best)))
        out += _best_view(corpus, rs, tests) + _fusion_gains(corpus, rs, tests) + _models_ranked(corpus, rs, tests)
    return out


def _best_view(corpus: str, rs: list[RetrievalResult], tests: FindingTests) -> list[Finding]:
    """The best view of each dense model, every view pair of the model tested as one family (no table holds
    two views)."""
    out = []
    for (model, method), group in _group(rs, lambda r: (r.model, r.method)).items():
        if method != "dense" or len({r.view for r in group}) < 2:
            continue
        ranked = sorted(group, key=lambda r: -r.mean)
        pairs = [(lo, hi) for i, hi in enumerate(ranked) for lo in ranked[i + 1:]]
        deltas = tests.family([(lo.per_query, hi.per_query) for lo, hi in pairs],
                              f"the {len(pairs)} view pairs of dense {model}")
        d = deltas[pairs.index((ranked[1], ranked[0]))]
        others = ", ".join(f"{r.view} {r.mean:.4f}" for r in ranked[1:])
        out.append(Finding(f"{corpus}, dense {model}: view {ranked[0].view} is best ({ranked[0].mean:.4f}), "
                           f"{relative(ranked[0].mean, ranked[1].mean)} over {ranked[1].view}, {d.verdict}.",
                           f"other views {others}; {_evidence(ranked[1], ranked[0], d)}",
                           relative_size(ranked[0].mean, ranked[1].mean)))
    return out


def _fusion_gains(corpus: str, rs: list[RetrievalResult], tests: FindingTests) -> list[Finding]:
    """Fusion over dense for each model, in the view where its dense run scores best."""
    out = []
    for model, group in _group(rs, lambda r: r.model).items():
        dense = [r for r in group if r.method == "dense"]
        if not dense:
            continue
        view = max(dense, key=lambda r: r.mean).view
        by = {r.method: r for r in group if r.view == view}
        for fused in fused_methods():
            if fused in by:
                d = tests.between(by["dense"], by[fused])
                out.append(Finding(f"{corpus}, {model}, view {view}: {method_title(fused)} changes {PRIMARY} by "
                                   f"{relative(by[fused].mean, by['dense'].mean)} over dense ({d.verdict}).",
                                   _evidence(by["dense"], by[fused], d), relative_size(by[fused].mean, by["dense"].mean)))
    return out


def _models_ranked(corpus: str, rs: list[RetrievalResult], tests: FindingTests) -> list[Finding]:
    out = []
    for view, group in _group([r for r in rs if r.method == "dense"], lambda r: r.view).items():
        if len(group) < 2:
            continue
        ranked = sorted(group, key=lambda r: -r.mean)
        steps, deltas = [], []
        for hi, lo in zip(ranked, ranked[1:]):
            d = tests.between(lo, hi)
            steps.append(f"{hi.model} {'>' if d.significant else '≈'} {lo.model}")
            deltas.append(f"{hi.model} {hi.mean:.4f} - {lo.model} {lo.mean:.4f}: {d.text()}")
        out.append(Finding(f"{corpus}, dense, view {view}: {'; '.join(steps)} ('>' significant, '≈' not).",
                           "; ".join(deltas) + f" ({_fmt_runs(*ranked)})", relative_size(ranked[0].mean, ranked[-1].mean)))
    return out


def in_out_finding(corpus: str, label: str, run_id: str, domains: dict[str, tuple[int, float]]) -> Finding | None:
    (n_in, v_in), (n_out, v_out) = domains.get("IN", (0, 0.0)), domains.get("OUT", (0, 0.0))
    if not n_in or not n_out or v_in <= 0:
        return None
    return Finding(f"{corpus}, {label}: {(v_in - v_out) / v_in:.0%} lower on OUT-of-domain queries than on IN.",
                   f"IN {v_in:.4f} (n={n_in}), OUT {v_out:.4f} (n={n_out}) (run {run_id})", relative_size(v_out, v_in))


def recipe_findings(rows: list[dict], tests: FindingTests = FindingTests()) -> list[Finding]:
    """rows: task, corpus, view, what (method or label set), model, recipe, metric, base, tuned (per-query or
    per-split values keyed alike), base_mean, tuned_mean (the means the tables show), percent (the task's scores
    are shown in percent), ids (runs or results). A
    row whose two runs a comparison table holds takes the table's test; the others are tested as one family. Each
    row gets its Delta as `tested`, so the recipe table shows the very test its finding states."""
    tabled = {i: tests.table(tuple(r["ids"]), r["metric"], r["base"], r["tuned"]) for i, r in enumerate(rows)}
    rest = [i for i, d in tabled.items() if d is None]
    tasks = ", ".join(dict.fromkeys(rows[i]["task"] for i in rest))
    tabled.update(zip(rest, tests.family([(rows[i]["base"], rows[i]["tuned"]) for i in rest],
                                         f"the recipe comparisons of {tasks}")))
    out = []
    for r, d in zip(rows, tabled.values()):
        r["tested"] = d
        where = (f"{r['task']} on {r['corpus']} ({r['view']}, {r['what']}, {r['metric']}: "
                 f"{relative(r['tuned_mean'], r['base_mean'], r['percent'])})")
        if not d.reachable:
            claim = f"Recipe {r['recipe']} ({model_title(r['model'])}) changed {where}: {d.verdict}."
        else:
            verb = ("helped" if d.value > 0 else "hurt") if d.significant else "did not change significantly"
            claim = f"Recipe {r['recipe']} ({model_title(r['model'])}) {verb} {where}."
        out.append(Finding(claim, f"{d.text()} (results {', '.join(r['ids'])})", relative_size(r["tuned_mean"], r["base_mean"])))
    return out


def relative_size(value: float, base: float) -> float:
    """A finding's relative change, 0 from a base of 0 (nothing to weigh it against)."""
    return (value - base) / base if base > 0 else 0.0


def _group(rs, key) -> dict:
    out: dict = defaultdict(list)
    for r in rs:
        out[key(r)].append(r)
    return out
