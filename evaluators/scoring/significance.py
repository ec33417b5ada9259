"""Every significance test and interval evalctl reports, in one place: paired tests on per-query (or
per-split) values, Holm-Bonferroni correction, percentile-bootstrap CIs of a mean.

- `run_p_values`: the paired tests of evalctl compare and the report, ranx's two (`fisher`: its approximate
  randomisation test, Smucker et al. CIKM'07; `student`: its paired t-test, scipy's `ttest_rel`), two-sided,
  on per-query metric values. ranx's randomisation test runs through ranx_engine.fisher, seeded and on one
  thread, so the same runs give the same p and letters in every process.
- `paired_p`: Wilcoxon signed-rank (scipy), ranx's paired t or randomisation test on two value arrays
  (transfer; `run_p_values` calls it for every pair of a comparison table)
- `holm`: the correction (neither ranx nor scipy applies one); `bootstrap_ci`: scipy.stats.bootstrap
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from evalctl.evaluators.scoring import ranx_engine
from evalctl.evaluators.scoring.significance_params import RUN_TESTS, PairedTest


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


def run_p_values(values: Mapping[str, Mapping[str, np.ndarray]], keys: Sequence[tuple[str, str, str]], test: str,
                 *, n_permutations: int, seed: int) -> list[float]:
    """Raw two-sided p of `test` (RUN_TESTS) for each (system a, system b, metric) of `keys`;
    `values[system][metric]` holds per-query scores in one query order (a query a run misses scores 0)."""
    if test not in RUN_TESTS:
        raise ValueError(f"unknown test {test!r}; one of {', '.join(RUN_TESTS)}")
    paired: PairedTest = "permutation" if test == "fisher" else "student"
    return [paired_p(values[a][m], values[b][m], paired, seed, n_permutations) for a, b, m in keys]


def paired_p(a: np.ndarray, b: np.ndarray, test: PairedTest, seed: int = 42, n_permutations: int = 10_000) -> float:
    """Two-sided p-value of a paired test on per-query scores; 1.0 when the two never differ."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or np.array_equal(a, b):
        return 1.0
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)  # zero differences dropped (the classic test)
    if test == "student":
        ranx_engine.load()
        from ranx.statistical_tests import paired_student_t_test  # ranx: imported after load()

        p = float(paired_student_t_test(a, b)[0])
        return 1.0 if np.isnan(p) else p  # constant differences: no variance, no evidence
    return ranx_engine.fisher(a, b, n_permutations, seed)
