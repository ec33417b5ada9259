"""evalctl's metrics and client-side fusion (ranking_metrics.py) give ranx's numbers, to 1e-9, on rankings
with graded judgments, ties, empty and missing results, queries without a relevant document, single-hit
lists; ranx stays the reference here."""

from __future__ import annotations

import random

import pytest
from ranx import Qrels, evaluate, fuse

from evalctl.evaluators import ranking_metrics
from evalctl.evaluators.fusion import fuse_rankings
from evalctl.evaluators.runs import as_ranx, ranked
from evalctl.evaluators.scoring import METRICS, score
from evalctl.evaluators.search_pipelines import FusionSpec

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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_metrics_equal_ranx(seed):
    qrels, ranking = _case(seed)
    metrics = (*METRICS, *EXTRA)
    ours = score(ranking, qrels, metrics)
    run = as_ranx({q: ranking.get(q, []) for q in qrels}, "run")
    evaluate(Qrels(qrels), run, list(metrics), make_comparable=True)
    for m in metrics:
        ref = {q: float(v) for q, v in run.scores[m].items()}
        assert list(ours.per_query[m]) == list(ref), m  # same queries, same (id) order
        worst = max(abs(ours.per_query[m][q] - ref[q]) for q in ref)
        assert worst <= 1e-9, (m, worst)
        assert abs(ours.mean[m] - sum(ref.values()) / len(ref)) <= 1e-9
    assert ours.per_query["ndcg@10"]["Qnopos"] == 0.0


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match="ndcg@k"):
        ranking_metrics.evaluate({"q": {"d": 1}}, {"q": ["d"]}, ["precision@10"])


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
    dense["Q02"] = [("D002", 0.5), ("D003", 0.5)]  # all tied
    return bm25, dense


def _ranx_fused(rankings, spec: FusionSpec, depth: int):
    """The previous implementation (ranx.fuse), kept here as the reference."""
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
@pytest.mark.parametrize("seed", [1, 2])
def test_fusion_equals_ranx(spec, seed):
    # ranx's z-score loses every query of a parallel chunk holding an empty list (see the test below)
    rankings = list(_fusion_case(seed, min_hits=1 if spec.normalization == "z_score" else 0))
    ours = fuse_rankings(rankings, spec, depth=30)
    ref = _ranx_fused(rankings, spec, depth=30)
    assert list(ours) == list(ref)
    for q in ref:
        assert [d for d, _ in ours[q]] == [d for d, _ in ref[q]], q
        assert all(abs(a - b) <= 1e-9 for (_, a), (_, b) in zip(ours[q], ref[q])), q


def test_an_empty_list_changes_no_other_query():
    """ranx 0.3's z-score normalisation drops the results of a whole chunk of queries when one query's list is
    empty; here each query is fused on its own: the fused result of the others stays what it was without it."""
    bm25, dense = _fusion_case(2, min_hits=1)
    with_empty = {**bm25, "Q08": []}
    for spec in (FusionSpec(normalization="z_score"), FusionSpec(), FusionSpec(technique="rrf")):
        alone = fuse_rankings([bm25, dense], spec, depth=30)
        fused = fuse_rankings([with_empty, dense], spec, depth=30)
        assert {q: v for q, v in fused.items() if q != "Q08"} == {q: v for q, v in alone.items() if q != "Q08"}
        assert [d for d, _ in fused["Q08"]] == [d for d, _ in dense["Q08"][:30]]  # the dense list alone


def test_fusion_needs_the_same_queries():
    with pytest.raises(ValueError, match="different queries"):
        ranking_metrics.rrf([{"q1": ["a"]}, {"q2": ["a"]}], 60)
