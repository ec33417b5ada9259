"""The findings a report opens with, as claims and their tests: a `Finding` is a short claim plus its evidence
(the paired difference with its bootstrap 95% CI, the raw and Holm-adjusted p of the study's protocol and the
family corrected over, the stored runs or results it rests on), which the report puts in a footnote, and its
relative change ("+12% (+0.0141)"), by which the report ranks them. Each task finds its own (its `findings` hook);
the recipe findings here are every task's default.

A difference is called significant only under the study's protocol (significance_params.StatsProtocol): two
systems of one comparison table take the table's own test of the pair, so a finding says what the table's letters
say; comparisons no table holds are tested as one family. With few units the test is exact, and a claim says when
no difference could reach significance (5 seeds: p >= 2/32 = 0.0625).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evalctl.evaluators.scoring.significance import PairTest, bootstrap_ci, family_tests
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.study.page.names import model_title, relative

@dataclass(frozen=True)
class Finding:
    claim: str  # one short sentence
    evidence: str  # the numbers and stored runs/results behind it
    size: float = 0.0  # the relative change it reports, (new - old) / old: the report lists the largest first


@dataclass(frozen=True)
class Delta:
    """A paired difference (b - a over the units both hold) with its CI and its test within a family."""

    value: float
    lo: float
    hi: float
    tested: PairTest
    alpha: float
    family: str  # what the correction ran over, in words

    @property
    def n(self) -> int:
        return self.tested.n

    @property
    def significant(self) -> bool:
        return self.tested.significant(self.alpha)

    @property
    def reachable(self) -> bool:
        return self.tested.reachable(self.alpha)

    @property
    def verdict(self) -> str:
        if self.significant:
            return "significant"
        return "not significant" if self.reachable else f"cannot reach significance with n={self.n}"

    def text(self) -> str:
        t = self.tested
        verdict = (f"{self.verdict}, n={self.n}" if self.reachable
                   else f"smallest possible p {t.smallest_p:.4f}; {self.verdict}")
        return (f"{self.value:+.4f} [95% CI {self.lo:+.4f}, {self.hi:+.4f}; p {t.p:.4f}, Holm p {t.p_holm:.4f} "
                f"over {self.family} ({t.family}); {verdict}]")


@dataclass(frozen=True)
class FindingTests:
    """How the findings test differences: the protocol, and the comparison tables' tests of their pairs."""

    protocol: StatsProtocol = StatsProtocol()
    # (the two run ids, metric) -> the table's test of the pair and its family in words
    tables: dict[tuple[frozenset[str], str], tuple[PairTest, str]] = field(default_factory=dict)

    def family(self, pairs: list[tuple[dict[str, float], dict[str, float]]], name: str) -> list[Delta]:
        """(a, b) per comparison, tested as one family called `name`."""
        diffs = [_diff(a, b) for a, b in pairs]
        return [self._delta(d, t, name) for d, t in zip(diffs, family_tests(diffs, self.protocol))]

    def table(self, ids: tuple[str, str], metric: str, a: dict[str, float], b: dict[str, float]) -> Delta | None:
        """b - a, as the comparison table holding both runs tested it (None: no table holds both)."""
        found = self.tables.get((frozenset(ids), metric))
        return None if found is None else self._delta(_diff(a, b), *found)

    def _delta(self, d: np.ndarray, tested: PairTest, family: str) -> Delta:
        lo, hi = bootstrap_ci(d, self.protocol.n_bootstrap, self.protocol.seed)
        return Delta(float(d.mean()) if len(d) else float("nan"), lo, hi, tested, self.protocol.alpha, family)


def _diff(a: dict[str, float], b: dict[str, float]) -> np.ndarray:
    return np.array([b[k] - a[k] for k in sorted(set(a) & set(b))])


def recipe_findings(rows: list[dict], tests: FindingTests = FindingTests()) -> list[Finding]:
    """rows: task, corpus, view, what (method or label set), model, recipe, metric, base, tuned (per-query or
    per-split values keyed alike), base_mean, tuned_mean (the means the tables show), percent (the task's scores
    are shown in percent), ids (runs or results). A
    row whose two runs a comparison table holds takes the table's test; the others are tested as one family. Each
    row gets its Delta as `tested`, so the recipe table shows the very test its finding states."""
    tabled = {i: tests.table(tuple(r["ids"]), r["metric"], r["base"], r["tuned"]) for i, r in enumerate(rows)}
    rest = [i for i, d in tabled.items() if d is None]
    tasks = ", ".join(dict.fromkeys(rows[i]["task"] for i in rest))
    tabled.update(zip(rest, tests.family([(rows[i]["base"], rows[i]["tuned"]) for i in rest],
                                         f"the recipe comparisons of {tasks}")))
    out = []
    for r, d in zip(rows, tabled.values()):
        r["tested"] = d
        where = (f"{r['task']} on {r['corpus']} ({r['view']}, {r['what']}, {r['metric']}: "
                 f"{relative(r['tuned_mean'], r['base_mean'], r['percent'])})")
        if not d.reachable:
            claim = f"Recipe {r['recipe']} ({model_title(r['model'])}) changed {where}: {d.verdict}."
        else:
            verb = ("helped" if d.value > 0 else "hurt") if d.significant else "did not change significantly"
            claim = f"Recipe {r['recipe']} ({model_title(r['model'])}) {verb} {where}."
        out.append(Finding(claim, f"{d.text()} (results {', '.join(r['ids'])})", relative_size(r["tuned_mean"], r["base_mean"])))
    return out


def relative_size(value: float, base: float) -> float:
    """A finding's relative change, 0 from a base of 0 (nothing to weigh it against)."""
    return (value - base) / base if base > 0 else 0.0
