"""Metrics of a run against its qrels, with per-query values kept. Scoring is pure; a caller that means to
keep the scores stores them with `store_scores` (results kind "metrics").

nDCG@10 is the primary metric (the study's); nDCG@100, Recall@10/100, MAP@100 and MRR@10 follow
MTEB / pytrec_eval definitions (ranx's defaults: binary gains as given, no 2^rel), computed by
`ranx.evaluate` (through ranx_engine, whose numba cache makes the kernels a one-time compile per machine).
ranx is given plain dicts, an input it documents: its Qrels/Run objects are numba typed dicts, whose
Python-side methods numba compiles again in every process (seconds; docs/performance.md), while the
metric kernels are the same. The run's own order is scored (rank-derived scores, see runs.py), queries are
the queries the run searched (run_queries: a sampled run's others are not its queries): a query with no positive
under a filter (IN-only, OUT-only) is dropped, a searched query with no hit scores 0 (ranx takes no empty
result list from a dict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from evalctl import results_store
from evalctl.evaluators.scoring import ranx_engine
from evalctl.evaluators.scoring.run_queries import RunQueries, run_queries
from evalctl.evaluators.scoring.runs import Ranking, StoredRun, rank_scores

METRICS: tuple[str, ...] = ("ndcg@10", "ndcg@100", "recall@10", "recall@100", "map@100", "mrr@10")
PRIMARY = "ndcg@10"


def metric_parts(metric: str) -> tuple[str, int]:
    """A metric's measure and cut-off: "ndcg@10" -> ("ndcg", 10)."""
    name, _, k = metric.partition("@")
    if not k.isdigit():
        raise ValueError(f"{metric!r}: a metric is written measure@k (e.g. {PRIMARY})")
    return name, int(k)


@dataclass(frozen=True)
class Scores:
    mean: dict[str, float]
    per_query: dict[str, dict[str, float]]  # metric -> {query: value}

    @property
    def n_queries(self) -> int:
        return len(next(iter(self.per_query.values()), {}))


def score(ranking: Ranking, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...] = METRICS) -> Scores:
    """Score `ranking` on the queries of `qrels` (each with at least one positive)."""
    if not qrels:
        return Scores({m: float("nan") for m in metrics}, {m: {} for m in metrics})
    if not any(ranking.get(q) for q in qrels):  # nothing retrieved (e.g. a view without text): all zero
        return Scores({m: 0.0 for m in metrics}, {m: dict.fromkeys(qrels, 0.0) for m in metrics})
    queries = sorted(qrels)  # ranx's own query order for Qrels
    answered = [q for q in queries if ranking.get(q)]
    ranx = ranx_engine.load()
    # ranx 0.3 fails on one metric without means (it looks the scores up under "ndcg" for "ndcg@10"): ask twice
    asked = list(metrics) if len(metrics) > 1 else [*metrics, *metrics]
    with ranx_engine.threads():  # ranx drops to one thread for fewer than 10 queries, for good
        values = ranx.evaluate({q: qrels[q] for q in answered}, rank_scores({q: ranking[q] for q in answered}),
                               asked, return_mean=False)
    per_query = {m: {**dict.fromkeys(queries, 0.0), **dict(zip(answered, map(float, values[m])))} for m in metrics}
    return Scores({m: float(np.mean(list(v.values()))) for m, v in per_query.items()}, per_query)


def evaluate_run(run: StoredRun, domain: str | None = None, metrics: tuple[str, ...] = METRICS,
                 within=None, basis: RunQueries | None = None) -> Scores:
    """Score a stored run on the queries it searched (those of `within` only, when given; IN/OUT pairs only
    with `domain`) against the qrels it recorded (`basis`, default run_queries(run)); stores nothing."""
    judged = (basis or run_queries(run)).judged(run.manifest["split"], domain, within)
    return score(run.ranking, judged, metrics)


def _scores_identity(run: StoredRun, metrics, domain: str | None) -> dict:
    m = run.manifest
    # A sampled run's scores were once kept over its whole split (unsearched queries as zeros): a new identity
    # for its scores over the searched queries, so those are never read back; a full split's keep theirs.
    sampled = {"scored_on": "searched queries"} if m.get("query_sample") else {}
    return {"name": f"{m['name']}{'-' + domain if domain else ''}", "run": run.id,
            "qrels": m["qrels"], "split": m["split"], "domain": domain, "metrics": list(metrics), **sampled}


def store_scores(run: StoredRun, scores: Scores, domain: str | None = None) -> results_store.Result:
    """Keep `scores` of `run` (from evaluate_run on the run's own qrels) as results kind "metrics"."""
    files = {"metrics.json": json.dumps({"n_queries": scores.n_queries, "mean": scores.mean}, indent=2),
             "per_query.json": json.dumps(scores.per_query)}
    return results_store.write("metrics", run.manifest["corpus"], _scores_identity(run, scores.mean, domain), files,
                               extra={"n_queries": scores.n_queries})


def stored_scores(run: StoredRun, domain: str | None = None) -> dict[str, float] | None:
    """The mean scores evaluate_and_store kept for `run` (every metric), or None: nothing is computed."""
    res = results_store.find("metrics", run.manifest["corpus"], _scores_identity(run, METRICS, domain))
    return res.read_json("metrics.json")["mean"] if res else None


def evaluate_and_store(run: StoredRun, domain: str | None = None) -> Scores:
    """evaluate_run on every metric, kept with store_scores: what `evalctl retrieve/evaluate` and the study do."""
    scores = evaluate_run(run, domain=domain)
    store_scores(run, scores, domain)
    return scores


def ann_loss(ann: StoredRun, exact: StoredRun, depth: int = 10) -> dict[str, float]:
    """How much approximate search loses against exact search on the queries both searched (exact's sample,
    when it searched one): nDCG@10 of both and the share of the exact top-`depth` that ANN also returns in its
    top-`depth`. Stores nothing."""
    common = run_queries(ann).searched & run_queries(exact).searched
    overlap = [len({d for d, _ in ann.ranking.get(q, [])[:depth]} & {d for d, _ in docs[:depth]}) / len(docs[:depth])
               for q, docs in exact.ranking.items() if docs and q in common]
    return {"ann_ndcg@10": evaluate_run(ann, within=common).mean[PRIMARY],
            "exact_ndcg@10": evaluate_run(exact, within=common).mean[PRIMARY],
            f"ann_recall_of_exact@{depth}": sum(overlap) / len(overlap) if overlap else float("nan")}
