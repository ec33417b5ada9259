"""Tie-aware metrics: the expected value of a metric over every order of the documents a run scores alike.

A run's order inside a tie is a convention (evalctl's: score descending, then document id ascending; runs.ranked),
and another scorer picks another (trec_eval: id descending), so part of a score can rest on it. McSherry and
Najork (ECIR 2008) give each metric's mean over all orders of the tied documents in one pass: every position a tie
group covers holds, on average, the group's mean gain. That makes nDCG@k and recall@k exact sums; the reciprocal
rank of the first relevant document needs the law of the first success drawn without replacement.

Definitions are the ordinary ones' (metrics.py, ranx's): nDCG with the qrels' gains as given and the discount
1 / log2(rank + 1), the ideal DCG from the qrels; recall over the query's relevant documents; MRR@k the reciprocal
rank of the first relevant document within k. A tie group that reaches the run's last position may go on beyond
it, past what the run returns: it is scored as the documents returned (`cut_ties` counts such queries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby
from math import comb

from evalctl.evaluators.scoring.metrics import metric_parts
from evalctl.evaluators.scoring.runs import Ranking

TIE_AWARE = ("ndcg", "recall", "mrr")  # the metrics with a tie-aware form here


@dataclass(frozen=True)
class Group:
    start: int  # 0-based position of its first document
    gains: tuple[float, ...]  # each document's relevance (0: not judged relevant)

    @property
    def size(self) -> int:
        return len(self.gains)

    @property
    def mean_gain(self) -> float:
        return sum(self.gains) / self.size

    @property
    def relevant(self) -> int:
        return sum(g > 0 for g in self.gains)

    def within(self, k: int) -> int:
        """How many of its positions lie within the first k."""
        return max(0, min(self.start + self.size, k) - self.start)


def groups(docs: list[tuple[str, float]], judged: dict[str, int]) -> list[Group]:
    """The run's documents as runs of equal score, in order (the ranking is sorted by score already)."""
    out, start = [], 0
    for _, members in groupby(docs, key=lambda pair: pair[1]):
        gains = tuple(float(judged.get(d, 0)) for d, _ in members)
        out.append(Group(start, gains))
        start += len(gains)
    return out


def _discount(position: int) -> float:
    return 1.0 / math.log2(position + 2)  # 0-based position: rank + 1 = position + 2


def ndcg(gs: list[Group], judged: dict[str, int], k: int) -> float:
    ideal = sum(g * _discount(i) for i, g in enumerate(sorted((v for v in judged.values() if v > 0),
                                                             reverse=True)[:k]))
    if not ideal:
        return 0.0
    dcg = sum(g.mean_gain * sum(_discount(p) for p in range(g.start, g.start + g.within(k))) for g in gs)
    return dcg / ideal


def recall(gs: list[Group], judged: dict[str, int], k: int) -> float:
    relevant = sum(v > 0 for v in judged.values())
    return sum(g.relevant / g.size * g.within(k) for g in gs) / relevant if relevant else 0.0


def mrr(gs: list[Group], k: int) -> float:
    """1 / rank of the first relevant document within k, its mean over the orders of the first group holding one:
    in a group of n with r relevant, the first relevant is at its i-th place with probability C(n-i, r-1) / C(n, r)."""
    first = next((g for g in gs if g.relevant), None)
    if first is None:
        return 0.0
    n, r = first.size, first.relevant
    return sum(comb(n - i, r - 1) / comb(n, r) / (first.start + i)
               for i in range(1, n - r + 2) if first.start + i <= k)


def _value(metric: str, gs: list[Group], judged: dict[str, int]) -> float:
    name, k = metric_parts(metric)
    if name == "ndcg":
        return ndcg(gs, judged, k)
    if name == "recall":
        return recall(gs, judged, k)
    if name == "mrr":
        return mrr(gs, k)
    raise ValueError(f"{metric}: no tie-aware form here (one of {', '.join(TIE_AWARE)})")


def query_value(metric: str, docs: list[tuple[str, float]], judged: dict[str, int]) -> float:
    """The tie-aware value of one query's `docs` (best first, equal scores adjacent) for `metric` (measure@k)."""
    return _value(metric, groups(docs, judged), judged)


@dataclass(frozen=True)
class TieScores:
    per_query: dict[str, dict[str, float]]  # metric -> {query: tie-aware value}
    tied_queries: int  # queries holding a tie with a document within the first `within` (it can move a metric @within)
    tied_documents: int  # the documents of those ties
    cut_ties: int  # queries whose last tie group reaches the run's depth (it may continue beyond what was returned)

    def mean(self, metric: str) -> float:
        values = self.per_query[metric]
        return sum(values.values()) / len(values) if values else float("nan")


def tie_scores(ranking: Ranking, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...], depth: int,
               within: int = 10) -> TieScores:
    """Tie-aware values of `metrics` for every query of `qrels` (a query the run does not answer scores 0), with
    how many queries hold a tie that can change a metric @`within` (one with a document within the first
    `within`) and how many documents those ties hold; `depth`: the run's depth (for cut_ties)."""
    per_query: dict[str, dict[str, float]] = {m: {} for m in metrics}
    tied_q = tied_d = cut = 0
    for q in sorted(qrels):
        docs = ranking.get(q, [])
        gs = groups(docs, qrels[q])
        for m in metrics:
            per_query[m][q] = _value(m, gs, qrels[q])
        near = [g for g in gs if g.size > 1 and g.start < within]
        tied_q += bool(near)
        tied_d += sum(g.size for g in near)
        cut += bool(gs) and len(docs) >= depth and gs[-1].size > 1
    return TieScores(per_query, tied_q, tied_d, cut)
