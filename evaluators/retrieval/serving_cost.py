"""What serving one retrieval system costs, as one row: its latency (the newest of a stored interleaved experiment,
latency_experiment, or a single `evalctl latency`, its first concurrency level), the index it is served from, and
the encoding of its documents, all read from the stored latency (which keeps the index manifest, `cost` included, as
it was when measured). Read by `evalctl compare --cost` and the study report's quality-and-cost table; nothing here
asks the node.

Size is stated from what each system stores: its vectors' bytes (their count x dimension x bytes per value, every
passage counted: index_cost.vector_bytes), its graph (the k-NN plugin's native memory for an index with one vector
field, else OpenSearch's HNSW estimate of 1.1 x (4d + 8m) bytes per vector, labelled as such), and its index's
store less the vectors of fields it does not search (what the index would take holding this system's vectors only;
BM25: none), whose shared part (text, _source, ids: the store less every vector) is the same for every system of the
index and shown once per index (shared_parts).
Encoding: document-encoding seconds per 1,000 patents of the view's vectors, on the setting (device,
precision) that encoded most of them; query encoding is not counted, as the latency does not count it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalctl import results_store
from evalctl.evaluators.retrieval.latency_experiment import analyse, stored
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.indexers.index_cost import vector_bytes
from evalctl.indexers.passages import PassageSpec, passage_unit
from evalctl.results_store import Result

KIND = "latency"
MB = 1e6  # decimal megabytes, as the tables say
PER_INDEX = 10_000  # index size per this many patents
PER_ENCODE = 1_000  # encode seconds per this many patents
HNSW_ESTIMATE = "1.1 x (4d + 8m) B per vector"
RULES = (f"vectors MB per {PER_INDEX:,} patents: the system's vectors, count x dimension x bytes per value (every "
         f"passage counted); graph MB: the k-NN plugin's native memory (faiss, an index with one vector field) or "
         f"OpenSearch's HNSW estimate, {HNSW_ESTIMATE} (est.); index MB: its index's store less the vectors of the "
         "fields it does not search (the index's shared text, _source and ids included: see the table of indexes), "
         f"from the index cost measured after its last load; encode s: document (or passage) encoding per "
         f"{PER_ENCODE:,} patents on the setting that encoded most of them (queries not counted); latency: client "
         "p50/p95 at one request in flight with bootstrap 95% CIs, of the newest interleaved experiment (or single "
         "`evalctl latency`, no CI) of the system; query encode: a query encoded alone (batch 1) on this machine; "
         "serving p95: encoding + search per query, what a user waits for")


@dataclass(frozen=True)
class ServingCost:
    latency_id: str
    measured_at: str
    concurrency: int
    p50_ms: float | None  # None: no query was answered
    p95_ms: float | None
    qps: float | None  # None: an interleaved experiment (one request in flight: throughput not measured)
    busy: bool  # the machine was busy when measured
    index_mb_per_10k: float | None  # None: the index's cost was not recorded
    vector_mb_per_10k: float | None  # None: a text-only system, or not recorded
    graph_mb: float | None  # None: a text-only system, or not recorded
    graph_source: str | None  # "native memory" or "estimate"
    encode_s_per_1k: float | None  # None: a text-only system, or not recorded
    encode_device: str | None
    p50_ci: tuple[float, float] | None = None  # bootstrap 95% CIs of an interleaved experiment
    p95_ci: tuple[float, float] | None = None
    index: str | None = None  # the index it is served from
    encode_p50_ms: float | None = None  # a query's encoding, batch 1 (None: text only, or not measured)
    serving_p95_ms: float | None = None  # encoding + search per query (None: not measured)
    serving_p95_ci: tuple[float, float] | None = None

    @property
    def end_to_end_p95_ms(self) -> float | None:
        """What a user waits for: the serving p95 where the query's encoding was measured, else the search's."""
        return self.serving_p95_ms if self.serving_p95_ms is not None else self.p95_ms

    @property
    def end_to_end_p95_ci(self) -> tuple[float, float] | None:
        return self.serving_p95_ci if self.serving_p95_ms is not None else self.p95_ci


@dataclass(frozen=True)
class IndexSize:
    """What a system stores, from its index manifest's cost (see the module docstring)."""

    index_bytes: float | None
    vector_bytes: float | None
    graph_bytes: float | None
    graph_source: str | None


def _size(manifest: dict, unit: str | None) -> IndexSize:
    """`unit`: the vector field the system searches (None: text only)."""
    cost = manifest.get("cost") or {}
    if not cost.get("store_bytes"):
        return IndexSize(None, None, None, None)
    counts, dim = cost.get("vector_counts") or {}, cost.get("dim")
    everything = cost["store_bytes"] - shared_bytes(manifest)
    own = vector_bytes({unit: counts[unit]}, dim, manifest) if unit and unit in counts and dim else None
    if unit and own is None:  # a cost measured before vectors were counted: equal shares of the files
        own = everything / (cost.get("vector_fields") or 1)
    index = cost["store_bytes"] - everything + (own or 0)
    if not unit:
        return IndexSize(index, None, None, None)
    one_field = sum(1 for n in counts.values() if n) <= 1
    if one_field and cost.get("native_memory_bytes") is not None:
        return IndexSize(index, own, cost["native_memory_bytes"], "native memory")
    m = (manifest.get("hnsw") or {}).get("m")
    if m and dim and unit in counts:
        return IndexSize(index, own, 1.1 * (4 * dim + 8 * m) * counts[unit], "estimate")
    return IndexSize(index, own, None, None)


def shared_bytes(manifest: dict) -> float | None:
    """An index's part no system owns: its store less every vector (text, keywords, _source, ids)."""
    cost = manifest.get("cost") or {}
    if not cost.get("store_bytes"):
        return None
    return cost["store_bytes"] - cost.get("vector_bytes", sum((cost.get("vector_files_bytes") or {}).values()))


def _unit(method: str, view: str, passages: str | None) -> str | None:
    """The vector field a system searches (None: text only)."""
    if not METHODS.get(method).vector:
        return None
    return passage_unit(view, PassageSpec.parse(passages)) if passages else view


def _encode(cost: dict, unit: str) -> tuple[float | None, str | None]:
    """(seconds to encode the field's vectors of 1,000 patents, the setting): seconds per text of the setting that
    encoded most, times the field's texts per patent (a passage field's passages; measured before vectors were
    counted: one)."""
    settings = (cost.get("encode") or {}).get(unit) or []
    main = max(settings, key=lambda c: c["texts"], default=None)
    if not main or not main["texts"]:
        return None, None
    counts, docs = cost.get("vector_counts") or {}, cost.get("documents")
    per_patent = counts[unit] / docs if unit in counts and docs else 1.0
    return (main["seconds"] / main["texts"] * per_patent * PER_ENCODE,
            f"{main['device']} {main['precision']}")


def cost_row(system: dict, latency_id: str, measured_at: str, **timing) -> ServingCost:
    """A cost row of `system` (method, view, retrieval identity, index manifest: as latency results keep them)."""
    manifest = system.get("index_manifest") or {}
    unit = _unit(system["method"], system["view"], system["retrieval"].get("passages"))
    size, docs = _size(manifest, unit), (manifest.get("cost") or {}).get("documents")
    per_10k = (lambda b: b / docs * PER_INDEX / MB if b is not None and docs else None)
    encode, device = _encode(manifest.get("cost") or {}, unit) if unit else (None, None)
    return ServingCost(latency_id=latency_id, measured_at=measured_at, index_mb_per_10k=per_10k(size.index_bytes),
                       vector_mb_per_10k=per_10k(size.vector_bytes), graph_mb=per_10k(size.graph_bytes),
                       graph_source=size.graph_source, encode_s_per_1k=encode, encode_device=device,
                       index=system.get("index"), **timing)


def serving_cost(latency: Result) -> ServingCost:
    """The cost row of a stored single latency result."""
    m = latency.manifest
    first = m["passes"][0]
    client = first["client_ms"] or {}
    return cost_row(m, latency.id, m["measured_at"], concurrency=first["concurrency"], p50_ms=client.get("p50"),
                p95_ms=client.get("p95"), qps=first["qps"], busy=bool(m["busy"]))


def experiment_cost(experiment: Result, i: int, analysis) -> ServingCost:
    """The cost row of system i of a stored interleaved experiment (latency_design.Analysis of its kept rounds)."""
    m = experiment.manifest
    p50, p95 = analysis.percentile(i, 50), analysis.percentile(i, 95)
    dense = METHODS.get(m["systems"][i]["method"]).vector
    serving = analysis.percentile(i, 95, serving=True) if analysis.has_serving(i) else None
    return cost_row(m["systems"][i], experiment.id, m["measured_at"], concurrency=1, p50_ms=p50.value, p95_ms=p95.value,
                    qps=None, busy=bool(m["busy"]), p50_ci=(p50.lo, p50.hi), p95_ci=(p95.lo, p95.hi),
                    encode_p50_ms=float(np.median(analysis.encode[i])) if dense and serving else None,
                    serving_p95_ms=serving and serving.value, serving_p95_ci=serving and (serving.lo, serving.hi))


def latest_cost(corpus: str, run_id: str) -> ServingCost | None:
    """The cost row of the newest latency measured of the system whose run is `run_id` (the same retrieval
    identity: index, method, queries, depth), alone or in an interleaved experiment; None when none was."""
    def timed(system: dict) -> bool:
        return results_store.result_id(system["retrieval"], "run") == run_id

    single = [r for r in results_store.iter_results(KIND, corpus) if timed(r.manifest)]
    together = [(r, i) for r in stored(corpus)
                for i, s in enumerate(r.manifest["systems"]) if timed(s)]
    newest = max([(r, None) for r in single] + together, key=lambda x: x[0].manifest["measured_at"], default=None)
    if newest is None:
        return None
    result, i = newest
    return serving_cost(result) if i is None else experiment_cost(result, i, analyse(result)[1])


COLUMNS = ("p50 ms", "p95 ms", "query encode p50 ms", "serving p95 ms", "QPS", f"vectors MB / {PER_INDEX // 1000}k",
           f"graph MB / {PER_INDEX // 1000}k", f"index MB / {PER_INDEX // 1000}k", f"encode s / {PER_ENCODE // 1000}k",
           "busy", "latency")
_DIGITS = (1, 1, 1, 1, 1, 1, 1, 1, 1)


NOT_MEASURED = "not measured (`evalctl latency`)"


def unmeasured(run_manifest: dict) -> str:
    """What the latency column of a run without a cost row says: why it was never served, where its manifest says
    (`not_served`: an imported run), else how to measure it."""
    return run_manifest.get("not_served") or NOT_MEASURED


def cost_cells(c: ServingCost | None, text: bool = True, why_none: str = NOT_MEASURED) -> dict:
    """A system's cost columns (COLUMNS) as tables show them: rounded text ("-": not measured or not applicable; a
    latency with its CI, an estimated graph marked "est."), or the numbers (None for those) when `text` is False
    (CSV). `why_none`: what the latency column says when there is no cost row (`unmeasured`)."""
    values = ((c.p50_ms, c.p95_ms, c.encode_p50_ms, c.serving_p95_ms, c.qps, c.vector_mb_per_10k, c.graph_mb,
               c.index_mb_per_10k, c.encode_s_per_1k) if c else (None,) * len(_DIGITS))
    cells = [(f"{v:,.{d}f}" if v is not None else "-") if text else v for v, d in zip(values, _DIGITS)]
    if c is None:
        return dict(zip(COLUMNS, [*cells, "-" if text else None, why_none if text else None]))
    if text:
        for k, ci in ((0, c.p50_ci), (1, c.p95_ci), (3, c.serving_p95_ci)):
            if ci and values[k] is not None:
                cells[k] += f" [{ci[0]:,.1f}, {ci[1]:,.1f}]"
        if c.graph_source == "estimate" and values[6] is not None:
            cells[6] += " (est.)"
    return dict(zip(COLUMNS, [*cells, ("yes" if c.busy else "no") if text else c.busy, c.latency_id]))
