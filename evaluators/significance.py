"""Every significance test and interval evalctl reports, in one place: paired tests on per-query (or
per-split) values, Holm-Bonferroni correction, percentile-bootstrap CIs of a mean.

- `ranx_p_values`: ranx's paired tests between runs (`fisher`: approximate randomisation; `student`:
  paired t-test), two-sided, on ranx's own per-query metric values (evalctl compare)
- `paired_p`: scipy's Wilcoxon signed-rank, paired t or permutation test on two value arrays (transfer)
- `holm`: the correction (neither ranx nor scipy applies one); `bootstrap_ci`: scipy.stats.bootstrap
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from scipy import stats

from evalctl.evaluators.runs import Ranking, as_ranx

RANX_TESTS = ("fisher", "student")
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


def ranx_p_values(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Ranking],
                  keys: Sequence[tuple[str, str, str]], test: str, *, n_permutations: int, alpha: float,
                  seed: int) -> list[float]:
    """Raw two-sided p of ranx's `test` for each (system a, system b, metric) of `keys`, on the qrels'
    queries (a query a run misses scores 0). Identical per-query values give the t-test a nan p: no
    evidence of a difference, so p = 1."""
    from ranx import Qrels, compare  # ranx compiles its kernels on first use: only when tests are asked

    runs = [as_ranx({q: r.get(q, []) for q in qrels}, s) for s, r in rankings.items()]
    metrics = list(dict.fromkeys(m for _, _, m in keys))
    rep = compare(Qrels(qrels), runs, metrics, stat_test=test, n_permutations=n_permutations, max_p=alpha,
                  random_seed=seed, make_comparable=True)
    return [1.0 if np.isnan(p := float(rep.comparisons[a, b][m]["p_value"])) else p for a, b, m in keys]


def paired_p(a: np.ndarray, b: np.ndarray, test: PairedTest, seed: int = 42) -> float:
    """Two-sided p-value of a paired test on per-query scores; 1.0 when the two never differ."""
    if len(a) < 2 or np.allclose(a, b):
        return 1.0
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)  # zero differences dropped (the classic test)
    if test == "student":
        return float(stats.ttest_rel(a, b).pvalue)
    res = stats.permutation_test((a, b), lambda x, y: np.mean(x - y), permutation_type="samples",
                                 n_resamples=10_000, random_state=seed)
    return float(res.pvalue)
