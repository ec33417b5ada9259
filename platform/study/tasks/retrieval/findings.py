"""The retrieval task's findings, from this spec's stored runs: the best system, the best view, the fusion gain over
dense, the models ranked per corpus, and the IN->OUT drop. A difference between two systems of one comparison
table (one corpus and view) takes the table's own test; the dense views of a model are tested as one family
(every view pair)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from evalctl.evaluators.retrieval.methods import fused_methods
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.study.page.findings import Delta, Finding, FindingTests, relative_size
from evalctl.study.page.names import method_title, model_title, relative, system_title


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


def between(tests: FindingTests, base: RetrievalResult, other: RetrievalResult) -> Delta:
    """other - base: the table's test; two runs no table holds together: a family of their own."""
    return (tests.table((base.run_id, other.run_id), PRIMARY, base.per_query, other.per_query)
            or tests.family([(base.per_query, other.per_query)], "this pair alone")[0])


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
            d = between(tests, runner, best)
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
                d = between(tests, by["dense"], by[fused])
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
            d = between(tests, lo, hi)
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


def _group(rs, key) -> dict:
    out: dict = defaultdict(list)
    for r in rs:
        out[key(r)].append(r)
    return out
