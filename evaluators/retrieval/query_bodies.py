"""Query bodies for native retrieval: BM25 `match`, approximate `knn`, exact `knn_score`, `hybrid`.

Every body excludes the query patent and its family with a `must_not ids` clause (inside the knn
`filter` for k-NN, the hybrid `filter` for hybrid), so the engine fills `size` with other documents
and no over-fetching is needed. `_source` is off: a run needs ids and scores only.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from evalctl.evaluators.retrieval.methods import BodyContext

_TERM = re.compile(r"\S+")


def truncate_terms(text: str, max_terms: int | None) -> tuple[str, bool]:
    """The first `max_terms` whitespace terms of `text` (None: no limit), and whether it was cut."""
    if max_terms is None:
        return text, False
    terms = _TERM.findall(text)
    if len(terms) <= max_terms:
        return text, False
    return " ".join(terms[:max_terms]), True


def _not_ids(exclude: Collection[str]) -> dict:
    return {"bool": {"must_not": [{"ids": {"values": sorted(exclude)}}]}}


def _vector(vector: Sequence[float]) -> np.ndarray:
    # float32, serialised in its shortest exact form (orjson): about 40% fewer bytes for the node to
    # parse than the same values written as doubles; a byte index's int8 query (its integers) as it is
    if isinstance(vector, np.ndarray) and vector.dtype == np.int8:
        return vector
    return np.asarray(vector, dtype=np.float32)


def bm25_body(field: str, text: str, size: int, exclude: Collection[str] = ()) -> dict:
    match = {"match": {field: {"query": text}}}
    query = {"bool": {"must": [match], "must_not": [{"ids": {"values": sorted(exclude)}}]}} if exclude else match
    return {"size": size, "_source": False, "track_total_hits": False, "query": query}


def knn_clause(field: str, vector: Sequence[float], k: int, exclude: Collection[str] = ()) -> dict:
    # k is per shard (and per segment for faiss): k = size keeps the top `size` over a 1-shard index.
    clause: dict = {"vector": _vector(vector), "k": k}
    if exclude:
        clause["filter"] = _not_ids(exclude)
    return {"knn": {field: clause}}


def knn_body(field: str, vector: Sequence[float], size: int, exclude: Collection[str] = ()) -> dict:
    return {"size": size, "_source": False, "query": knn_clause(field, vector, size, exclude)}


def maxp_clause(path: str, vector: Sequence[float], k: int, exclude: Collection[str] = (),
                score_mode: str = "max") -> dict:
    """MaxP: k-NN over a view's passages (the nested field `path`) matching `k` distinct patents, each scored by its
    best passage; the exclusion filters the patents (top-level ids), so the engine still finds `k`. `score_mode`
    sum or avg: every passage of those k patents is scored (the k-NN plugin's `expand_nested_docs`) and a patent's
    score is their sum or mean, so SumP and AvgP re-rank the MaxP candidates; they find no other patent."""
    clause = knn_clause(f"{path}.vec", vector, k, exclude)
    if score_mode != "max":
        clause["knn"][f"{path}.vec"]["expand_nested_docs"] = True
    return {"nested": {"path": path, "score_mode": score_mode, "query": clause}}


def best_passage(nested: dict) -> dict:
    """`nested` (a passage clause) also naming each hit's best passage (the top inner hit, by its own score, under
    every score_mode and inside a hybrid query): its character offsets, read from doc values (retrieve.search_all
    reads them back as the run's `passages`)."""
    path = nested["nested"]["path"]
    inner = {"size": 1, "_source": False, "docvalue_fields": [f"{path}.start", f"{path}.end"]}
    return {"nested": {**nested["nested"], "inner_hits": inner}}


def maxp_body(path: str, vector: Sequence[float], size: int, exclude: Collection[str] = (),
              score_mode: str = "max") -> dict:
    clause = maxp_clause(path, vector, size, exclude, score_mode)
    return {"size": size, "_source": False, "query": best_passage(clause)}


def bm25_maxp_body(path: str, text: str, size: int, exclude: Collection[str] = ()) -> dict:
    """BM25 on a view's passages (their own text field), each patent scored by its best passage."""
    nested = best_passage({"nested": {"path": path, "score_mode": "max",
                                      "query": {"match": {f"{path}.text": {"query": text}}}}})
    query = {"bool": {"must": [nested], **_not_ids(exclude)["bool"]}} if exclude else nested
    return {"size": size, "_source": False, "track_total_hits": False, "query": query}


def exact_maxp_body(path: str, vector: Sequence[float], space_type: str, size: int,
                    exclude: Collection[str] = ()) -> dict:
    """MaxP by brute force: every passage scored by the `knn_score` script, each patent by its best passage."""
    script = {"source": "knn_score", "lang": "knn",
              "params": {"field": f"{path}.vec", "query_value": _vector(vector), "space_type": space_type}}
    nested = best_passage({"nested": {"path": path, "score_mode": "max",
                                      "query": {"script_score": {"query": {"match_all": {}}, "script": script}}}})
    query = {"bool": {"must": [nested], **_not_ids(exclude)["bool"]}} if exclude else nested
    return {"size": size, "_source": False, "query": query}


def exact_body(field: str, vector: Sequence[float], space_type: str, size: int, exclude: Collection[str] = ()) -> dict:
    """Brute force over every document: the k-NN plugin's `knn_score` script (pure Java, no graph)."""
    base = _not_ids(exclude) if exclude else {"match_all": {}}
    script = {"source": "knn_score", "lang": "knn",
              "params": {"field": field, "query_value": _vector(vector), "space_type": space_type}}
    return {"size": size, "_source": False, "query": {"script_score": {"query": base, "script": script}}}


def hybrid_body(c: BodyContext, text: str, vector: Sequence[float], exclude: Collection[str] = ()) -> dict:
    """BM25 on `c.text_field` and knn on `c.vector_field`, each collecting `c.k` candidates (pagination_depth,
    k) so the fused list sees the same per-clause depth as client-side fusion of two runs of depth `c.k`.
    `c.pipeline`: a stored pipeline's name, or a body inlined as a temporary pipeline (weight sweeps);
    hybrid without a pipeline would return raw "delimiter" scores (neural-search #1011). A BodyBuilder
    (retrieval.methods), as the hybrid methods register it."""
    return hybrid_of(c.text_field, text, knn_clause(c.vector_field, vector, c.k), c.k, exclude, c.pipeline)


def hybrid_of(text_field: str, text: str, vector_clause: dict, size: int, exclude: Collection[str] = (),
              pipeline: str | dict | None = None) -> dict:
    """A hybrid query of BM25 on `text_field` and `vector_clause` (a view's k-NN, or its passages' MaxP)."""
    hybrid: dict = {"pagination_depth": size, "queries": [{"match": {text_field: {"query": text}}}, vector_clause]}
    if exclude:
        hybrid["filter"] = _not_ids(exclude)
    body = {"size": size, "_source": False, "query": {"hybrid": hybrid}}
    if pipeline is not None:
        body["search_pipeline"] = pipeline
    return body
