"""Client-side fusion (ranx's definitions, in ranking_metrics.py) of a BM25 and a dense ranking.

Client-side fusion is both the working hybrid on a node without neural-search and the parity check
against the native pipeline: the same two rankings (BM25 and dense, same index, same depth) fused
per query, min-max normalised then weighted-summed (= neural-search's min_max + arithmetic_mean
with weights summing to 1), or by reciprocal rank (RRF). Known edge differences from neural-search:
it gives a single-hit list the score 1.0 and the lowest hit 0.001 instead of 0 (ranx: 0 and 0).
"""

from __future__ import annotations

from evalctl.errors import BadInput
from evalctl.evaluators import ranking_metrics
from evalctl.evaluators.runs import Ranking, ranked
from evalctl.evaluators.search_pipelines import FusionSpec

# neural-search normalisation -> ranx normalisation (l2 has no ranx counterpart)
_RANX_NORM = {"min_max": "min-max", "z_score": "zmuv"}


class FusionUnsupported(BadInput, ValueError):
    pass


def fuse_rankings(rankings: list[Ranking], spec: FusionSpec, depth: int) -> Ranking:
    """Fuse [bm25, dense] rankings per query; every query of the first ranking is kept."""
    if spec.technique == "rrf":
        if abs(spec.dense_weight - 0.5) > 1e-9:
            raise FusionUnsupported("weighted RRF is native-only (ranx's rrf is unweighted); use --dense-weight 0.5")
        # ranks in our (score, id) order, also where engine scores tie
        fused = ranking_metrics.rrf([{q: [d for d, _ in docs] for q, docs in r.items()} for r in rankings],
                                    spec.rank_constant)
    else:
        if spec.normalization not in _RANX_NORM or spec.combination != "arithmetic_mean":
            raise FusionUnsupported(f"client-side fusion supports min_max/z_score with arithmetic_mean, not "
                                    f"{spec.normalization}/{spec.combination} (those need the native pipeline)")
        fused = ranking_metrics.weighted_sum([{q: dict(docs) for q, docs in r.items()} for r in rankings],
                                             spec.weights, _RANX_NORM[spec.normalization])
    return {q: ranked(fused.get(q, {}).items(), depth) for q in rankings[0]}
