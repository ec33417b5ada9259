"""The node as a referee: OpenSearch's Ranking Evaluation API (`_rank_eval`, module rank-eval, in every
distribution) runs each query's own search body again and scores its hits against the qrels, on the node, with
code that is not evalctl's nor ranx's.

Conventions made equal to evalctl's (and stated in the referee table):
- ties: each body is sent sorted by score, then by the `doc_id` keyword (every document's id), which is evalctl's
  one tie rule (runs.ranked); the engine's own order inside a tie would be its internal document order;
- depth: `_rank_eval` asks each search for the metric's k hits; the bodies are the run's, exclusions included; a
  tie at the run's depth is cut by the engine's pick in the run, by the lowest ids here (BM25 and exact only: a
  k-NN search picks its k candidates first);
- nDCG: `dcg` with `normalize: true` has the gain 2^rel - 1 where ranx takes rel: equal for binary qrels (0/1), which
  is what citation qrels are; graded qrels are refused rather than compared on another scale;
- a rated document is matched by its concrete index name (an alias is resolved) and id; unrated hits gain 0.
A body run through a named search pipeline (native hybrid / RRF) cannot be judged: `_rank_eval` takes no
`search_pipeline` (RANK_EVAL_CANNOT).
"""

from __future__ import annotations

from collections.abc import Iterator

from evalctl.evaluators.scoring.metrics import metric_parts

METRICS = ("ndcg@10", "recall@100", "mrr@10")
TIE_SORT = [{"_score": {"order": "desc"}}, {"doc_id": {"order": "asc"}}]
CONVENTIONS = ("each run's own search bodies sent again, sorted by score then doc_id (evalctl's tie rule); each "
               "metric's k hits asked (a tie at the run's depth: the engine's pick in the run, the lowest ids here); "
               "nDCG as dcg normalize: true (gain 2^rel - 1 = rel on binary qrels)")
RANK_EVAL_CANNOT = "a search pipeline's fusion (native hybrid, RRF): `_rank_eval` takes no search_pipeline"
BATCH = 100  # rated requests per call: a body holds its query vector and its exclusions
CONCURRENT = 4  # max_concurrent_searches


class RankEvalError(RuntimeError):
    """`_rank_eval` refused a request or failed on a query (named)."""


def _metric(metric: str) -> dict:
    name, k = metric_parts(metric)
    if name == "ndcg":
        return {"dcg": {"k": k, "normalize": True}}
    if name == "recall":
        return {"recall": {"k": k, "relevant_rating_threshold": 1}}
    if name == "mrr":
        return {"mean_reciprocal_rank": {"k": k, "relevant_rating_threshold": 1}}
    raise ValueError(f"{metric}: `_rank_eval` referees ndcg, recall and mrr here")


def concrete_index(client, index: str) -> str:
    """The index a hit names (`_index`): an alias's one index, else the name itself."""
    found = list(client.indices.get(index=index, params={"filter_path": "*.settings.index.provided_name"}))
    if len(found) != 1:
        raise RankEvalError(f"{index!r} names {len(found)} indexes; `_rank_eval` rates the documents of one")
    return found[0]


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def rank_eval_scores(client, index: str, bodies: dict[str, dict], qrels: dict[str, dict[str, int]],
                     metrics: tuple[str, ...] = METRICS) -> dict[str, dict[str, float]]:
    """Per-query values {metric: {query: value}} of `_rank_eval` for the qrels' queries: each query's body (from
    the run it referees) searched again with evalctl's tie rule; a query without a body (no text) scores 0."""
    if graded := sorted({v for judged in qrels.values() for v in judged.values()} - {0, 1}):
        raise RankEvalError(f"graded relevance {graded}: `_rank_eval`'s nDCG gains 2^rel - 1 where evalctl's take "
                            "rel; the two agree on binary qrels only")
    name = concrete_index(client, index)
    asked = [q for q in sorted(qrels) if bodies.get(q) is not None]
    out: dict[str, dict[str, float]] = {}
    for metric in metrics:
        values = dict.fromkeys(qrels, 0.0)
        for part in _batches(asked, BATCH):
            requests = [{"id": q, "request": {**{k: v for k, v in bodies[q].items() if k not in ("size", "sort")},
                                              "sort": TIE_SORT},
                         "ratings": [{"_index": name, "_id": d, "rating": r} for d, r in qrels[q].items()]}
                        for q in part]
            resp = client.transport.perform_request("POST", f"/{index}/_rank_eval", body={
                "requests": requests, "metric": _metric(metric), "max_concurrent_searches": CONCURRENT})
            if failures := resp.get("failures"):
                q, why = next(iter(failures.items()))
                raise RankEvalError(f"`_rank_eval` failed on {len(failures)} queries, e.g. {q}: {why}")
            values.update({q: float(d["metric_score"]) for q, d in resp["details"].items()})
        out[metric] = values
    return out


def cut_ties(client, index: str, bodies: dict[str, dict], queries, k: int) -> set[str]:
    """The queries whose k-th and (k+1)-th hits, in the tie rule's order, share a score: a tie across the cut at k,
    where the run kept the engine's pick and `_rank_eval` the lowest ids."""
    asked = [q for q in queries if bodies.get(q) is not None]
    out = set()
    for part in _batches(asked, BATCH):
        lines = [line for q in part for line in ({"index": index}, {**bodies[q], "size": k + 1, "sort": TIE_SORT,
                                                                     "_source": False})]
        resp = client.msearch(body=lines, params={"filter_path": "responses.hits.hits._score"})
        for q, r in zip(part, resp["responses"]):
            hits = r.get("hits", {}).get("hits", [])
            if len(hits) > k and hits[k - 1]["_score"] == hits[k]["_score"]:
                out.add(q)
    return out
