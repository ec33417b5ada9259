"""The findings a report opens with: short claims computed from per-query values, each with its evidence
(CI, runs), saying plainly when a difference is not significant (paired bootstrap CI containing 0)."""

from __future__ import annotations

from evalctl.study.findings import RetrievalResult, in_out_finding, paired_delta, recipe_findings, \
    retrieval_findings

Q = [f"q{i}" for i in range(40)]


def res(model, view, method, values, run):
    return RetrievalResult("pizza", model, view, method, run, f"{method}:{model}:{view}", dict(zip(Q, values)))


def test_paired_delta_significance():
    a = {q: 0.2 for q in Q}
    assert paired_delta(a, {q: 0.5 for q in Q}).significant  # every query gains 0.3
    noisy = {q: 0.2 + (0.3 if i % 2 else -0.3) for i, q in enumerate(Q)}  # mean gain 0
    d = paired_delta(a, noisy)
    assert not d.significant and "not significant" in d.text() and d.n == 40


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
             "base_mean": 0.3, "tuned_mean": 0.4, "ids": ["b1", "t1"]}]
    (line,) = recipe_findings(rows)
    assert line.claim.startswith("Recipe R3 (m+r3) helped retrieval") and "results b1, t1" in line.evidence
    assert "ndcg@10: +33% (+0.1000))" in line.claim and f.size == -0.6
