"""Serving latency of one retrieval system, measured as a user would serve it: each query of the split is one
`_search` request (not the batched `_msearch` a retrieval run uses), built exactly as `evalctl retrieve` builds
it (retrieve.search_bodies), sent to the stored index.

A measurement is a stated warm-up (queries sent and not timed: the vector graphs paged in, the JIT warm), then
one pass per concurrency level: the split's first `max_queries` queries, in order, from that many threads,
each taking the next query when its last one is answered; a pass sends nothing after `time_limit_s`. Per
query it records the client latency (the request sent until its answer is read and parsed: network, queueing,
the node's work and the transfer) and the engine's own `took`; per pass, p50/p95/p99/min/max/mean of both,
throughput (answered queries per second of the pass's wall time) and errors (each sent once: no retries, a
refused or failed request is an error, not a slow answer).

Not measured: query encoding. Query vectors are encoded (or read from the query-vector cache) before any
timing, as the request bodies are serialised: the encoder's speed depends on its own hardware and batching,
not on the index. Client-side fusion (`--fusion client`) is refused: it is two searches and a ranx fusion in
the client, not one request; native hybrid/rrf (one request through the neural-search pipeline) is measured.
A chunked query (`--query-chunks`) is one `_msearch` of its chunks' bodies, the node searching them side by side;
the fusion by max in the client is not timed (a pass over at most k hits a chunk).

The result is stored (results store, kind "latency") with the conditions it ran under (serving_conditions)
and the per-query figures in queries.csv, so a report can recompute any percentile. Every measurement is its
own result (its time and a random id are part of its identity): a latency is an observation, and a second one
is kept beside the first, never in its place.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import numpy as np
import orjson

from evalctl import results_store
from evalctl.clock import utc_now_us
from evalctl.corpus.store import load_corpus
from evalctl.errors import BadInput
from evalctl.evaluators.fusion.search_pipelines import NeuralSearchMissing, require_neural_search
from evalctl.evaluators.retrieval.params import MAX_IN_FLIGHT, RetrievalOptions
from evalctl.evaluators.retrieval.retrieve import RetrievalSpec, chunk_bodies, identify, search_bodies, search_type
from evalctl.evaluators.retrieval.serving_conditions import (BUSY_SHARE, client_host, is_busy, load_average,
                                                             node_load, node_settings)
from evalctl.evaluators.scoring.runs import find_run
from evalctl.opensearch.cluster_info import require_available
from evalctl.parameters import param
from evalctl.results_store import Result

KIND = "latency"
TIMINGS = "queries.csv"
_FILTER_PATH = "took,timed_out,hits.hits._id,hits.hits._score"  # what a run keeps of an answer (retrieve.py)
_MULTI_FILTER_PATH = "took,responses.timed_out,responses.error,responses.hits.hits._id,responses.hits.hits._score"


class LatencyError(BadInput, ValueError):
    """A latency measurement that cannot be made as asked: one message naming the setting."""


@dataclass(frozen=True)
class LatencyParams:
    """How a latency is measured (the options of `evalctl latency` and of a study's `latency:` entry)."""

    warmup: int = param(20, min=0, help="Queries sent first and not measured (graphs paged in, the JIT warm).")
    concurrency: tuple[int, ...] = param((1, 4), min=1, max=MAX_IN_FLIGHT, comma=True,
                                         help="Requests in flight, one measured pass each, e.g. 1,4.")
    max_queries: int = param(200, min=1, help="Queries per pass at most: the split's first ones, in order.")
    time_limit_s: float = param(60.0, min=0, min_open=True, flag="--time-limit",
                                help="Seconds per pass at most: no query is sent after them.")

    def __post_init__(self):  # the command's options are checked by click first: these name the fields
        if not self.concurrency or not 1 <= min(self.concurrency) <= max(self.concurrency) <= MAX_IN_FLIGHT:
            raise LatencyError(f"concurrency {','.join(map(str, self.concurrency)) or '(none)'}: each level must be 1 "
                               f"to {MAX_IN_FLIGHT} requests in flight")
        if self.warmup < 0:
            raise LatencyError(f"warmup {self.warmup}: must be 0 or more queries")
        if self.max_queries < 1:
            raise LatencyError(f"max_queries {self.max_queries}: must be 1 or more queries")
        if not self.time_limit_s > 0:
            raise LatencyError(f"time_limit_s {self.time_limit_s}: must be more than 0 seconds")


@dataclass(frozen=True)
class QueryTiming:
    """One measured request."""

    concurrency: int  # of its pass
    query_id: str
    start_s: float  # when it was sent, seconds after its pass began
    client_ms: float  # sent until its answer was read and parsed
    took_ms: int | None  # the engine's own `took`; None for an error
    error: str | None = None


@dataclass(frozen=True)
class Spread:
    """Percentiles (numpy's linear interpolation) and extremes of one measure, in milliseconds."""

    p50: float
    p95: float
    p99: float
    min: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: list[float]) -> Spread | None:
        if not values:
            return None
        a = np.asarray(values, dtype=float)
        p50, p95, p99 = np.percentile(a, [50, 95, 99])
        return cls(*(round(float(v), 3) for v in (p50, p95, p99, a.min(), a.max(), a.mean())))


@dataclass(frozen=True)
class PassResult:
    concurrency: int
    sent: int  # requests sent (answered + errors)
    errors: int
    first_error: str | None
    seconds: float  # wall time of the pass
    qps: float  # answered queries per second of wall time
    stopped_by: str  # "queries" (max_queries sent) or "time limit"
    client_ms: Spread | None  # over answered queries; None when none was answered
    took_ms: Spread | None


@dataclass(frozen=True)
class Latency:
    result: Result
    passes: tuple[PassResult, ...]
    timings: tuple[QueryTiming, ...]


class _Sender:
    """Sends one prepared `_search` body, once, through the client's connection pool (same host, auth, TLS and
    timeout as every evalctl request) but past evalctl's retries: a retried request would read as a slow one."""

    def __init__(self, client, index: str, search_type: str | None, multi: bool = False):
        import urllib3  # deferred: urllib3

        self._client, self._errors, self._multi = client, urllib3.exceptions.HTTPError, multi
        query = {"filter_path": _MULTI_FILTER_PATH if multi else _FILTER_PATH}
        if not multi:  # _msearch has no such option: each answer's own timed_out is checked
            query["allow_partial_search_results"] = "false"
        if search_type:  # as the run searched: corpus-wide BM25 statistics on a sharded index
            query["search_type"] = search_type
        self._path = f"/{quote(index)}/{'_msearch' if multi else '_search'}?{urlencode(query)}"

    def send(self, payload: bytes) -> tuple[int | None, str | None]:
        """The engine's `took`, or None and what went wrong."""
        conn = self._client.transport.get_connection()  # a cluster's hosts in turn, as the client spreads them
        headers = {**conn.headers, "content-type": "application/x-ndjson" if self._multi else "application/json"}
        try:
            resp = conn.pool.urlopen("POST", conn.url_prefix + self._path, payload, retries=False,
                                     timeout=conn.timeout, headers=headers)
        except self._errors as e:
            return None, f"{type(e).__name__}: {e}"
        try:
            answer = orjson.loads(resp.data)
        except orjson.JSONDecodeError:
            return None, f"HTTP {resp.status}: {resp.data[:200].decode('utf-8', 'replace')}"
        if resp.status >= 400:
            err = answer.get("error") if isinstance(answer, dict) else None
            cause = (err.get("root_cause") or [err])[0] if isinstance(err, dict) else None
            why = f"{cause.get('type')}: {cause.get('reason')}" if isinstance(cause, dict) else str(err or answer)
            return None, f"HTTP {resp.status} {why}"[:500]
        for one in answer.get("responses", [answer]):
            if one.get("error"):
                return None, f"an _msearch item failed: {str(one['error'])[:400]}"
            if one.get("timed_out"):
                return None, "timed_out: the node answered with partial hits"
        return answer.get("took"), None


def _measure_pass(send, queries: list[tuple[str, bytes]], concurrency: int, limit_s: float
                  ) -> tuple[list[QueryTiming], float]:
    """One pass: `concurrency` threads take the next query as their last is answered, until every query is sent
    or `limit_s` has passed. The timings (in sending order) and the pass's wall time."""
    lock, state = threading.Lock(), {"next": 0}
    t0 = time.perf_counter()
    deadline = t0 + limit_s

    def worker() -> list[QueryTiming]:
        out = []
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= len(queries) or time.perf_counter() >= deadline:
                return out
            qid, payload = queries[i]
            start = time.perf_counter()
            took, error = send(payload)
            end = time.perf_counter()
            out.append(QueryTiming(concurrency, qid, round(start - t0, 6), round((end - start) * 1000, 3), took, error))

    if concurrency == 1:  # no thread pool between the caller and the one request in flight
        rows = worker()
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            rows = [r for f in [pool.submit(worker) for _ in range(concurrency)] for r in f.result()]
    seconds = time.perf_counter() - t0
    return sorted(rows, key=lambda r: r.start_s), seconds


def _summary(concurrency: int, rows: list[QueryTiming], seconds: float, n_queries: int) -> PassResult:
    ok = [r for r in rows if r.error is None]
    failed = [r for r in rows if r.error is not None]
    return PassResult(concurrency=concurrency, sent=len(rows), errors=len(failed),
                      first_error=failed[0].error if failed else None, seconds=round(seconds, 3),
                      qps=round(len(ok) / seconds, 2) if seconds > 0 else 0.0,
                      stopped_by="queries" if len(rows) == n_queries else "time limit",
                      client_ms=Spread.of([r.client_ms for r in ok]), took_ms=Spread.of([float(r.took_ms) for r in ok]))


def _timings_csv(rows: list[QueryTiming]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([f.name for f in dataclasses.fields(QueryTiming)])
    for r in rows:
        w.writerow(["" if v is None else v for v in dataclasses.astuple(r)])
    return out.getvalue()


def read_timings(result: Result) -> list[QueryTiming]:
    """The per-query figures of a stored latency (checked against their digest), to recompute any statistic."""
    rows = csv.DictReader(io.StringIO(result.read_text(TIMINGS)))
    return [QueryTiming(int(r["concurrency"]), r["query_id"], float(r["start_s"]), float(r["client_ms"]),
                        int(r["took_ms"]) if r["took_ms"] else None, r["error"] or None) for r in rows]


def _require_one_request(client, spec: RetrievalSpec) -> None:
    m = spec.definition
    if m.fused and spec.fusion_mode == "client":
        raise LatencyError(
            f"--method {spec.method} --fusion client is two searches (bm25 and dense) fused by ranx in the client, "
            f"not one request a user would be served: measure --fusion native (one hybrid request through the "
            f"neural-search pipeline), or its two parts as --method bm25 and --method dense")
    if m.pipeline:
        try:
            require_neural_search(client, f"latency of --method {spec.method}")
        except NeuralSearchMissing:
            raise LatencyError(
                f"--method {spec.method} is served as one request only through a neural-search pipeline, and this "
                f"node lacks the opensearch-neural-search plugin (`evalctl opensearch start --plugin-zip`); "
                f"client-side fusion is two requests and is not measured: measure --method bm25 and --method dense"
            ) from None


def _payloads(client, spec: RetrievalSpec, it, progress: bool) -> tuple[list[tuple[str, bytes]], dict]:
    """(query id, request payload) of each query with text, as the run builds its bodies: one `_search` body, or the
    `_msearch` lines of its chunks (query_chunks); and the bodies' counts."""
    dumps, opts = client.transport.serializer.dumps, RetrievalOptions(progress=progress)
    if not spec.query_chunks:
        bodies, counts = search_bodies(client, spec, it.queries, it.manifest, it.model, opts)
        return [(q, dumps(b).encode()) for q, b in zip(it.queries.ids, bodies) if b is not None], counts
    bodies, owners, counts = chunk_bodies(client, spec, it.queries, it.manifest, it.model, opts)
    lines: dict[str, list[str]] = {}
    for q, b in zip(owners, bodies):
        lines.setdefault(q, []).extend(("{}", dumps(b)))
    return [(q, ("\n".join(ls) + "\n").encode()) for q, ls in lines.items()], counts


def measure_latency(client, spec: RetrievalSpec, params: LatencyParams, progress: bool = False) -> Latency:
    """Measure `spec`'s serving latency on its stored index (see the module docstring) and store the result.
    `client` should keep at least max(params.concurrency) connections (connection.make_client's pool_size, as
    `evalctl latency` asks): past its pool, each request in flight opens and drops a connection of its own."""
    load_before = load_average()  # before this command's own work (encoding, passes) adds to it
    _require_one_request(client, spec)
    corpus = load_corpus(spec.corpus)
    it = identify(client, spec, corpus)
    require_available(client, it.index)
    sendable, counts = _payloads(client, spec, it, progress)
    if not sendable:
        raise LatencyError(f"no {spec.split or 'all'} query of corpus {corpus.name!r} has {spec.qview} text: "
                           "nothing to send (--split, --query-view)")
    queries = sendable[:params.max_queries]
    st = search_type(spec, it.manifest)
    sender = _Sender(client, it.index, st, multi=spec.query_chunks)
    node, node_load_before = node_settings(client, it.index), node_load(client)

    warm_deadline = time.perf_counter() + params.time_limit_s
    warmed = 0
    while warmed < params.warmup and time.perf_counter() < warm_deadline:  # cycles the queries if fewer
        sender.send(sendable[warmed % len(sendable)][1])
        warmed += 1

    passes, timings = [], []
    for c in params.concurrency:
        rows, seconds = _measure_pass(sender.send, queries, c, params.time_limit_s)
        passes.append(_summary(c, rows, seconds, len(queries)))
        timings.extend(rows)
    load_after = load_average()

    host = client_host()
    run = find_run(corpus.name, it.identity)
    identity = {"name": it.identity["name"], "retrieval": it.identity, **dataclasses.asdict(params),
                "measured_at": utc_now_us(), "measurement": uuid.uuid4().hex[:12]}  # the id keeps two apart; latest_cost orders by the time
    extra = {
        "index": it.index, "method": spec.method, "model": spec.model, "view": spec.view, "split": spec.split,
        "run": run.id if run else None, "index_manifest": it.manifest, "search_type": st or "query_then_fetch",
        "queries_available": len(sendable), "queries_sent": [p.sent for p in passes], "warmup_sent": warmed,
        **counts, "passes": [dataclasses.asdict(p) for p in passes],
        "client_host": host, "node": node, "node_load": {"before": node_load_before, "after": node_load(client)},
        "load_average": {"before": load_before, "after": load_after},
        # the reading before the command's own load: the one after also holds the passes' threads and the node's work
        "busy": is_busy(load_before[0], host["cpus"] or 1),
        "busy_rule": f"1-minute load average before the measurement > {BUSY_SHARE:g} x the client's CPUs",
        "measured": ("one _msearch of its chunks' bodies per query" if spec.query_chunks else "one _search per query")
                    + ", sent once (no retries); client latency = request sent until its answer is parsed; query "
                    "encoding and body serialisation happen before timing and are not counted",
    }
    result = results_store.write(KIND, corpus.name, identity, {TIMINGS: _timings_csv(timings)}, extra=extra)
    return Latency(result, tuple(passes), tuple(timings))
