"""ranx's metrics and fusion, re-done in plain Python for the sizes evalctl scores (thousands of queries,
depth <= 10,000): ranx compiles its numba kernels and typed containers afresh in every process (seconds per
first call), while these loops take milliseconds. Same definitions and the same floating-point operations
in the same order as ranx 0.3 (tests/test_ranking_metrics.py checks them against ranx itself):

- a document is relevant when its judgment is >= 1; the ideal ranking is the judgments by value, best first
- ndcg@k: sum(rel_i / log2(i + 2)) over the top k, over the same sum for the ideal ranking (Järvelin)
- recall@k: relevant in the top k / relevant; map@k: sum of precision@i at relevant ranks i <= k / relevant
- mrr@k: 1 / rank of the first relevant document in the top k
- a query without a relevant document scores 0 on every metric
- fusion per query: min-max ((s - min) / max(max - min, 1e-9)) or z-score ((s - mean) / max(std, 1e-9))
  normalisation, then a weighted sum over the runs a document appears in; RRF: sum of 1 / (k + rank)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Judgments = Mapping[str, int]  # doc id -> relevance

METRIC_NAMES = ("ndcg", "recall", "map", "mrr")


def _parse(metric: str) -> tuple[str, int]:
    name, _, k = metric.partition("@")
    if name not in METRIC_NAMES or not k.isdigit() or int(k) < 1:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(n + '@k' for n in METRIC_NAMES)}")
    return name, int(k)


def _dcg(gains: Sequence[float], k: int) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains[:k]))


def query_metric(metric: str, docs: Sequence[str], judged: Judgments) -> float:
    """One metric (e.g. "ndcg@10") of one query's ranked doc ids."""
    name, k = _parse(metric)
    relevant = {d: r for d, r in judged.items() if r >= 1}
    if not relevant:
        return 0.0
    top = docs[:k]
    if name == "ndcg":
        ideal = _dcg(sorted(relevant.values(), reverse=True), k)
        return _dcg([relevant.get(d, 0) for d in top], k) / (ideal or 1.0)
    if name == "recall":
        return sum(1.0 for d in top if d in relevant) / len(relevant)
    if name == "mrr":
        return next((1 / (i + 1) for i, d in enumerate(top) if d in relevant), 0.0)
    hits, precision_sum = 0.0, 0.0  # map
    for i, d in enumerate(top):
        if d in relevant:
            hits += 1.0
            precision_sum += hits / (i + 1)
    return precision_sum / len(relevant)


def evaluate(qrels: Mapping[str, Judgments], ranked_ids: Mapping[str, Sequence[str]], metrics: Sequence[str]
             ) -> dict[str, dict[str, float]]:
    """metric -> {query: value} for every query of `qrels` (in query id order, as ranx keeps them); a
    query missing from `ranked_ids` has an empty ranking."""
    for m in metrics:
        _parse(m)
    queries = sorted(qrels)
    return {m: {q: query_metric(m, ranked_ids.get(q, ()), qrels[q]) for q in queries} for m in metrics}


# --------------------------------------------------------------------------- fusion

def _mean(xs: list[float]) -> float:
    total = 0.0
    for x in xs:  # sequential, as numba sums
        total += x
    return total / len(xs)


def _normalised(scores: Mapping[str, float], norm: str) -> dict[str, float]:
    values = list(scores.values())
    if norm == "min-max":
        low, high = (min(values), max(values)) if values else (0, 0)
        denominator = max(high - low, 1e-9)
        return {d: (s - low) / denominator for d, s in scores.items()}
    if norm == "zmuv":
        if not values:
            return {}
        mean = _mean(values)
        std = math.sqrt(_mean([(x - mean) * (x - mean) for x in values]))
        denominator = max(std, 1e-9)
        return {d: (s - mean) / denominator for d, s in scores.items()}
    raise ValueError(f"unknown normalisation {norm!r}; min-max or zmuv")


def _combined(per_run: list[dict[str, float]], weights: Sequence[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for run in per_run:
        for d in run:
            if d not in out:
                total = 0
                for w, other in zip(weights, per_run):
                    total += w * other.get(d, 0.0)
                out[d] = total
    return out


def weighted_sum(runs: Sequence[Mapping[str, Mapping[str, float]]], weights: Sequence[float], norm: str
                 ) -> dict[str, dict[str, float]]:
    """Per query of the first run: normalise each run's scores, then sum them weighted."""
    _same_queries(runs)
    return {q: _combined([_normalised(r[q], norm) for r in runs], weights) for q in runs[0]}


def rrf(runs: Sequence[Mapping[str, Sequence[str]]], k: int) -> dict[str, dict[str, float]]:
    """Per query of the first run: reciprocal rank fusion of the runs' ranked doc ids."""
    _same_queries(runs)
    return {q: _combined([{d: 1 / (k + i + 1) for i, d in enumerate(r[q])} for r in runs], [1] * len(runs))
            for q in runs[0]}


def _same_queries(runs: Sequence[Mapping]) -> None:
    first = set(runs[0])
    for i, r in enumerate(runs[1:], 1):
        if set(r) != first:
            raise ValueError(f"runs 0 and {i} hold different queries: fusion needs the same query set")
