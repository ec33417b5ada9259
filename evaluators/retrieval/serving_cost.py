"""What serving one retrieval system costs, as one row: its latency (a stored `evalctl latency` result, the first
concurrency level), the index it is served from, and the encoding of its documents, all read from the latency
result (which keeps the index manifest, `cost` included, as it was when measured). Read by `evalctl compare
--cost` and the study report's quality-and-cost table; nothing here asks the node.

A system searches one view's vector field, or its passage field (BM25: none), of an index that holds every view's
text and vectors. Its index size is the index's store less its vector files, plus its own field's share of them (its
vectors over the index's: a passage field holds a vector per passage): what the index would take holding this
system's vectors only. Its HNSW figure is the k-NN
plugin's native memory (faiss graphs) or, for the lucene engine, the graph file the page cache reads (`vex`), the
same share (the node's stats list one graph file per extension, so only an index with one vector field has it).
Encoding: document-encoding seconds per 1,000 patents of the view's vectors, on the setting (device,
precision) that encoded most of them; query encoding is not counted, as the latency does not count it.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalctl import results_store
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.indexers.passages import PassageSpec, passage_unit
from evalctl.results_store import Result

KIND = "latency"
MB = 1e6  # decimal megabytes, as the tables say
PER_INDEX = 10_000  # index size per this many patents
PER_ENCODE = 1_000  # encode seconds per this many patents
RULES = (f"index MB per {PER_INDEX:,} patents: the index's store less its vector files, plus this system's field's "
         "share of them (its vectors over the index's; BM25: none), from the index cost measured after its last load; HNSW MB: the k-NN plugin's "
         "native memory (faiss) or the lucene graph file (an index with one vector field: the node's stats list "
         "one file per extension), the same share; encode s: document (or passage) encoding per "
         f"{PER_ENCODE:,} patents on the setting that encoded most of them (queries not counted); latency and QPS: "
         "the first concurrency level of the newest `evalctl latency` of the system")


@dataclass(frozen=True)
class ServingCost:
    latency_id: str
    measured_at: str
    concurrency: int
    p50_ms: float | None  # None: no query of the pass was answered
    p95_ms: float | None
    qps: float
    busy: bool  # the machine was busy when measured (serving_conditions.is_busy)
    index_mb_per_10k: float | None  # None: the index's cost was not recorded
    graph_mb: float | None  # None: a text-only system, or not recorded
    graph_source: str | None  # "native memory" or "graph file"
    encode_s_per_1k: float | None  # None: a text-only system, or not recorded
    encode_device: str | None


def _share(cost: dict, unit: str | None) -> tuple[float | None, float | None, str | None]:
    """(index bytes, graph bytes, graph source) of one system's part of the index (see the module docstring):
    `unit` is the vector field it searches (None: text only)."""
    if not cost.get("store_bytes"):
        return None, None, None
    # the vectors' bytes from their count; a cost measured before it was recorded: the files' (one field's)
    files = cost["vector_bytes"] if "vector_bytes" in cost else sum((cost.get("vector_files_bytes") or {}).values())
    counts = cost.get("vector_counts")  # absent from a cost measured before it was recorded: equal shares
    share = (counts.get(unit, 0) / sum(counts.values()) if counts and sum(counts.values())
             else 1 / (cost.get("vector_fields") or 1)) if unit else 0.0
    index = cost["store_bytes"] - files + files * share
    if not unit:
        return index, None, None
    if cost.get("native_memory_bytes") is not None:
        return index, cost["native_memory_bytes"] * share, "native memory"
    graph = cost.get("hnsw_graph_file_bytes")
    return index, (graph * share if graph is not None else None), "graph file" if graph is not None else None


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


def serving_cost(latency: Result) -> ServingCost:
    """The cost row of a stored latency result."""
    m = latency.manifest
    first = m["passes"][0]
    client = first["client_ms"] or {}
    cost = (m.get("index_manifest") or {}).get("cost") or {}
    vector = METHODS.get(m["method"]).vector
    passages = m["retrieval"].get("passages")
    unit = (passage_unit(m["view"], PassageSpec.parse(passages)) if passages else m["view"]) if vector else None
    index, graph, source = _share(cost, unit)
    docs = cost.get("documents")
    encode, device = _encode(cost, unit) if unit else (None, None)
    return ServingCost(
        latency_id=latency.id, measured_at=m["measured_at"], concurrency=first["concurrency"], p50_ms=client.get("p50"),
        p95_ms=client.get("p95"), qps=first["qps"], busy=bool(m["busy"]),
        index_mb_per_10k=index / docs * PER_INDEX / MB if index is not None and docs else None,
        graph_mb=graph / MB if graph is not None else None, graph_source=source, encode_s_per_1k=encode,
        encode_device=device)


def latest_latency(corpus: str, run_id: str) -> Result | None:
    """The newest stored latency measured of the system whose run is `run_id` (the same retrieval identity: index,
    method, queries, depth), or None."""
    mine = [r for r in results_store.iter_results(KIND, corpus)
            if results_store.result_id(r.manifest["retrieval"], "run") == run_id]
    return max(mine, key=lambda r: r.manifest["measured_at"], default=None)



COLUMNS = ("p50 ms", "p95 ms", "QPS", f"index MB / {PER_INDEX // 1000}k", "HNSW MB",
           f"encode s / {PER_ENCODE // 1000}k", "busy", "latency")
_DIGITS = (1, 1, 1, 1, 3, 1)


def cost_cells(c: ServingCost | None, text: bool = True) -> dict:
    """A system's cost columns (COLUMNS) as tables show them: rounded text ("-": not measured or not applicable),
    or the numbers (None for those) when `text` is False (CSV)."""
    values = (c.p50_ms, c.p95_ms, c.qps, c.index_mb_per_10k, c.graph_mb, c.encode_s_per_1k) if c else (None,) * 6
    cells = [(f"{v:,.{d}f}" if v is not None else "-") if text else v for v, d in zip(values, _DIGITS)]
    if c is None:
        return dict(zip(COLUMNS, [*cells, "-" if text else None, "not measured (`evalctl latency`)" if text else None]))
    return dict(zip(COLUMNS, [*cells, ("yes" if c.busy else "no") if text else c.busy, c.latency_id]))
