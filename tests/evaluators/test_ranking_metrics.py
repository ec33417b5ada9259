"""Scoring and client-side fusion go through ranx: scoring.score (ranx.evaluate on plain dicts, queries
without a hit filled with 0) gives exactly what ranx.evaluate gives on its Qrels/Run objects with
make_comparable, and fuse_rankings (ranx.fuse per group of queries answered by the same runs) gives
ranx.fuse's numbers on whole runs, on rankings with graded judgments, ties, empty and missing results,
queries without a relevant document and single-hit lists."""

from __future__ import annotations

import random

import pytest
from ranx import Qrels, evaluate, fuse

from evalctl.evaluators.fusion.client_fusion import fuse_rankings
from evalctl.evaluators.scoring.runs import as_ranx, ranked
from evalctl.evaluators.scoring.metrics import METRICS, score
from evalctl.evaluators.fusion.settings import FusionSpec

EXTRA = ("ndcg@1", "ndcg@5", "recall@1", "map@10", "mrr@100", "map@3")


def _case(seed: int, n_queries: int = 60, n_docs: int = 300):
    rng = random.Random(seed)
    docs = [f"D{i:04d}" for i in range(n_docs)]
    qrels, ranking = {}, {}
    for q in range(n_queries):
        qid = f"Q{q:03d}"
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        if q % 17 == 5:
            continue  # missing from the run: scores 0
        depth = 0 if q % 13 == 7 else rng.randint(1, 150)
        pool = rng.sample(docs, min(depth, n_docs))
        # rounded scores make ties, which the (score, id) order resolves
        ranking[qid] = ranked([(d, round(rng.random(), 1)) for d in pool])
        if q % 9 == 4:
            ranking[qid] = ranked([(d, 1.0) for d in judged if qrels[qid][d] >= 1][:1] + ranking[qid][:20])
    qrels["Qnopos"] = {docs[0]: 0}
    ranking["Qnopos"] = ranked([(docs[0], 1.0)])
    return qrels, ranking


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow  # ranx's own evaluate, every metric compiled
def test_scores_are_ranx_on_its_own_objects(seed):
    qrels, ranking = _case(seed)
    metrics = (*METRICS, *EXTRA)
    ours = score(ranking, qrels, metrics)
    run = as_ranx({q: ranking.get(q, []) for q in qrels}, "run")
    evaluate(Qrels(qrels), run, list(metrics), make_comparable=True)
    for m in metrics:
        ref = {q: float(v) for q, v in run.scores[m].items()}
        assert list(ours.per_query[m]) == list(ref), m  # same queries, same (id) order
        assert ours.per_query[m] == ref, m  # the same kernels: equal, not merely close
        assert abs(ours.mean[m] - run.mean_scores[m]) <= 1e-12
    assert ours.per_query["ndcg@10"]["Qnopos"] == 0.0
    assert ours.per_query["ndcg@10"]["Q005"] == 0.0 and ours.per_query["recall@100"]["Q007"] == 0.0  # missing, empty


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match="foo"):
        score({"q": [("d", 1.0)]}, {"q": {"d": 1}}, ("foo@10",))


def _fusion_case(seed: int, min_hits: int = 0):
    rng = random.Random(seed)
    docs = [f"D{i:03d}" for i in range(120)]
    bm25, dense = {}, {}
    for q in range(40):
        qid = f"Q{q:02d}"
        bm25[qid] = ranked([(d, round(rng.uniform(2, 30), 2)) for d in rng.sample(docs, rng.randint(min_hits, 60))],
                           50)
        dense[qid] = ranked([(d, round(rng.uniform(0.3, 0.9), 3)) for d in rng.sample(docs, rng.randint(1, 60))], 50)
    bm25["Q01"] = [("D001", 5.0)]  # single hit: min-max gives it 0
    if not min_hits:
        bm25["Q03"] = []
    dense["Q02"] = [("D002", 0.5), ("D003", 0.5)]  # all tied
    return bm25, dense


def _whole_run_fused(rankings, spec: FusionSpec, depth: int):
    """ranx.fuse on the whole runs at once, as a user of ranx would call it."""
    if spec.technique == "rrf":
        runs = [as_ranx(r, f"run{i}", scores="rank") for i, r in enumerate(rankings)]
        fused = fuse(runs, norm=None, method="rrf", params={"k": spec.rank_constant})
    else:
        norm = {"min_max": "min-max", "z_score": "zmuv"}[spec.normalization]
        runs = [as_ranx(r, f"run{i}", scores="engine") for i, r in enumerate(rankings)]
        fused = fuse(runs, norm=norm, method="wsum", params={"weights": spec.weights})
    out = fused.to_dict()
    return {q: ranked(out.get(q, {}).items(), depth) for q in rankings[0]}


@pytest.mark.parametrize("spec", [FusionSpec(), FusionSpec(dense_weight=0.3), FusionSpec(normalization="z_score"),
                                  FusionSpec(technique="rrf"), FusionSpec(technique="rrf", rank_constant=10)],
                         ids=lambda s: f"{s.technique}-{s.normalization}-{s.dense_weight}-{s.rank_constant}")
@pytest.mark.slow  # ranx's own fuse and evaluate
def test_fusion_is_ranx_fuse(spec):
    # ranx's z-score loses every query of a parallel chunk holding an empty list (see the test below)
    rankings = list(_fusion_case(1, min_hits=1 if spec.normalization == "z_score" else 0))
    ours = fuse_rankings(rankings, spec, depth=30)
    assert ours == _whole_run_fused(rankings, spec, depth=30)


def test_an_empty_list_changes_no_other_query():
    """ranx 0.3's z-score normalisation drops the results of a whole chunk of queries when one query's list is
    empty; here each query is fused over the runs that answered it: the fused result of the others stays what
    it was without the empty list, and the empty query gets the other run's part of the sum."""
    bm25, dense = _fusion_case(2, min_hits=1)
    with_empty = {**bm25, "Q08": []}
    for spec in (FusionSpec(normalization="z_score"), FusionSpec(), FusionSpec(technique="rrf")):
        alone = fuse_rankings([bm25, dense], spec, depth=30)
        fused = fuse_rankings([with_empty, dense], spec, depth=30)
        assert {q: v for q, v in fused.items() if q != "Q08"} == {q: v for q, v in alone.items() if q != "Q08"}
        assert [d for d, _ in fused["Q08"]] == [d for d, _ in dense["Q08"][:30]]  # the dense list alone
    fused = dict(fuse_rankings([with_empty, dense], FusionSpec(dense_weight=0.7), depth=100)["Q08"])
    assert max(fused.values()) == pytest.approx(0.7) and min(fused.values()) == 0.0  # 0.7 x min-max(dense)


def test_a_run_without_any_hit_fuses():
    bm25, dense = _fusion_case(3)
    nothing = {q: [] for q in bm25}  # e.g. a view with no text: ranx builds no Run from it
    fused = fuse_rankings([nothing, dense], FusionSpec(technique="rrf"), depth=10)
    assert {q: [d for d, _ in v] for q, v in fused.items()} == {q: [d for d, _ in v[:10]] for q, v in dense.items()}


def test_fusion_needs_the_same_queries():
    with pytest.raises(ValueError, match="different queries"):
        fuse_rankings([{"q1": [("a", 1.0)]}, {"q2": [("a", 1.0)]}], FusionSpec(technique="rrf"), 10)
