"""Every significance test and interval evalctl reports, in one place: paired tests on per-query (or
per-split) values, Holm-Bonferroni correction, percentile-bootstrap CIs of a mean.

- `run_p_values`: the paired tests of evalctl compare and the report (`fisher`: approximate randomisation,
  Smucker et al. CIKM'07; `student`: paired t-test), two-sided, on per-query metric values. ranx defines
  both; evalctl runs them itself (seeded numpy sign flips; scipy's `ttest_rel`, which is ranx's own t-test)
  because ranx's randomisation test is not reproducible: its parallel numba workers ignore the
  seed, so two calls on the same runs gave p 0.61 and 0.65 and the report's significance letters changed
  from run to run. tests/test_significance.py holds them against ranx.
- `paired_p`: Wilcoxon signed-rank (scipy), paired t or the randomisation test on two value arrays (transfer;
  `run_p_values` calls it for every pair of a comparison table)
- `holm`: the correction (neither ranx nor scipy applies one); `bootstrap_ci`: scipy.stats.bootstrap
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from scipy import stats


RUN_TESTS = ("fisher", "student")
PairedTest = Literal["wilcoxon", "student", "permutation"]


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


def _randomisation_p(d: np.ndarray, n_permutations: int, seed: int, chunk: int = 100) -> float:
    """Fisher's randomisation test on paired differences as ranx defines it: swap each query's pair (flip
    the sign of its difference) with probability 1/2; p = share of permutations whose |mean| reaches the
    observed one. Seeded numpy sign flips: scipy's permutation_test computes the same test but took 32 s for
    the quickstart report's 657 comparisons (a generic argsort per resample); this takes well under 1 s."""
    rng = np.random.default_rng(seed)
    observed = abs(d.mean()) - 1e-12  # a permutation equal to the observed one counts despite rounding
    hits = 0
    for start in range(0, n_permutations, chunk):  # n_permutations x queries signs, in bounded memory
        signs = rng.choice((-1.0, 1.0), size=(min(chunk, n_permutations - start), len(d)))
        hits += int((np.abs(signs @ d) / len(d) >= observed).sum())
    return hits / n_permutations


def paired_p(a: np.ndarray, b: np.ndarray, test: PairedTest, seed: int = 42, n_permutations: int = 10_000) -> float:
    """Two-sided p-value of a paired test on per-query scores; 1.0 when the two never differ."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or np.array_equal(a, b):
        return 1.0
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)  # zero differences dropped (the classic test)
    if test == "student":
        p = float(stats.ttest_rel(a, b).pvalue)
        return 1.0 if np.isnan(p) else p  # constant differences: no variance, no evidence
    return _randomisation_p(b - a, n_permutations, seed)
