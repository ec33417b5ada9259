"""Pure logic of retrieval evaluation: metrics against hand computation, tie order, run files, fusion
arithmetic, Holm, bootstrap CIs, query and pipeline bodies. No node, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ranx import Qrels, Run, evaluate

from evalctl.evaluators.scoring.significance import bootstrap_ci, holm
from evalctl.evaluators.fusion.client_fusion import FusionUnsupported, fuse_rankings
from evalctl.evaluators.retrieval.methods import BodyContext
from evalctl.evaluators.retrieval.query_bodies import bm25_body, exact_body, hybrid_body, knn_body, truncate_terms
from evalctl.evaluators.scoring.runs import as_ranx, from_json, ranked, to_json, to_trec
from evalctl.evaluators.scoring.metrics import METRICS, score
from evalctl.evaluators.fusion.search_pipelines import pipeline_body, pipeline_name
from evalctl.evaluators.fusion.settings import FusionSpec

L2 = math.log2

# q1: positives d1, d3; d1 and d3 tie at 0.5 and the tie goes to the smaller id -> d2, d1, d3.
# q2: no hit at all. q3: its positive is at rank 11.
QRELS = {"q1": {"d1": 1, "d3": 1}, "q2": {"d9": 1}, "q3": {"x": 1}}
RANKING = {
    "q1": ranked([("d3", 0.5), ("d2", 0.9), ("d1", 0.5)]),
    "q2": [],
    "q3": ranked([(f"n{i:02d}", 1.0 - i / 100) for i in range(10)] + [("x", 0.5)]),
}


def test_metrics_match_hand_computation():
    s = score(RANKING, QRELS)
    q1 = {"ndcg@10": (1 / L2(3) + 1 / L2(4)) / (1 + 1 / L2(3)), "ndcg@100": (1 / L2(3) + 1 / L2(4)) / (1 + 1 / L2(3)),
          "recall@10": 1.0, "recall@100": 1.0, "map@100": (1 / 2 + 2 / 3) / 2, "mrr@10": 1 / 2}
    q3 = {"ndcg@10": 0.0, "ndcg@100": 1 / L2(12), "recall@10": 0.0, "recall@100": 1.0, "map@100": 1 / 11, "mrr@10": 0.0}
    for m in METRICS:
        assert s.per_query[m]["q1"] == pytest.approx(q1[m])
        assert s.per_query[m]["q2"] == 0.0  # an empty ranking is scored, not dropped
        assert s.per_query[m]["q3"] == pytest.approx(q3[m])
        assert s.mean[m] == pytest.approx((q1[m] + q3[m]) / 3)
    assert s.n_queries == 3


@pytest.mark.slow  # ranx's own evaluate, every metric compiled
def test_metrics_agree_with_ranx_and_ignore_extra_queries():
    # q1's tie makes ranx's own order hash-dependent: compare on a tie-free copy
    tie_free = {**RANKING, "q1": [("d2", 0.9), ("d1", 0.6), ("d3", 0.5)]}
    expected = evaluate(Qrels(QRELS), Run({q: dict(d) for q, d in tie_free.items()}), list(METRICS))
    got = score({**tie_free, "unjudged": [("d1", 1.0)]}, QRELS).mean
    assert got == pytest.approx(expected)


@pytest.mark.slow  # ranx's own evaluate
def test_tie_order_is_score_then_id():
    assert ranked([("b", 1.0), ("a", 1.0), ("c", 2.0)]) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]
    assert ranked([("b", 1.0), ("a", 1.0), ("c", 2.0)], depth=2) == [("c", 2.0), ("a", 1.0)]
    run = as_ranx({"q": [("b", 1.0), ("a", 1.0)]}, "r")  # rank scores pin b above a for ranx
    assert run.to_dict()["q"] == {"b": 2.0, "a": 1.0}


def test_run_files_keep_every_query_and_the_order():
    trec = to_trec(RANKING, "tag").splitlines()
    assert trec[:3] == ["q1 Q0 d2 1 0.900000 tag", "q1 Q0 d1 2 0.500000 tag", "q1 Q0 d3 3 0.500000 tag"]
    back = from_json(to_json(RANKING))
    assert back == RANKING and back["q2"] == []
    assert Run.from_dict({q: dict(d) for q, d in back.items() if d}).size == 2  # readable by ranx


@pytest.mark.slow  # ranx's own fuse
def test_min_max_and_rrf_fusion_by_hand():
    bm25 = {"q": [("a", 10.0), ("b", 6.0), ("c", 2.0)], "empty": []}
    dense = {"q": [("b", 0.9), ("d", 0.8), ("a", 0.5)], "empty": [("a", 0.7)]}
    fused = dict(fuse_rankings([bm25, dense], FusionSpec(dense_weight=0.7), depth=10)["q"])
    # min-max: bm25 a=1, b=.5, c=0; dense b=1, d=.75, a=0; then .3*bm25 + .7*dense
    assert fused == pytest.approx({"b": 0.85, "d": 0.525, "a": 0.3, "c": 0.0})
    rrf = fuse_rankings([bm25, dense], FusionSpec(technique="rrf"), depth=10)
    assert dict(rrf["q"]) == pytest.approx({"a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62})
    assert [d for d, _ in rrf["q"]] == ["b", "a", "d", "c"]
    assert set(rrf) == {"q", "empty"}  # a query empty in one run stays in the fused run
    assert fuse_rankings([bm25, dense], FusionSpec(dense_weight=0.7), depth=2)["q"] == [("b", 0.85), ("d", 0.525)]
    with pytest.raises(FusionUnsupported):
        fuse_rankings([bm25, dense], FusionSpec(normalization="l2"), depth=10)


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_bootstrap_ci_brackets_the_mean():
    x = np.array([0.0, 1.0, 0.5, 0.25, 0.75, 1.0, 0.0, 0.5])
    lo, hi = bootstrap_ci(x, 500, seed=1)
    assert lo < x.mean() < hi and 0.0 <= lo and hi <= 1.0
    assert bootstrap_ci(np.array([0.5, 0.5]), 100, 1) == (0.5, 0.5)


def test_query_bodies_exclude_and_cut():
    text, cut = truncate_terms("a b c d", 3)
    assert (text, cut) == ("a b c", True) and truncate_terms("a b", 3) == ("a b", False)
    b = bm25_body("text_TA", "wheel", 7, {"Q", "F"})
    assert b["size"] == 7 and b["query"]["bool"]["must_not"] == [{"ids": {"values": ["F", "Q"]}}]
    k = knn_body("vec_TA", np.array([1, 0], dtype=np.float32), 5, {"Q"})["query"]["knn"]["vec_TA"]
    assert k["k"] == 5 and k["filter"] == {"bool": {"must_not": [{"ids": {"values": ["Q"]}}]}}
    e = exact_body("vec_TA", [1.0, 0.0], "cosinesimil", 5)["query"]["script_score"]
    assert e["script"]["lang"] == "knn" and e["query"] == {"match_all": {}}
    h = hybrid_body(BodyContext("text_TA", "vec_TA", 9, {}, "p"), "wheel", [1.0, 0.0], {"Q"})
    assert h["search_pipeline"] == "p" and h["query"]["hybrid"]["pagination_depth"] == 9
    assert h["query"]["hybrid"]["queries"][1]["knn"]["vec_TA"]["k"] == 9


def test_pipeline_names_are_versioned_by_body():
    a, b = pipeline_body(FusionSpec(dense_weight=0.3)), pipeline_body(FusionSpec(dense_weight=0.7))
    assert pipeline_name(a) != pipeline_name(b) and pipeline_name(a) == pipeline_name(pipeline_body(FusionSpec(dense_weight=0.3)))
    proc = a["phase_results_processors"][0]["normalization-processor"]
    assert proc["combination"]["parameters"]["weights"] == [0.7, 0.3]  # [bm25, dense]
    rrf = pipeline_body(FusionSpec(technique="rrf", rank_constant=40))["phase_results_processors"][0]
    assert rrf["score-ranker-processor"]["combination"]["rank_constant"] == 40
    with pytest.raises(ValueError):
        FusionSpec(normalization="z_score", combination="harmonic_mean")
