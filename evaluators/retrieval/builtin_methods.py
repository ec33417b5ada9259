"""The built-in retrieval methods (registered in methods.METHODS)."""

from __future__ import annotations

from evalctl.evaluators.retrieval.methods import RetrievalMethod
from evalctl.evaluators.retrieval.query_bodies import bm25_body, exact_body, hybrid_body, knn_body
from evalctl.evaluators.fusion.search_pipelines import pipeline_body
from evalctl.indexers.index_layout import SPACE_TYPES


def _bm25(c, text, vector, exclude) -> dict:
    return bm25_body(c.text_field, text, c.k, exclude)


def _knn(c, text, vector, exclude) -> dict:
    return knn_body(c.vector_field, vector, c.k, exclude)


def _exact(c, text, vector, exclude) -> dict:
    return exact_body(c.vector_field, vector, SPACE_TYPES[c.manifest["similarity"]], c.k, exclude)


def _hybrid(c, text, vector, exclude) -> dict:
    return hybrid_body(c.text_field, text, c.vector_field, vector, c.k, exclude, c.pipeline)


BM25 = RetrievalMethod("bm25", _bm25, text=True, global_stats=True, title="BM25",
                      about="lexical match of the query text on the view's text (OpenSearch BM25)")
DENSE = RetrievalMethod("dense", _knn, vector=True, title="Dense",
                        about="approximate nearest neighbours (HNSW) of the query vector on the view's vectors")
EXACT = RetrievalMethod("exact", _exact, vector=True, title="Exact kNN",
                        about="brute-force nearest neighbours over every vector: what the approximate search loses")
# One hybrid query through a neural-search pipeline, or client-side fusion of the BM25 and dense runs.
# Not global_stats: neural-search 3.5 skips its normalisation under dfs_query_then_fetch on more than one
# shard and returns raw sub-query scores (neural-search #1490), so its BM25 part uses per-shard statistics.
HYBRID = RetrievalMethod("hybrid", _hybrid, text=True, vector=True, fused=True, technique="linear",
                         pipeline=pipeline_body, client=True, tunable=True, title="Hybrid",
                         about="weighted sum of the normalised BM25 and dense scores")
RRF = RetrievalMethod("rrf", _hybrid, text=True, vector=True, fused=True, technique="rrf", pipeline=pipeline_body,
                      client=True, title="RRF", about="reciprocal-rank fusion of the BM25 and dense rankings")
