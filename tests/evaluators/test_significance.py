"""The paired tests of compare and the report: reproducible, and the same tests as ranx's."""

from __future__ import annotations

import numpy as np
import pytest
from ranx import Qrels, Run, compare

from evalctl.evaluators.scoring.significance import run_p_values


def _systems(n=200, shift=0.03, seed=7):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, n)
    b = np.clip(a + shift + rng.normal(0, 0.15, n), 0, 1)
    return {"a": {"m": a}, "b": {"m": b}}


def test_fisher_is_reproducible_for_a_seed():
    values = _systems()
    first = run_p_values(values, [("a", "b", "m")], "fisher", n_permutations=1000, seed=42)
    assert first == run_p_values(values, [("a", "b", "m")], "fisher", n_permutations=1000, seed=42)
    assert first != run_p_values(values, [("a", "b", "m")], "fisher", n_permutations=1000, seed=1)


def test_identical_systems_get_p_one_and_clear_differences_small_p():
    values = _systems(shift=0.2)
    values["c"] = {"m": values["a"]["m"].copy()}
    for test in ("fisher", "student"):
        same, differ = run_p_values(values, [("a", "c", "m"), ("a", "b", "m")], test, n_permutations=500, seed=0)
        assert same == 1.0 and differ < 0.01
    with pytest.raises(ValueError, match="unknown test"):
        run_p_values(values, [("a", "b", "m")], "wilcoxon", n_permutations=10, seed=0)


@pytest.mark.parametrize("shift", [0.0, 0.02, 0.05])
@pytest.mark.slow  # ranx's own compare
def test_same_tests_as_ranx(shift):
    """Student's t equals ranx's to 1e-9; the randomisation p agrees within Monte Carlo error (4000 draws each:
    sd of the difference about 0.011, tolerance 0.05)."""
    values = _systems(shift=shift)
    a, b = values["a"]["m"], values["b"]["m"]
    qrels = Qrels({f"q{i}": {"rel": 1} for i in range(len(a))})
    # Runs whose reciprocal rank of the one relevant document is the wanted per-query value (1/rank).
    def run(v, name):
        ranks = np.maximum(1, np.round(1 / np.maximum(v, 1e-3))).astype(int)
        return Run({f"q{i}": {**{f"x{j}": 100.0 - j for j in range(r - 1)}, "rel": 100.0 - r + 1}
                    for i, r in enumerate(ranks)}, name=name)
    ra, rb = run(a, "a"), run(b, "b")
    ours = {"a": {"mrr": 1 / np.maximum(1, np.round(1 / np.maximum(a, 1e-3)))},
            "b": {"mrr": 1 / np.maximum(1, np.round(1 / np.maximum(b, 1e-3)))}}
    for test, tol in (("student", 1e-9), ("fisher", 0.05)):
        rep = compare(qrels, [ra, rb], ["mrr"], stat_test=test, n_permutations=4000, max_p=0.05, random_seed=42)
        theirs = rep.comparisons["a", "b"]["mrr"]["p_value"]
        mine = run_p_values(ours, [("a", "b", "mrr")], test, n_permutations=4000, seed=42)[0]
        assert abs(mine - theirs) <= tol, (test, mine, theirs)


@pytest.mark.slow  # a second process
def test_fisher_gives_the_same_p_in_two_processes():
    """ranx's randomisation test draws in numba workers its seed never reached (p changed between calls);
    seeded on one worker, two fresh processes give the same p-values for the same inputs."""
    import subprocess
    import sys

    code = ("import numpy as np; from evalctl.evaluators.scoring.significance import run_p_values; "
            "rng = np.random.default_rng(7); a = rng.uniform(0, 1, 300); b = np.clip(a + 0.01 + rng.normal(0, 0.15, 300), 0, 1); "
            "v = {'a': {'m': a}, 'b': {'m': b}}; "
            "print([run_p_values(v, [('a', 'b', 'm')], 'fisher', n_permutations=1000, seed=s)[0] for s in (42, 42, 1)])")
    first, second = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    timeout=600).stdout for _ in range(2))
    p42, again, p1 = eval(first)
    assert first == second and p42 == again and p1 != p42 and 0.01 < p42 < 0.5
