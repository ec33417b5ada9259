"""The findings a report opens with, computed from this spec's stored results: best view, best method,
fusion gain over dense, the IN->OUT drop, models ranked, and which recipe helped which task; each with its
relative change ("+12% (+0.0141)"), by which the report ranks them.

Each finding is a short claim plus its evidence (the paired difference with its CI, the stored runs or
results it rests on), which the report puts in a footnote. A difference is called significant only when
its paired 95% bootstrap CI (over queries for retrieval, over splits/seeds for the label tasks) excludes 0;
otherwise the claim says it is not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from evalctl.evaluators.scoring.significance import bootstrap_ci
from evalctl.evaluators.retrieval.methods import fused_methods
from evalctl.evaluators.scoring.metrics import PRIMARY
from evalctl.study.display_names import method_title, model_title, relative


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


@dataclass(frozen=True)
class Finding:
    claim: str  # one short sentence
    evidence: str  # the numbers and stored runs/results behind it
    size: float = 0.0  # the relative change it reports, (new - old) / old: the report lists the largest first


@dataclass(frozen=True)
class Delta:
    value: float
    lo: float
    hi: float
    n: int

    @property
    def significant(self) -> bool:
        return self.n > 1 and (self.lo > 0 or self.hi < 0)

    @property
    def verdict(self) -> str:
        return "significant" if self.significant else "not significant"

    def text(self) -> str:
        return f"{self.value:+.4f} [95% CI {self.lo:+.4f}, {self.hi:+.4f}; {self.verdict}, n={self.n}]"


def paired_delta(a: dict[str, float], b: dict[str, float]) -> Delta:
    """b - a over the keys both hold, with a bootstrap CI of the mean paired difference."""
    keys = sorted(set(a) & set(b))
    d = np.array([b[k] - a[k] for k in keys])
    lo, hi = bootstrap_ci(d)
    return Delta(float(d.mean()) if len(d) else float("nan"), lo, hi, len(keys))


def _fmt_runs(*results: RetrievalResult) -> str:
    return "runs " + ", ".join(r.run_id for r in results)


def _over(base: RetrievalResult, other: RetrievalResult) -> tuple[Delta, str]:
    """other - base per query: the difference, and its evidence (CI and the two runs)."""
    d = paired_delta(base.per_query, other.per_query)
    return d, f"{other.label} - {base.label}: {d.text()} ({_fmt_runs(base, other)})"


def retrieval_findings(results: list[RetrievalResult]) -> list[Finding]:
    out: list[Finding] = []
    by_corpus: dict[str, list[RetrievalResult]] = defaultdict(list)
    for r in results:
        by_corpus[r.corpus].append(r)
    for corpus, rs in by_corpus.items():
        ranked = sorted(rs, key=lambda r: -r.mean)
        best, runner = ranked[0], next((r for r in ranked[1:] if r.view == ranked[0].view), None)
        claim = f"{corpus}: the best system is {best.label} ({PRIMARY} {best.mean:.4f})"
        if runner:
            d, evidence = _over(runner, best)
            out.append(Finding(f"{claim}, {relative(best.mean, runner.mean)} over {runner.label} ({runner.mean:.4f}), "
                               f"{d.verdict}.", evidence, _size(best.mean, runner.mean)))
        else:
            out.append(Finding(claim + ".", _fmt_runs(best)))
        out += _best_view(corpus, rs) + _fusion_gains(corpus, rs) + _models_ranked(corpus, rs)
    return out


def _best_view(corpus: str, rs: list[RetrievalResult]) -> list[Finding]:
    out = []
    for (model, method), group in _group(rs, lambda r: (r.model, r.method)).items():
        if method != "dense" or len({r.view for r in group}) < 2:
            continue
        ranked = sorted(group, key=lambda r: -r.mean)
        others = ", ".join(f"{r.view} {r.mean:.4f}" for r in ranked[1:])
        d, evidence = _over(ranked[1], ranked[0])
        out.append(Finding(f"{corpus}, dense {model}: view {ranked[0].view} is best ({ranked[0].mean:.4f}), "
                           f"{relative(ranked[0].mean, ranked[1].mean)} over {ranked[1].view}, {d.verdict}.",
                           f"other views {others}; {evidence}", _size(ranked[0].mean, ranked[1].mean)))
    return out


def _fusion_gains(corpus: str, rs: list[RetrievalResult]) -> list[Finding]:
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
                d, evidence = _over(by["dense"], by[fused])
                out.append(Finding(f"{corpus}, {model}, view {view}: {method_title(fused)} changes {PRIMARY} by "
                                   f"{relative(by[fused].mean, by['dense'].mean)} over dense ({d.verdict}).", evidence,
                                   _size(by[fused].mean, by["dense"].mean)))
    return out


def _models_ranked(corpus: str, rs: list[RetrievalResult]) -> list[Finding]:
    out = []
    for view, group in _group([r for r in rs if r.method == "dense"], lambda r: r.view).items():
        if len(group) < 2:
            continue
        ranked = sorted(group, key=lambda r: -r.mean)
        steps, deltas = [], []
        for hi, lo in zip(ranked, ranked[1:]):
            d = paired_delta(lo.per_query, hi.per_query)
            steps.append(f"{hi.model} {'>' if d.significant else '≈'} {lo.model}")
            deltas.append(f"{hi.model} {hi.mean:.4f} - {lo.model} {lo.mean:.4f}: {d.text()}")
        out.append(Finding(f"{corpus}, dense, view {view}: {'; '.join(steps)} ('>' significant, '≈' not).",
                           "paired bootstrap; " + "; ".join(deltas) + f" ({_fmt_runs(*ranked)})",
                           _size(ranked[0].mean, ranked[-1].mean)))
    return out


def in_out_finding(corpus: str, label: str, run_id: str, domains: dict[str, tuple[int, float]]) -> Finding | None:
    (n_in, v_in), (n_out, v_out) = domains.get("IN", (0, 0.0)), domains.get("OUT", (0, 0.0))
    if not n_in or not n_out or v_in <= 0:
        return None
    return Finding(f"{corpus}, {label}: {(v_in - v_out) / v_in:.0%} lower on OUT-of-domain queries than on IN.",
                   f"IN {v_in:.4f} (n={n_in}), OUT {v_out:.4f} (n={n_out}) (run {run_id})", _size(v_out, v_in))


def recipe_findings(rows: list[dict]) -> list[Finding]:
    """rows: task, corpus, view, what (method or label set), model, recipe, metric, base, tuned (per-query or
    per-split values keyed alike), base_mean, tuned_mean (the means the tables show), ids."""
    out = []
    for r in rows:
        d = paired_delta(r["base"], r["tuned"])
        verb = ("helped" if d.value > 0 else "hurt") if d.significant else "did not change significantly"
        out.append(Finding(f"Recipe {r['recipe']} ({model_title(r['model'])}) {verb} {r['task']} on {r['corpus']} "
                           f"({r['view']}, {r['what']}, {r['metric']}: {relative(r['tuned_mean'], r['base_mean'])}).",
                           f"{d.text()} (results {', '.join(r['ids'])})", _size(r["tuned_mean"], r["base_mean"])))
    return out


def _size(value: float, base: float) -> float:
    """A finding's relative change, 0 from a base of 0 (nothing to weigh it against)."""
    return (value - base) / base if base > 0 else 0.0


def _group(rs, key) -> dict:
    out: dict = defaultdict(list)
    for r in rs:
        out[key(r)].append(r)
    return out
