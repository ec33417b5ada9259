"""The built-in retrieval methods (registered in methods.METHODS)."""

from __future__ import annotations

from evalctl.evaluators.retrieval.methods import RetrievalMethod
from evalctl.evaluators.retrieval.query_bodies import (best_passage, bm25_body, bm25_maxp_body, exact_body, exact_maxp_body,
                                                      hybrid_body, hybrid_of, knn_body, maxp_body, maxp_clause)
from evalctl.evaluators.fusion.search_pipelines import pipeline_body
from evalctl.indexers.index_layout import SPACE_TYPES


def _bm25(c, text, vector, exclude) -> dict:
    return bm25_body(c.text_field, text, c.k, exclude)


def _knn(c, text, vector, exclude) -> dict:
    return knn_body(c.vector_field, vector, c.k, exclude)


def _maxp(c, text, vector, exclude) -> dict:
    return maxp_body(c.passage_path, vector, c.k, exclude)


def _sump(c, text, vector, exclude) -> dict:
    return maxp_body(c.passage_path, vector, c.k, exclude, "sum")


def _avgp(c, text, vector, exclude) -> dict:
    return maxp_body(c.passage_path, vector, c.k, exclude, "avg")


def _bm25_maxp(c, text, vector, exclude) -> dict:
    return bm25_maxp_body(c.passage_path, text, c.k, exclude)


def _exact_maxp(c, text, vector, exclude) -> dict:
    return exact_maxp_body(c.passage_path, vector, SPACE_TYPES[c.manifest["similarity"]], c.k, exclude)


def _hybrid_maxp(c, text, vector, exclude) -> dict:
    return hybrid_of(c.text_field, text, best_passage(maxp_clause(c.passage_path, vector, c.k)), c.k, exclude,
                     c.pipeline)


def _exact(c, text, vector, exclude) -> dict:
    return exact_body(c.vector_field, vector, SPACE_TYPES[c.manifest["similarity"]], c.k, exclude)


BM25 = RetrievalMethod("bm25", _bm25, text=True, global_stats=True, title="BM25",
                      about="lexical match of the query text on the view's text (OpenSearch BM25)")
DENSE = RetrievalMethod("dense", _knn, vector=True, title="Dense",
                        about="approximate nearest neighbours (HNSW) of the query vector on the view's vectors")
EXACT = RetrievalMethod("exact", _exact, vector=True, title="Exact kNN",
                        about="brute-force nearest neighbours over every vector: what the approximate search loses")
# One hybrid query through a neural-search pipeline, or client-side fusion of the BM25 and dense runs.
# Not global_stats: neural-search 3.5 skips its normalisation under dfs_query_then_fetch on more than one
# shard and returns raw sub-query scores (neural-search #1490), so its BM25 part uses per-shard statistics.
HYBRID = RetrievalMethod("hybrid", hybrid_body, text=True, vector=True, fused=True, technique="linear",
                         pipeline=pipeline_body, client=("bm25", "dense"), tunable=True, title="Hybrid",
                         about="weighted sum of the normalised BM25 and dense scores")
RRF = RetrievalMethod("rrf", hybrid_body, text=True, vector=True, fused=True, technique="rrf", pipeline=pipeline_body,
                      client=("bm25", "dense"), title="RRF", about="reciprocal-rank fusion of the BM25 and dense rankings")
DENSE_MAXP = RetrievalMethod("dense-maxp", _maxp, vector=True, passages_of="dense", query_chunks=True, title="Dense MaxP",
                             about="approximate nearest neighbours of the query vector among the view's passage "
                                   "vectors; each patent scored by its best passage (k distinct patents)")
EXACT_MAXP = RetrievalMethod("exact-maxp", _exact_maxp, vector=True, passages_of="exact", query_chunks=True, title="Exact MaxP",
                             about="every passage scored by brute force, each patent by its best: what dense-maxp's "
                                   "approximate search loses")
DENSE_SUMP = RetrievalMethod("dense-sump", _sump, vector=True, passages_of="dense", title="Dense SumP",
                             about="the patents dense-maxp finds, re-ranked by the sum of every passage's score")
DENSE_AVGP = RetrievalMethod("dense-avgp", _avgp, vector=True, passages_of="dense", title="Dense AvgP",
                             about="the patents dense-maxp finds, re-ranked by the mean of every passage's score")
BM25_MAXP = RetrievalMethod("bm25-maxp", _bm25_maxp, text=True, global_stats=True, passages_of="bm25",
                            title="BM25 MaxP", about="BM25 on the view's passages (term statistics over passages); "
                                                     "each patent scored by its best passage")
# BM25 on the view's text fused with the passages' MaxP clause (the document's own vector is not searched)
HYBRID_MAXP = RetrievalMethod("hybrid-maxp", _hybrid_maxp, text=True, vector=True, fused=True, technique="linear",
                              pipeline=pipeline_body, passages_of="hybrid", client=("bm25", "dense-maxp"),
                              title="Hybrid MaxP",
                              about="weighted sum of the normalised BM25 and passage-MaxP scores")
RRF_MAXP = RetrievalMethod("rrf-maxp", _hybrid_maxp, text=True, vector=True, fused=True, technique="rrf",
                           pipeline=pipeline_body, passages_of="rrf", client=("bm25", "dense-maxp"),
                           title="RRF MaxP",
                           about="reciprocal-rank fusion of the BM25 and passage-MaxP rankings")
