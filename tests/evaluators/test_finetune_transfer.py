"""Transfer statistics: Holm's correction, the paired tests and ranx per-query scores, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalctl.evaluators.scoring.significance import holm
from evalctl.evaluators.tasks.transfer import paired_p, per_query


def test_holm_matches_hand_values():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04): monotone step-down
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([0.2]) == pytest.approx([0.2])


@pytest.mark.slow  # Wilcoxon, Student and a permutation test of thousands of draws
def test_paired_tests():
    a = np.linspace(0.2, 0.8, 30)
    assert paired_p(a, a.copy(), "wilcoxon") == 1.0
    worse = a - 0.1 - np.linspace(0, 0.02, 30)
    for test in ("wilcoxon", "student", "permutation"):
        assert paired_p(worse, a, test) < 0.001
    noisy = a + np.where(np.arange(30) % 2, 0.05, -0.05)
    assert paired_p(noisy, a, "wilcoxon") > 0.5


@pytest.mark.slow  # ranx's own evaluate
def test_per_query_ndcg_is_rankx_with_missing_queries_zero():
    qrels = {"q1": {"d1": 1}, "q2": {"d9": 1}}
    ranking = {"q1": [("d2", 0.9), ("d1", 0.8)]}
    got = per_query(qrels, ranking, "ndcg@10")
    assert got["q1"] == pytest.approx(1 / math.log2(3))
    assert got["q2"] == 0.0
