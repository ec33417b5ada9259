"""The findings a report opens with: short claims computed from per-query values, each with its evidence
(CI, raw and Holm-adjusted p, runs), tested under the study's protocol: a pair a comparison table holds takes
the table's test (so a finding says what the letters say), and with few units the claim says when no
difference can reach significance."""

from __future__ import annotations

from evalctl.evaluators.scoring.significance import PairTest
from evalctl.study.page.findings import FindingTests, recipe_findings
from evalctl.study.tasks.retrieval.findings import RetrievalResult, in_out_finding, retrieval_findings

Q = [f"q{i}" for i in range(40)]


def res(model, view, method, values, run):
    return RetrievalResult("pizza", model, view, method, run, f"{method}:{model}:{view}", dict(zip(Q, values)))


def test_delta_significance_under_the_protocol():
    a = {q: 0.2 for q in Q}
    gain, = FindingTests().family([(a, {q: 0.5 for q in Q})], "one pair")  # every query gains 0.3
    assert gain.significant and gain.tested.p == 1 / 10_001 and "Holm p 0.0001 over one pair (1)" in gain.text()
    noisy = {q: 0.2 + (0.3 if i % 2 else -0.3) for i, q in enumerate(Q)}  # mean gain 0
    d, = FindingTests().family([(a, noisy)], "one pair")
    assert not d.significant and "not significant" in d.text() and d.n == 40


def test_a_pair_a_table_holds_takes_the_tables_test():
    """The letters' test and family decide the finding, even where the pair alone would be significant."""
    base = res("minilm", "TA", "dense", [0.5] * 40, "r1")
    hybrid = res("minilm", "TA", "hybrid", [0.52] * 40, "r3")
    table = PairTest(p=0.004, p_holm=0.08, family=20, n=40, smallest_p=1 / 10_001)
    family = "the system pairs of the pizza TA table"
    tests = FindingTests(tables={(frozenset(("r1", "r3")), "ndcg@10"): (table, family)})
    gain = next(f for f in retrieval_findings([base, hybrid], tests) if "Hybrid changes" in f.claim)
    assert "(not significant)" in gain.claim
    assert "p 0.0040, Holm p 0.0800 over the system pairs of the pizza TA table (20)" in gain.evidence
    alone = next(f for f in retrieval_findings([base, hybrid]) if "Hybrid changes" in f.claim)
    assert "(significant)" in alone.claim and "over this pair alone (1)" in alone.evidence


def test_retrieval_findings_name_runs_and_rank():
    dense_ta = res("minilm", "TA", "dense", [0.5] * 40, "r1")
    dense_t = res("minilm", "T", "dense", [0.3] * 40, "r2")
    hybrid_ta = res("minilm", "TA", "hybrid", [0.5 + (0.01 if i % 2 else -0.01) for i in range(40)], "r3")
    mpnet_ta = res("mpnet", "TA", "dense", [0.6] * 40, "r4")
    found = retrieval_findings([dense_ta, dense_t, hybrid_ta, mpnet_ta])
    claims, evidence = [f.claim for f in found], "\n".join(f.evidence for f in found)
    assert claims[0].startswith("pizza: the best system is dense:mpnet:TA") and "r4" in found[0].evidence
    assert all(" r1" not in c and " r4" not in c for c in claims)  # run ids are evidence, not claims
    view = next(f for f in found if "view TA is best" in f.claim)
    assert "+67% (+0.2000) over T, significant." in view.claim and "not" not in view.claim
    assert "runs r2, r1" in view.evidence and abs(view.size - 2 / 3) < 1e-9  # the report ranks findings by it
    gain = next(f for f in found if "Hybrid changes" in f.claim)  # the method as a reader knows it
    assert "(not significant)" in gain.claim and "runs r1, r3" in gain.evidence
    ranked = next(f for f in found if "mpnet > minilm" in f.claim)
    assert "mpnet 0.6000 - minilm 0.5000" in ranked.evidence
    assert "runs r2, r1" in evidence


def test_in_out_and_recipe_findings():
    f = in_out_finding("pizza", "dense:m:TA", "r1", {"IN": (300, 0.4), "OUT": (50, 0.16)})
    assert "60% lower on OUT" in f.claim and "n=50" in f.evidence and "r1" in f.evidence
    assert in_out_finding("pizza", "x", "r1", {"IN": (10, 0.4), "OUT": (0, 0.0)}) is None
    rows = [{"task": "retrieval", "corpus": "pizza", "view": "TA", "what": "dense", "model": "m+r3",
             "recipe": "R3", "metric": "ndcg@10", "base": {q: 0.3 for q in Q}, "tuned": {q: 0.4 for q in Q},
             "base_mean": 0.3, "tuned_mean": 0.4, "percent": False, "ids": ["b1", "t1"]}]
    (line,) = recipe_findings(rows)
    assert line.claim.startswith("Recipe R3 (m+r3) helped retrieval") and "results b1, t1" in line.evidence
    assert rows[0]["tested"].significant and rows[0]["tested"].text() in line.evidence  # the recipe table's test
    assert "ndcg@10: +33% (+0.1000))" in line.claim and f.size == -0.6


def test_five_seeds_cannot_reach_significance_and_the_claim_says_so():
    """An exact sign-flip test on 5 pairs cannot go below p = 2/32 = 0.0625 > 0.05: not "did not change"."""
    splits = [f"seed{i}" for i in range(5)]
    rows = [{"task": "classification", "corpus": "pizza", "view": "T", "what": "ipc3", "model": "m+r3",
             "recipe": "R3", "metric": "micro_f1", "base": dict(zip(splits, [0.60, 0.61, 0.62, 0.60, 0.63])),
             "tuned": dict(zip(splits, [0.61, 0.63, 0.63, 0.62, 0.64])), "base_mean": 0.612, "tuned_mean": 0.626,
             "percent": True, "ids": ["b1", "t1"]}]
    (line,) = recipe_findings(rows)
    assert "cannot reach significance with n=5" in line.claim and "did not change" not in line.claim
    assert "micro_f1: +2.3% (+1.4 pt)" in line.claim  # F1 is shown in percent: the change in points
    assert "p 0.0625" in line.evidence and "smallest possible p 0.0625" in line.evidence


def test_a_change_reads_relative_first_and_never_as_zero_percent():
    from evalctl.study.page.names import relative

    assert relative(0.12, 0.1) == "+20% (+0.0200)" and relative(0.1006, 0.1) == "+0.6% (+0.0006)"
    assert relative(0.0995, 0.1) == "-0.5% (-0.0005)" and relative(0.05, 0.0) == "+0.0500"
    assert relative(0.66, 0.656, percent=True) == "+0.6% (+0.4 pt)"
