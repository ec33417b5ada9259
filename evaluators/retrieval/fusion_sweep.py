"""Fusion weight sweeps: each dense weight tried on the dev queries, the best reported on the test queries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evalctl.evaluators.retrieval.retrieve import RetrievalError, RetrievalOptions, RetrievalSpec, retrieve
from evalctl.evaluators.scoring.metrics import evaluate_and_store
from evalctl.evaluators.scoring.runs import StoredRun
from evalctl.evaluators.fusion.search_pipelines import has_neural_search
from evalctl.evaluators.fusion.settings import FusionSpec


# The RetrievalParams a sweep sets itself (`evalctl fusion-sweep` offers the others): its method, the weight it
# tunes, and the mode it takes from --mode.
SWEEP_SETS = ("method", "fusion_mode", "dense_weight", "rank_constant", "query_sample")


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


def fusion_sweep(client, spec: RetrievalSpec, weights: list[float], *, metric: str = "ndcg@10", mode: str | None = None,
                 options=None) -> SweepResult:
    """Try each dense weight on the dev queries, keep the best (first on ties), run it on `spec.split`.

    `spec` is a hybrid RetrievalSpec for the reporting split (normally test). Native mode sends each
    weight through an inline pipeline; client mode fuses the stored BM25 and dense dev runs."""
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
