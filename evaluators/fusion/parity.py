"""Native fusion (neural-search pipelines) against client-side fusion (ranx) of the same BM25 and dense runs:
how many queries get the same top 10, the largest nDCG@10 difference, and why each other query differs.

A differing query is explained when
- `floor`: neural-search's arithmetic (neural_reference: the 0.001 floor for a list's lowest hit, 1.0 for a
  list whose scores are all equal), applied to the stored component runs, reproduces the native top 10;
  ranx normalises those hits to 0 instead;
- `ties`: the component runs hold equal scores whose order the engine and evalctl break differently
  (internal doc order vs document id), or the top 10 differ only among equal fused scores.
Anything else is `unexplained`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalctl.evaluators.fusion.neural_reference import normalized_fusion, rrf
from evalctl.evaluators.scoring.runs import StoredRun, ranked
from evalctl.evaluators.fusion.settings import FusionSpec

TOP = 10
EPS = 1e-5  # the plugin computes in float32


@dataclass
class Parity:
    n_queries: int = 0
    identical_top10: int = 0
    max_ndcg10_diff: float = 0.0
    mean_ndcg10: dict[str, float] = field(default_factory=dict)
    causes: dict[str, list[str]] = field(default_factory=lambda: {"floor": [], "ties": [], "unexplained": []})

    @property
    def identical_share(self) -> float:
        return self.identical_top10 / self.n_queries if self.n_queries else float("nan")


def _top(hits: list[tuple[str, float]]) -> list[str]:
    return [d for d, _ in hits[:TOP]]


def _same_up_to_ties(a: list[tuple[str, float]], b: list[str]) -> bool:
    """True when list `a` (with scores) and ids `b` differ only in the order of equal scores of `a`."""
    if _top(a) == b:
        return True
    if set(_top(a)) != set(b) and not (len(a) > TOP and abs(a[TOP - 1][1] - a[TOP][1]) <= EPS):
        return False
    scores = dict(a)
    return all(abs(scores.get(x, -1) - scores.get(y, -1)) <= EPS for x, y in zip(_top(a), b) if x != y)


def _has_ties(hits: list[tuple[str, float]]) -> bool:
    scores = [s for _, s in hits]
    return any(abs(x - y) <= EPS for x, y in zip(scores, scores[1:]))


def _reference(components: list[list[tuple[str, float]]], fusion: FusionSpec) -> list[tuple[str, float]]:
    if fusion.technique == "rrf":
        fused = rrf(components, fusion.weights, fusion.rank_constant)
    else:
        fused = normalized_fusion(components, fusion.weights, fusion.normalization, fusion.combination)
    return ranked(((d, s) for d, s in fused.items() if s > 0), TOP + 1)


def parity(native: StoredRun, client: StoredRun, bm25: StoredRun, dense: StoredRun, fusion: FusionSpec,
           ndcg10: dict[str, dict[str, float]]) -> Parity:
    """`ndcg10`: per-query nDCG@10 of the native and client runs, keyed by run id."""
    out = Parity(n_queries=len(native.ranking))
    for q, hits in native.ranking.items():
        if _top(hits) == _top(client.ranking.get(q, [])):
            out.identical_top10 += 1
            continue
        components = [bm25.ranking.get(q, []), dense.ranking.get(q, [])]
        if _same_up_to_ties(hits, _top(client.ranking.get(q, []))):
            out.causes["ties"].append(q)
        elif fusion.technique != "rrf" and _same_up_to_ties(_reference(components, fusion), _top(hits)):
            out.causes["floor"].append(q)
        elif any(map(_has_ties, components)):
            out.causes["ties"].append(q)
        else:
            out.causes["unexplained"].append(q)
    per_q = [ndcg10[native.id], ndcg10[client.id]]
    out.max_ndcg10_diff = max((abs(per_q[0].get(q, 0.0) - per_q[1].get(q, 0.0)) for q in native.ranking), default=0.0)
    out.mean_ndcg10 = {"native": _mean(per_q[0]), "client": _mean(per_q[1])}
    return out


def _mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values) if values else float("nan")
