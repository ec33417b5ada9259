"""The fusion of a chunked query's hits (evaluators/retrieval/query_chunks.py): each patent at its best score over
the query's chunks, its best passage the one of that chunk, the depth cut after fusing; one body a query is its hits
as they are. The search itself is tested against the real node in tests/study/test_passage_study.py."""

from __future__ import annotations

from evalctl.evaluators.retrieval.query_chunks import fuse_max


def test_each_patent_keeps_its_best_chunk_and_that_chunks_passage():
    owners = ["q1", "q1", "q2"]
    hits = [[("a", 0.9), ("b", 0.5)], [("b", 0.8), ("c", 0.7), ("a", 0.1)], [("a", 0.3)]]
    passages = [{"a": [0, 10], "b": [5, 15]}, {"b": [20, 30], "c": [0, 8], "a": [40, 50]}, {"a": [1, 2]}]
    ranking, best = fuse_max(["q1", "q2", "q3"], owners, hits, passages, k=2)
    assert ranking == {"q1": [("a", 0.9), ("b", 0.8)], "q2": [("a", 0.3)], "q3": []}  # c cut at depth 2
    assert best == {"q1": {"a": [0, 10], "b": [20, 30]}, "q2": {"a": [1, 2]}}


def test_a_document_run_keeps_its_order_and_ties_by_id():
    ranking, best = fuse_max(["q"], ["q"], [[("b", 1.0), ("a", 1.0), ("c", 0.5)]], [{}], k=10)
    assert ranking == {"q": [("a", 1.0), ("b", 1.0), ("c", 0.5)]} and best == {}
