"""Ties made explicit (evaluators/scoring/tie_aware.py, evaluators/referee/rank_eval.py): on hand-made runs with
known ties, the tie-aware value of nDCG, recall and MRR is the mean of the ordinary value over every order of the
tied documents (each order scored by ranx); and ranx, trec_eval and the node's `_rank_eval` give the same values
once evalctl's tie rule (score descending, then id ascending) is applied to what each is given, where trec_eval
on the engine's scores (its own rule, id descending) does not."""

from __future__ import annotations

import importlib.util
import uuid
from itertools import permutations, product

import pytest

from evalctl.evaluators.scoring.metrics import score
from evalctl.evaluators.scoring.runs import ranked
from evalctl.evaluators.scoring.tie_aware import groups, tie_scores

METRICS = ("ndcg@3", "recall@3", "mrr@3", "ndcg@10", "mrr@10")
RUN = {  # scores as an engine gives them: ties across the cut-off (3) and at the run's end
    "q1": [("a", 0.9), ("b", 0.8), ("c", 0.8), ("d", 0.8), ("e", 0.5), ("f", 0.5)],
    "q2": [("w", 0.7), ("x", 0.7), ("y", 0.7), ("v", 0.7), ("u", 0.1)],
    "q3": [("m", 1.0), ("n", 1.0)],
}
QRELS = {"q1": {"b": 1, "f": 1, "z": 1}, "q2": {"y": 2, "v": 1}, "q3": {"o": 1}}


def _every_order(docs: list[tuple[str, float]]):
    """Every order of `docs` that keeps the score order: the tied documents permuted within their group."""
    tied = [docs[g.start:g.start + g.size] for g in groups(docs, {})]
    for choice in product(*(permutations(group) for group in tied)):
        yield [pair for group in choice for pair in group]


def test_the_tie_aware_value_is_the_mean_over_every_order_of_the_ties():
    got = tie_scores({q: ranked(docs) for q, docs in RUN.items()}, QRELS, METRICS, depth=6)
    for q, docs in RUN.items():
        orders = list(_every_order(ranked(docs)))
        assert len(orders) == {"q1": 12, "q2": 24, "q3": 2}[q]
        for m in METRICS:
            mean = sum(score({q: order}, {q: QRELS[q]}, (m,)).mean[m] for order in orders) / len(orders)
            assert got.per_query[m][q] == pytest.approx(mean, abs=1e-12), (q, m)
    # the ordinary value (our rule's one order) is one of those orders, and here not their mean
    ordinary = score({q: ranked(docs) for q, docs in RUN.items()}, QRELS, ("ndcg@3",)).per_query["ndcg@3"]
    assert ordinary["q1"] != pytest.approx(got.per_query["ndcg@3"]["q1"])
    # every tie has a document within the first 10 (b-c-d, e-f; w-x-y-v; m-n); q1's e-f tie reaches the run's end
    assert (got.tied_queries, got.tied_documents, got.cut_ties) == (3, 3 + 2 + 4 + 2, 1)
    deep = tie_scores({"q1": ranked(RUN["q1"])}, QRELS, ("ndcg@3",), depth=6, within=4)
    assert (deep.tied_queries, deep.tied_documents) == (1, 3)  # e-f starts at the 5th: it cannot move a metric @4


@pytest.mark.opensearch
@pytest.mark.skipif(importlib.util.find_spec("pytrec_eval") is None, reason="pytrec-eval-terrier is not installed")
def test_ranx_trec_eval_and_rank_eval_agree_once_the_tie_rule_is_applied(os_client):
    from evalctl.evaluators.referee.peers import trec_eval_scores, trec_eval_tie_order
    from evalctl.evaluators.referee.rank_eval import rank_eval_scores

    binary = {"q1": QRELS["q1"], "q2": {"y": 1, "v": 1}, "q3": QRELS["q3"]}  # `_rank_eval` gains 2^rel - 1
    metrics = ("ndcg@3", "recall@3", "mrr@3")
    index = f"evalctl-test-ties-{uuid.uuid4().hex[:8]}"
    os_client.indices.create(index=index, body={"mappings": {"properties": {
        "doc_id": {"type": "keyword"}, "s": {"type": "float"}}}})
    try:
        for docs in RUN.values():
            for d, s in docs:
                os_client.index(index=index, id=d, body={"doc_id": d, "s": s})
        os_client.indices.refresh(index=index)
        # each query's documents, scored by their `s`: the engine returns the ties the run has
        bodies = {q: {"query": {"function_score": {"query": {"ids": {"values": [d for d, _ in docs]}},
                                                   "field_value_factor": {"field": "s"}, "boost_mode": "replace"}}}
                  for q, docs in RUN.items()}
        hits = {q: [(h["_id"], h["_score"]) for h in os_client.search(index=index, body={**b, "size": 10})
                    ["hits"]["hits"]] for q, b in bodies.items()}
        run = {q: ranked(h) for q, h in hits.items()}  # the rule applied to the run ranx and trec_eval are given
        ours = score(run, binary, metrics).per_query
        trec = trec_eval_scores(run, binary, metrics)
        node = rank_eval_scores(os_client, index, bodies, binary, metrics)
        for m in metrics:
            for q in binary:
                assert trec[m][q] == pytest.approx(ours[m][q], abs=1e-12) == node[m][q], (m, q)
        # trec_eval on the engine's scores orders ties its own way (id descending): another value
        assert trec_eval_tie_order(run, binary, ("ndcg@3",))["ndcg@3"] != pytest.approx(
            sum(ours["ndcg@3"].values()) / len(binary))
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
