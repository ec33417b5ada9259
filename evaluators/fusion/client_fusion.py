"""Client-side fusion of a BM25 and a dense ranking by `ranx.fuse` (through ranx_engine).

Client-side fusion is both the working hybrid on a node without neural-search and the parity check
against the native pipeline: the same two rankings (BM25 and dense, same index, same depth) fused
per query, min-max normalised then weighted-summed (= neural-search's min_max + arithmetic_mean
with weights summing to 1; z_score = ranx's zmuv), or by reciprocal rank (RRF). Known edge differences
from neural-search: it gives a single-hit list the score 1.0 and the lowest hit 0.001 instead of 0
(ranx: 0 and 0).

Each query is fused over the runs that answered it: ranx 0.3's zmuv loses the results of a whole parallel
chunk of queries when one of them has an empty list, and ranx builds no Run from a run without any hit
(a view without text). Queries are grouped by which runs answered them, each group fused by ranx; where
ranx handles an empty list (min-max, RRF) this gives its numbers exactly, since an empty list adds nothing.
"""

from __future__ import annotations

from collections import defaultdict

from evalctl.errors import BadInput
from evalctl.evaluators.scoring import ranx_engine
from evalctl.evaluators.scoring.runs import Ranking, as_ranx, ranked
from evalctl.evaluators.fusion.settings import FusionSpec

# neural-search normalisation -> ranx normalisation (l2 has no ranx counterpart)
_RANX_NORM = {"min_max": "min-max", "z_score": "zmuv"}


class FusionUnsupported(BadInput, ValueError):
    pass


def fuse_rankings(rankings: list[Ranking], spec: FusionSpec, depth: int) -> Ranking:
    """Fuse [bm25, dense] rankings per query; every query of the first ranking is kept."""
    for i, r in enumerate(rankings[1:], 1):
        if set(r) != set(rankings[0]):
            raise ValueError(f"runs 0 and {i} hold different queries: fusion needs the same query set")
    if spec.technique == "rrf":
        if abs(spec.dense_weight - 0.5) > 1e-9:
            raise FusionUnsupported("weighted RRF is native-only (ranx's rrf is unweighted); use --dense-weight 0.5")
        weights = [1.0] * len(rankings)
    else:
        if spec.normalization not in _RANX_NORM or spec.combination != "arithmetic_mean":
            raise FusionUnsupported(f"client-side fusion supports min_max/z_score with arithmetic_mean, not "
                                    f"{spec.normalization}/{spec.combination} (those need the native pipeline)")
        weights = list(spec.weights)
    groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for q in rankings[0]:
        groups[tuple(i for i, r in enumerate(rankings) if r[q])].append(q)
    fused: dict[str, dict[str, float]] = {}
    for answered, queries in groups.items():
        if answered:
            fused.update(_ranx_fused([{q: rankings[i][q] for q in queries} for i in answered],
                                     [weights[i] for i in answered], spec))
    return {q: ranked(fused.get(q, {}).items(), depth) for q in rankings[0]}


def _ranx_fused(rankings: list[Ranking], weights: list[float], spec: FusionSpec) -> dict[str, dict[str, float]]:
    ranx = ranx_engine.load()
    if spec.technique == "rrf":  # ranks in our (score, id) order, also where engine scores tie
        runs = [as_ranx(r, f"run{i}", scores="rank") for i, r in enumerate(rankings)]
        norm, method, params = None, "rrf", {"k": spec.rank_constant}
    else:
        runs = [as_ranx(r, f"run{i}", scores="engine") for i, r in enumerate(rankings)]
        norm, method, params = _RANX_NORM[spec.normalization], "wsum", {"weights": weights}
    if len(runs) > 1:
        return ranx.fuse(runs, norm=norm, method=method, params=params).to_dict()
    # ranx.fuse wants two runs; a query one run alone answered gets that run's term of the same sum
    from ranx.fusion import rrf, wsum

    if method == "rrf":
        return rrf(runs, k=spec.rank_constant).to_dict()
    return wsum([ranx.normalize(runs[0], norm)], weights).to_dict()
