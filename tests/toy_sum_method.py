"""A toy fusion method (docs/extending.md, tests/project/test_extending.py): BM25 `match` and `knn` as two `should`
clauses of one bool query, so the engine adds their raw scores; no pipeline, no plugin, no client side."""

from __future__ import annotations

from evalctl.evaluators.retrieval.methods import RetrievalMethod
from evalctl.evaluators.retrieval.query_bodies import knn_clause


def _body(c, text, vector, exclude) -> dict:
    query: dict = {"bool": {"should": [{"match": {c.text_field: {"query": text}}},
                                       knn_clause(c.vector_field, vector, c.k, exclude)]}}
    if exclude:
        query["bool"]["must_not"] = [{"ids": {"values": sorted(exclude)}}]
    return {"size": c.k, "_source": False, "query": query}


METHOD = RetrievalMethod("sum", _body, text=True, vector=True, fused=True, title="Sum",
                         about="BM25 and kNN clauses in one bool query, their scores summed")
