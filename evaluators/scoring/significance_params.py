"""What the significance tests are asked with, declared once and light to import (significance.py, which runs
them, needs scipy): the tests' names, and a comparison table's test settings, whose fields `evalctl compare`
generates its options from and evalctl.evaluators.scoring.compare.compare_runs takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from evalctl.parameters import param

RUN_TESTS = ("fisher", "student")  # ranx's paired tests on per-query metric values (significance.run_p_values)
PairedTest = Literal["wilcoxon", "student", "permutation"]  # on two value arrays (significance.paired_p)
PAIRED_TESTS: tuple[str, ...] = get_args(PairedTest)


@dataclass(frozen=True)
class CompareParams:
    """The report's other CIs are computed as compare_runs' by default (compare.run_ci)."""

    test: str = param("fisher", choices=RUN_TESTS, help="Test behind the markers (both are in the paired-tests table).")
    alpha: float = param(0.05)
    n_permutations: int = param(1000, flag="--permutations")
    n_bootstrap: int = param(1000, flag="--bootstrap")
    seed: int = param(42)


TEST_NAMES = {"fisher": "Fisher's randomization test", "student": "paired Student's t-test"}


def describe_protocol(test: str, alpha: float, n_permutations: int, family: str) -> str:
    """The test behind a table's letters in words, for its caption: which test, its correction over which
    comparisons (`family`, in words: "the table's 60 comparisons ..."), and the threshold."""
    runs = f" ({n_permutations:,} permutations)" if test == "fisher" else ""
    return f"{TEST_NAMES.get(test, test)}{runs}, two-sided, Holm-corrected over {family}, p < {alpha}"
