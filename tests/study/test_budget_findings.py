"""The budget finding of the quality-and-cost section (platform/study/tasks/latency/quality_cost.budget_findings) on
systems timed by a fake interleaved experiment: it names a system only where the p95 CIs settle it, says what the
machine cannot tell apart otherwise, and draws nothing from a busy experiment."""

from __future__ import annotations

import numpy as np
import pytest

from evalctl.evaluators.retrieval.latency_design import Analysis, Rounds, Timing
from evalctl.evaluators.retrieval.serving_cost import ServingCost
from evalctl.study.page.findings import FindingTests
from evalctl.study.tasks.latency.quality_cost import Budget, System, Timed, budget_findings
from evalctl.study.tasks.retrieval.findings import RetrievalResult

QUERIES, ROUNDS = 40, 5


def _systems(latencies: list[float], scores: list[float], noise: float, busy: bool = False) -> list[System]:
    """One system per (true p95-ish latency, nDCG@10), timed together: the latencies with gaussian noise."""
    rng = np.random.default_rng(3)
    timings = tuple(Timing(s, r, q, 0, float(ms + rng.normal(0, noise)))
                    for r in range(ROUNDS) for q in range(QUERIES) for s, ms in enumerate(latencies))
    analysis = Analysis(Rounds(timings, (0.0,) * ROUNDS, (True,) * ROUNDS, ROUNDS), len(latencies), QUERIES, 300)
    out = []
    for i, score in enumerate(scores):
        p95 = analysis.percentile(i, 95)
        quality = RetrievalResult("c", f"m{i}", "T", "dense", f"run{i}", f"system {i}",
                                  {f"q{q}": score + rng.normal(0, 0.01) for q in range(QUERIES)})
        cost = ServingCost("exp", "now", 1, p95.value, p95.value, None, busy, 10.0, None, None, None, None, None,
                           p95_ci=(p95.lo, p95.hi))
        out.append(System(quality, (score - 0.01, score + 0.01), cost, None, None,
                          Timed(analysis, i, "exp", busy, {}, "serving")))
    return out


@pytest.mark.parametrize("latencies, noise, said", [
    ([40.0, 10.0], 1.0, "the best system is system 1"),  # the better one far over, this one far within
    ([30.0, 15.0], 3.0, "this machine cannot tell whether system 1"),  # its p95's CI straddles the bound
    ([40.0, 30.0], 1.0, "no system measured fits"),
])
def test_a_system_is_named_only_where_the_noise_allows(latencies, noise, said):
    claim = budget_findings(_systems(latencies, [0.30, 0.20], noise), {"c": Budget(p95_ms=20.0)}, FindingTests())
    assert said in claim[0].claim, claim[0]


def test_a_busy_experiment_gives_no_finding():
    claim = budget_findings(_systems([40.0, 10.0], [0.30, 0.20], 1.0, busy=True), {"c": Budget(p95_ms=20.0)},
                            FindingTests())[0].claim
    assert "no finding: the latency was measured while other work held the machine" in claim
