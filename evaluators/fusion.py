"""Client-side fusion (ranx's definitions, in ranking_metrics.py), and weight sweeps tuned on dev queries, reported on test queries.

Client-side fusion is both the working hybrid on a node without neural-search and the parity check
against the native pipeline: the same two rankings (BM25 and dense, same index, same depth) fused
per query, min-max normalised then weighted-summed (= neural-search's min_max + arithmetic_mean
with weights summing to 1), or by reciprocal rank (RRF). Known edge differences from neural-search:
it gives a single-hit list the score 1.0 and the lowest hit 0.001 instead of 0 (ranx: 0 and 0).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evalctl.errors import BadInput
from evalctl.evaluators import ranking_metrics
from evalctl.evaluators.runs import Ranking, StoredRun, ranked
from evalctl.evaluators.search_pipelines import FusionSpec, has_neural_search

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


@dataclass(frozen=True)
class SweepPoint:
    dense_weight: float
    dev_score: float


@dataclass(frozen=True)
class SweepResult:
    mode: str  # native | client
    metric: str
    points: tuple[SweepPoint, ...]
    best: FusionSpec
    test_run: StoredRun
    test_score: float


def fusion_sweep(client, spec, weights: list[float], *, metric: str = "ndcg@10", mode: str | None = None,
                 options=None) -> SweepResult:
    """Try each dense weight on the dev queries, keep the best (first on ties), run it on `spec.split`.

    `spec` is a hybrid RetrievalSpec for the reporting split (normally test). Native mode sends each
    weight through an inline pipeline; client mode fuses the stored BM25 and dense dev runs."""
    from evalctl.evaluators.retrieve import RetrievalError, RetrievalOptions, retrieve
    from evalctl.evaluators.scoring import evaluate_and_store

    if spec.split == "dev":
        raise RetrievalError("the sweep tunes on dev: report on another split (--split test)")
    opts = options or RetrievalOptions()
    mode = mode or ("native" if has_neural_search(client) else "client")
    dev = spec.with_(split="dev", fusion_mode=mode)
    points = []
    for w in weights:
        trial = dev.with_(fusion=dataclasses.replace(spec.fusion, dense_weight=w))
        run = retrieve(client, trial, dataclasses.replace(opts, inline_pipeline=True, extra={}))
        points.append(SweepPoint(w, evaluate_and_store(run).mean[metric]))
    best_w = max(points, key=lambda p: p.dev_score).dense_weight  # max keeps the first of equal scores
    best = dataclasses.replace(spec.fusion, dense_weight=best_w)
    tuned = {"tuned_on": {"split": "dev", "metric": metric, "mode": mode,
                          "grid": {str(p.dense_weight): p.dev_score for p in points}}}
    test_run = retrieve(client, spec.with_(fusion=best, fusion_mode=mode),
                        dataclasses.replace(opts, extra=tuned, reuse=False))
    return SweepResult(mode, metric, tuple(points), best, test_run, evaluate_and_store(test_run).mean[metric])
