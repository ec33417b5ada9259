"""Every significance test and interval evalctl reports, in one place: paired tests on per-query (or
per-split) values, Holm-Bonferroni correction over a family, percentile-bootstrap CIs of a mean.

- `family_tests`: the protocol's paired test (significance_params.StatsProtocol) on each difference of a
  family, Holm-corrected over the family: what the comparison tables' letters, the findings and their
  footnotes all read. `fisher` is the paired randomisation test (randomisation.py: exact for few units, else
  seeded random sign flips); `student` ranx's paired t-test (scipy's `ttest_rel`), both two-sided.
- `paired_p`: Wilcoxon signed-rank (scipy), ranx's paired t or the randomisation test on two value arrays
  (transfer)
- `holm`: the correction (neither ranx nor scipy applies one); `bootstrap_ci`: scipy.stats.bootstrap
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evalctl.evaluators.scoring import ranx_engine
from evalctl.evaluators.scoring.randomisation import sign_flip_p, smallest_sign_flip_p
from evalctl.evaluators.scoring.significance_params import PairedTest, StatsProtocol


@dataclass(frozen=True)
class PairTest:
    """One paired difference tested within its family."""

    p: float  # raw two-sided p
    p_holm: float  # Holm-adjusted over the family
    family: int  # how many comparisons the correction ran over
    n: int  # paired units (queries, splits, seeds)
    smallest_p: float  # the smallest raw p the test can give on n units

    def significant(self, alpha: float) -> bool:
        return self.p_holm < alpha

    def reachable(self, alpha: float) -> bool:
        """Whether any comparison of the family could be significant: Holm multiplies the smallest p by the
        family's size (5 seeds: 2/32 = 0.0625 > 0.05, never)."""
        return self.smallest_p * self.family < alpha


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def bootstrap_ci(values, n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the mean (over queries, splits or seeds): nan for no values,
    zero width for a single or constant value."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    if len(values) < 2 or np.ptp(values) == 0:
        return float(values.mean()), float(values.mean())
    res = stats.bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=0.95, method="percentile",
                          random_state=seed)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def family_tests(diffs: Sequence[np.ndarray], protocol: StatsProtocol) -> list[PairTest]:
    """The protocol's test of each paired difference (treatment - control per unit), Holm over all of them."""
    diffs = [np.asarray(d, dtype=float) for d in diffs]
    raw = paired_p_values(diffs, protocol)
    smallest = (lambda n: smallest_sign_flip_p(n, protocol.n_permutations, protocol.exact_up_to)
                if protocol.test == "fisher" else 0.0)
    return [PairTest(p, adjusted, len(diffs), len(d), smallest(len(d)))
            for d, p, adjusted in zip(diffs, raw, holm(raw))]


def paired_p_values(diffs: Sequence[np.ndarray], protocol: StatsProtocol) -> list[float]:
    """Raw two-sided p of the protocol's test for each difference array; the randomisation test runs once
    for all arrays of one length (one matrix of flips)."""
    if protocol.test == "student":
        return [_student(d) for d in diffs]
    p = [1.0] * len(diffs)
    for n in {len(d) for d in diffs}:
        idx = [i for i, d in enumerate(diffs) if len(d) == n]
        for i, value in zip(idx, sign_flip_p(np.column_stack([diffs[i] for i in idx]), protocol.n_permutations,
                                             protocol.seed, protocol.exact_up_to)):
            p[i] = float(value)
    return p


def _student(d: np.ndarray) -> float:
    """ranx's paired t-test on the differences (against zeros): 1.0 for no variance, no evidence."""
    if len(d) < 2 or not d.any():
        return 1.0
    ranx_engine.load()
    from ranx.statistical_tests import paired_student_t_test  # ranx: imported after load()

    p = float(paired_student_t_test(np.zeros_like(d), d)[0])
    return 1.0 if np.isnan(p) else p


def paired_p(a: np.ndarray, b: np.ndarray, test: PairedTest, protocol: StatsProtocol = StatsProtocol()) -> float:
    """Two-sided p-value of a paired test on per-query scores; 1.0 when the two never differ."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or np.array_equal(a, b):
        return 1.0
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)  # zero differences dropped (the classic test)
    if test == "student":
        return _student(b - a)
    return paired_p_values([b - a], protocol)[0]
