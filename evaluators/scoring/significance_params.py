"""The study's one statistical protocol, declared once and light to import (significance.py, which runs the
tests, needs scipy): a spec's `statistics:` section, `evalctl compare`'s options (generated from its fields)
and what evalctl.evaluators.scoring.compare.compare_runs and the report's findings take. `describe_protocol`
is the one text that states it, in the report and in the tables' captions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from evalctl.parameters import check_values, param

RUN_TESTS = ("fisher", "student")  # paired tests on per-unit values (significance.paired_p_values)
TEST_NAMES = {"fisher": "Fisher's paired randomisation test", "student": "paired Student's t-test"}  # a caption's
PairedTest = Literal["wilcoxon", "student", "permutation"]  # on two value arrays (significance.paired_p)
PAIRED_TESTS: tuple[str, ...] = get_args(PairedTest)
EXACT_LIMIT = 20  # 2^20 sign flips: the most units an exact test enumerates (memory and time stay small)
Family = Literal["metric", "table"]
_FAMILIES = {"metric": "all system pairs of one table (one corpus and view) for one metric",
             "table": "all system pairs x metrics of one table (one corpus and view)"}


@dataclass(frozen=True)
class StatsProtocol:
    """How every difference the report and `evalctl compare` call significant is tested: one paired test,
    Holm's correction over a stated family, one alpha. Sakai (2014) and Smucker et al. (CIKM'07) recommend the
    randomisation test for IR; 10,000 random sign flips put the smallest p at 1e-4, so Holm over a view's
    91 pairs can still reach 0.05 (1,000 could not: 0.001 x 91 > 0.05). The bootstrap fields set the CIs shown
    beside the p-values (compare.run_ci)."""

    test: str = param("fisher", choices=RUN_TESTS, help="fisher: paired randomisation (sign-flip) test; "
                      "student: paired t-test.")
    n_permutations: int = param(10_000, flag="--permutations", min=1000,
                                help="Random sign flips of the randomisation test (when not exact).")
    exact_up_to: int = param(16, min=0, max=EXACT_LIMIT,
                             help="Enumerate all 2^n sign flips (an exact p) for n units up to this.")
    family: Family = param("metric", help="What Holm's correction runs over: metric: a table's system pairs "
                           "for one metric; table: its pairs x metrics.")
    alpha: float = param(0.05, min=0, max=1, min_open=True, max_open=True)
    n_bootstrap: int = param(1000, flag="--bootstrap", min=100, help="Bootstrap resamples of the 95% CIs.")
    seed: int = param(42)

    def __post_init__(self):
        check_values(self)  # a spec's section meets the command line's bounds, each message naming its key


def describe_protocol(protocol: StatsProtocol) -> str:
    """The protocol in one paragraph, as the report and the tables' captions print it."""
    if protocol.test == "fisher":
        test = (f"a two-sided paired randomisation test (Fisher's: the signs of the per-unit differences "
                f"flipped, the mean difference compared): exact, over all 2^n flips, for n <= "
                f"{protocol.exact_up_to} units (queries, splits or seeds), else {protocol.n_permutations:,} random "
                f"flips (seed {protocol.seed}; p = (flips at least as extreme + 1) / "
                f"{protocol.n_permutations + 1:,})")
    else:
        test = "a two-sided paired Student's t-test"
    return (f"Statistics: every difference called significant is tested with {test}; p-values are "
            f"Holm-corrected over a family of {_FAMILIES[protocol.family]}, findings that compare across views "
            f"or recipes over the comparisons of that kind; a difference is significant at Holm-adjusted "
            f"p < {protocol.alpha}. Intervals are percentile-bootstrap 95% CIs ({protocol.n_bootstrap:,} "
            f"resamples, seed {protocol.seed}).")
