"""Serving latency of several retrieval systems of one corpus as one experiment (latency_design: interleaved query
by query, the order rotated, busy rounds repeated, percentiles with bootstrap CIs): each request one `_search` (or
a chunked query's `_msearch`) built exactly as `evalctl retrieve` builds it and sent once, as latency.py sends them,
at one request in flight. The queries are the split's first `max_queries` that every system can send. Each system
is timed in each layout asked for (serving_layout: an index holding only what it searches, made for the
experiment and removed after, and/or the study's index, holding every view): an arm per system and layout, the arms
interleaved as the design's systems.

A dense system's query is encoded before it can be searched: each query the rounds send is encoded once more,
alone (batch 1), by the model on this machine's runtime (the device and precision `evalctl retrieve` would encode
queries with; a served model: its endpoint), after a warm-up of WARM_ENCODES, and the time kept per query; systems
of one model, query view and prompt share the measurement. A system's serving latency per query is its encoding
plus its search (latency_design.Analysis). A chunked query's encoding (its chunks, cut in the model's tokens) and
a text-only system's (none) are not measured.

The result (results store, kind "latency-experiment") keeps every latency (timings.csv: arm, round, query,
position, ms, error), every query encoding (encode.csv: encoding, query, ms), each arm's system (retrieval
identity), layout, index and index manifest (with the serving copy's own cost), the rounds' other load and which
were quiet, and the conditions (serving_conditions), so a report recomputes any interval or comparison from it.
Like a single latency, a measurement is an observation: its time and a random id are part of its identity.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
import uuid
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from evalctl import results_store
from evalctl.clock import utc_now_us
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.retrieval.latency import LatencyError, _payloads, _require_one_request, _Sender
from evalctl.evaluators.retrieval.latency_design import (BUSY_SHARE, Analysis, Estimate, OtherLoad, Rounds, Timing,
                                                         send_rounds)
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.evaluators.retrieval.retrieve import RetrievalSpec, identify, search_type
from evalctl.evaluators.retrieval.serving_layout import LAYOUTS, layouts
from evalctl.evaluators.retrieval.serving_conditions import (client_host, load_average, local_node_pids, node_load,
                                                             node_settings)
from evalctl.evaluators.scoring.runs import find_run
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.indexers.encoder import make_encoder
from evalctl.opensearch.cluster_info import require_available
from evalctl.parameters import param
from evalctl.results_store import Result

KIND = "latency-experiment"
# What the stored manifest holds and how the report reads it: raised when that changes, so an experiment stored
# in an older form is measured again, never read by code that expects the new one.
FORMAT = 2
TIMINGS = "timings.csv"
ENCODINGS = "encode.csv"
MIN_ROUNDS = 5
WARM_ENCODES = 3  # queries encoded first and not timed: the model loaded, its first batches' allocations made


@dataclass(frozen=True)
class ExperimentParams:
    """How the systems of one corpus are timed together (a study's `latency:` entries)."""

    warmup: int = param(20, min=0, help="Queries sent to every system first and not measured.")
    rounds: int = param(5, min=MIN_ROUNDS, help="Measured rounds: each sends every query to every system.")
    max_queries: int = param(100, min=1, help="Queries per round at most: the split's first ones all systems send.")
    busy_repeats: int = param(2, min=0, help="Rounds run again in all, at most, for rounds the machine was busy in.")
    layouts: tuple[str, ...] = param(("serving",), comma=True, help="Where each system is timed: serving (an index "
                                     "holding only what it searches, copied from the study's) and/or study (the "
                                     "study's index); the first is the one findings read.")

    def __post_init__(self):
        if not self.layouts or len(set(self.layouts)) != len(self.layouts) or set(self.layouts) - set(LAYOUTS):
            raise LatencyError(f"layouts {','.join(self.layouts) or '(none)'}: one or both of {', '.join(LAYOUTS)}, "
                               "each once")
        for name, least in (("warmup", 0), ("rounds", MIN_ROUNDS), ("max_queries", 1), ("busy_repeats", 0)):
            if getattr(self, name) < least:
                raise LatencyError(f"{name} {getattr(self, name)}: must be {least} or more")


@dataclass(frozen=True)
class SystemLatency:
    name: str  # the run identity's name
    p50_ms: Estimate
    p95_ms: Estimate
    errors: int


@dataclass(frozen=True)
class Experiment:
    result: Result
    rounds: Rounds
    systems: tuple[SystemLatency, ...]


def _csv(rounds: Rounds, query_ids: list[str]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["system", "round", "query_id", "position", "ms", "error"])
    for t in rounds.timings:
        w.writerow([t.system, t.round, query_ids[t.query], t.position, "" if t.ms is None else t.ms, t.error or ""])
    return out.getvalue()


def _encode_csv(encodings: dict[str, list[float]], query_ids: list[str]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["encoding", "query_id", "ms"])
    for key, times in encodings.items():
        w.writerows([key, q, ms] for q, ms in zip(query_ids, times))
    return out.getvalue()


def read_encodings(result: Result) -> np.ndarray:
    """Per system and query, the query's encoding in ms (0 for a text-only system, nan where not measured)."""
    m = result.manifest
    at = {q: i for i, q in enumerate(m["queries"])}
    times: dict[str, np.ndarray] = {}
    for r in csv.DictReader(io.StringIO(result.read_text(ENCODINGS))):
        times.setdefault(r["encoding"], np.full(len(at), np.nan))[at[r["query_id"]]] = float(r["ms"])
    out = np.full((len(m["systems"]), len(at)), np.nan)
    for i, s in enumerate(m["systems"]):
        if not METHODS.get(s["method"]).vector:
            out[i] = 0.0
        elif s.get("encoding") in times:
            out[i] = times[s["encoding"]]
    return out


def _time_encodings(specs: list[RetrievalSpec], its, queries: list[str]
                    ) -> tuple[dict[str, list[float]], list, dict[str, dict]]:
    """Each distinct query encoding of the dense systems (model, query view, prompt) timed per query, batch 1; per
    system its encoding's key (None: none measured); per key its model, query view and what encoded it (device and
    precision, or served)."""
    keys, texts, encoders = [], {}, {}
    for s, it in zip(specs, its):
        if not (s.definition.vector and it.model) or s.query_chunks:
            keys.append(None)
            continue
        prompt = it.model.prompt_for("query", task_type="retrieval", variant=s.prompt_variant) or ""
        key = f"{it.model.id}|{s.qview}|{prompt}"
        keys.append(key)
        texts[key] = (it.model, s.qview, prompt, [it.queries.texts[q] for q in queries])
    out, settings = {}, {}
    for key, (model, view, prompt, batch) in texts.items():
        encoder = encoders.setdefault(model.id, make_encoder(model))
        devices = getattr(encoder, "devices", None)  # a served model's encoder has none here: the server's
        settings[key] = {"model": model.id, "query_view": view,
                         "setting": f"{','.join(devices)} {encoder.precision}" if devices else "served by its endpoint"}
        for text in batch[:WARM_ENCODES]:
            encoder.encode([text], prompt)
        out[key] = []
        for text in batch:
            start = time.perf_counter()
            encoder.encode([text], prompt)
            out[key].append(round((time.perf_counter() - start) * 1000, 3))
    for e in encoders.values():
        getattr(e, "close", lambda: None)()
    return out, keys, settings


def stored(corpus: str) -> Iterator[Result]:
    """The corpus's stored experiments in this code's FORMAT (one in an older form is not read: measure again)."""
    return (r for r in results_store.iter_results(KIND, corpus) if r.manifest.get("format") == FORMAT)


def read_rounds(result: Result) -> Rounds:
    """The stored timings as the design's Rounds (checked against their digest)."""
    m, at = result.manifest, {q: i for i, q in enumerate(result.manifest["queries"])}
    rows = csv.DictReader(io.StringIO(result.read_text(TIMINGS)))
    timings = tuple(Timing(int(r["system"]), int(r["round"]), at[r["query_id"]], int(r["position"]),
                           float(r["ms"]) if r["ms"] else None, r["error"] or None) for r in rows)
    return Rounds(timings, tuple(m["other_load"]), tuple(m["quiet"]), m["rounds"])


def analyse(result: Result, statistics: StatsProtocol = StatsProtocol()) -> tuple[Rounds, Analysis]:
    """A stored experiment's rounds and their analysis under the protocol's bootstrap (resamples, seed)."""
    rounds = read_rounds(result)
    m = result.manifest
    return rounds, Analysis(rounds, len(m["systems"]), len(m["queries"]), statistics.n_bootstrap, statistics.seed,
                            encode=read_encodings(result))


def summaries(result: Result, analysis: Analysis) -> tuple[SystemLatency, ...]:
    return tuple(SystemLatency(s["retrieval"]["name"], analysis.percentile(i, 50), analysis.percentile(i, 95),
                               analysis.errors[i]) for i, s in enumerate(result.manifest["systems"]))


def measure_interleaved(client, specs: list[RetrievalSpec], params: ExperimentParams,
                        statistics: StatsProtocol = StatsProtocol(), labels: list[str] | None = None,
                        progress: bool = False) -> Experiment:
    """Time `specs` (systems of one corpus) together as the module docstring says, and store the experiment;
    `labels` name the systems for the caller (a study's step targets), kept beside them."""
    load_before = load_average()
    if len({s.corpus for s in specs}) != 1:
        raise LatencyError(f"an interleaved latency times the systems of one corpus; given {len(specs)} systems of "
                           f"corpora {', '.join(sorted({s.corpus for s in specs}))}")
    for s in specs:
        _require_one_request(client, s)
    corpus = load_corpus(specs[0].corpus)
    its = [identify(client, s, corpus) for s in specs]
    for it in its:
        require_available(client, it.index)
    bodies = [dict(_payloads(client, s, it, progress)[0]) for s, it in zip(specs, its)]
    queries = [q for q in bodies[0] if all(q in b for b in bodies[1:])][:params.max_queries]
    if not queries:
        raise LatencyError(f"no query of corpus {corpus.name!r} can be sent to every system (--split, --query-view)")
    node_pids = local_node_pids(client)
    probe = OtherLoad(node_pids)
    since = probe.mark()
    encodings, encoding_keys, encoding_settings = _time_encodings(specs, its, queries)
    encode_load = round(probe.share(since), 3)  # other work slows an encoding as it slows a search
    node_before = node_load(client)
    with layouts(client, specs, [(it.index, it.manifest) for it in its], params.layouts) as made:
        arms = [(j, layout) for kind in params.layouts for j, layout in enumerate(made[kind])]
        senders = [_Sender(client, layout.index, search_type(specs[j], layout.manifest), multi=specs[j].query_chunks)
                   for j, layout in arms]

        def send(arm: int, query: int) -> tuple[float | None, str | None]:
            start = time.perf_counter()
            _, error = senders[arm].send(bodies[arms[arm][0]][queries[query]])
            return (None, error) if error else (round((time.perf_counter() - start) * 1000, 3), None)

        rounds = send_rounds(len(arms), len(queries), params.rounds, send, load=probe,
                             warmup=params.warmup, busy_repeats=params.busy_repeats)
        node = {layout.index: node_settings(client, layout.index) for _, layout in arms}
    labels = labels or [None] * len(specs)
    systems = [{"label": labels[j], "layout": layout.kind, "layout_asked": kind,
                "why_not_served": layout.why_not_served,
                "encoding": encoding_keys[j], "retrieval": its[j].identity, "index": layout.index,
                "method": specs[j].method, "model": specs[j].model, "view": specs[j].view,
                "run": (run.id if (run := find_run(corpus.name, its[j].identity)) else None),
                "index_manifest": layout.manifest}
               for kind, (j, layout) in zip([k for k in params.layouts for _ in specs], arms)]
    identity = {"name": "interleaved latency of " + ", ".join(it.identity["name"] for it in its),
                "format": FORMAT, "system_identities": [it.identity for it in its], **dataclasses.asdict(params),
                "measured_at": utc_now_us(), "measurement": uuid.uuid4().hex[:12]}
    extra = {
        "systems": systems, "queries": queries, "other_load": list(rounds.other_load), "quiet": list(rounds.quiet),
        "busy": rounds.busy or encode_load > BUSY_SHARE, "encode_other_load": encode_load,
        "encoding_settings": encoding_settings,
        "kept_rounds": rounds.kept, "client_host": client_host(),
        "node": node, "node_pids_on_this_host": list(node_pids),
        "node_load": {"before": node_before, "after": node_load(client)},
        "load_average": {"before": load_before, "after": load_average()},
        "busy_rule": f"a round is busy when other work (not this process, not a node on this host) held more than "
                     f"{BUSY_SHARE:g} of the host's CPUs during it; a busy round is run again, at most "
                     f"{params.busy_repeats} times in all; with fewer quiet rounds than {params.rounds} every round is "
                     "read and the measurement is busy; so is it when other work held more than that share while the "
                     "queries were encoded",
        "measured": "one request per query and system, one in flight, sent once (no retries); client latency = "
                    "request sent until its answer is parsed; each dense system's query encoding timed apart, per "
                    f"query at batch 1 after {WARM_ENCODES} untimed, on this machine's runtime",
    }
    files = {TIMINGS: _csv(rounds, queries), ENCODINGS: _encode_csv(encodings, queries)}
    result = results_store.write(KIND, corpus.name, identity, files, extra=extra)
    _, analysis = analyse(result, statistics)
    return Experiment(result, rounds, summaries(result, analysis))
