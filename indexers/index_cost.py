"""What an index costs, measured on the node after a load: store bytes per patent and per vector dimension, the
bytes of Lucene's vector files, and the HNSW graphs' native memory from the k-NN plugin's stats. Kept in the
index manifest under `cost` (never part of the index's identity: index_loader.IDENTITY names what is).

The k-NN plugin's native memory cache holds the graphs of the native engines (faiss) only: it is filled by
`_plugins/_knn/warmup/<index>` before the stats are read. Lucene-engine graphs are read from the index's own files
through the operating system's page cache, and the stats list no native memory for them: recorded as null with that
reason, beside the graph file's bytes on disk (`vex`), which is what the page cache holds of the graph.

The loader adds `encode`: per view, what its document vectors cost to encode (encode_cost.entry_cost of their
embedding cache entry), so a report reads an index's whole cost from its manifest.
"""

from __future__ import annotations

from urllib.parse import quote

from evalctl.clock import utc_now
from evalctl.indexers.encode_cost import cost_line
from evalctl.indexers.index_layout import passage_settings, vector_field, vector_units
from evalctl.indexers.passages import passage_path, passage_unit

# Lucene 10's vector files by extension: vec the vectors (float32 or int8), veq sq's quantised copy, vex the HNSW
# graph; vem, vemf, vemq their metadata.
VECTOR_FILES = ("vec", "veq", "vex", "vem", "vemf", "vemq")
_BYTES_PER_DIMENSION_NOTE = ("store_bytes_per_dimension: the primaries' whole store (text, keywords, _source and "
                             "vectors) / (vectors x dim), an approximation that charges everything to the vectors; "
                             "vector_bytes_per_dimension: the vec and veq files alone over the same count (an index "
                             "with one vector field); vectors: vector_counts, a field's documents holding one and a "
                             "passage field's passages")


def without_measurements(manifest: dict) -> dict:
    """The manifest less its `cost`: what says whether two readings are of the same index state."""
    return {k: v for k, v in manifest.items() if k != "cost"}


def _segment_bytes(stats: dict) -> int:
    """Bytes of the live segments' files: the store after the load's merge. Not `store.size_in_bytes`, which the
    node caches (index.store.stats_refresh_interval, 10 s): read just after a load, it can be the size before."""
    return sum(f["size_in_bytes"] for f in stats["segments"].get("file_sizes", {}).values())


def _warm(client, index: str) -> str | None:
    """Load the index's graphs into the k-NN plugin's cache; None, or why it could not."""
    from opensearchpy.exceptions import TransportError  # deferred: opensearchpy

    try:
        client.transport.perform_request("GET", f"/_plugins/_knn/warmup/{quote(index)}")
    except TransportError as e:
        return f"warmup refused: {e.status_code} {e.error}"
    return None


def _native_memory(client, index: str, engine: str | None, warm_problem: str | None) -> tuple[int | None, str | None]:
    """(bytes of the index's graphs in the k-NN plugin's native memory over every node, None) or (None, why not)."""
    from opensearchpy.exceptions import AuthorizationException  # deferred: opensearchpy

    try:
        nodes = client.transport.perform_request("GET", "/_plugins/_knn/stats/indices_in_cache")["nodes"]
    except AuthorizationException:
        return None, "the k-NN stats API is not readable with this user's role"
    cached = [n["indices_in_cache"][index] for n in nodes.values() if index in n.get("indices_in_cache", {})]
    if cached:
        return sum(int(c["graph_memory_usage"]) for c in cached) * 1024, None  # the stats count kilobytes
    if engine == "lucene":
        return None, ("engine lucene: the graphs are read from the index files (vex) through the page cache; the "
                      "k-NN plugin's native memory holds faiss graphs only, and its stats list none for this index")
    return None, warm_problem or f"engine {engine}: the k-NN stats list no graph of this index after the warmup"


_ONE_FILE_PER_EXTENSION = ("the node's segment stats list one file per extension and each vector field has files of "
                           "its own: vector_bytes counts them from vector_counts instead")


def vector_bytes(counts: dict[str, int], dim: int, manifest: dict) -> int:
    """Bytes of the index's vectors in Lucene's files, from their count: each vector's components (int8 in a byte
    index, else float32) and, with `encoder: sq`, its 7-bit copy (a byte a component and a 4-byte correction)."""
    n = sum(counts.values())
    per = dim * (1 if manifest.get("data_type") == "byte" else 4)
    return n * (per + (dim + 4 if manifest.get("encoder") == "sq" else 0))


def vector_counts(client, index: str, manifest: dict) -> dict[str, int]:
    """Vectors per field unit (index_layout.field_units): a top-level field's documents that hold one, a passage
    field's passages. One request."""
    body = {"size": 0, "track_total_hits": False, "aggs": {
        **{u: {"filter": {"exists": {"field": vector_field(u)}}} for u in vector_units(manifest)},
        **{passage_unit(v, p): {"nested": {"path": passage_path(v, p)}} for v, p in passage_settings(manifest)}}}
    aggs = client.search(index=index, body=body)["aggregations"]
    return {u: int(a["doc_count"]) for u, a in aggs.items()}


def measure_index_cost(client, index: str, manifest: dict) -> dict:
    """The `cost` section of an index manifest, measured now (after the load's refresh and merge)."""
    dim = manifest.get("dim")
    warm_problem = _warm(client, index) if dim else None
    stats = client.indices.stats(index=index, metric="docs,store,segments",
                                 params={"include_segment_file_sizes": "true"})["indices"][index]
    primaries = stats["primaries"]
    # patents: the stats' docs count Lucene documents, each passage of a nested field among them
    docs, store = client.count(index=index)["count"], _segment_bytes(primaries)
    cost = {"measured_at": utc_now(), "documents": docs, "store_bytes": store,
            "store_bytes_with_replicas": _segment_bytes(stats["total"]),
            "store_bytes_per_patent": round(store / docs, 1) if docs else None,
            "layout": {k: manifest.get(k) for k in ("engine", "encoder", "data_type", "vectors_in_source")}}
    if not dim:
        return cost
    fields = len(vector_units(manifest))  # top-level fields; passage vectors (nested) are in the files too
    counts = vector_counts(client, index, manifest)
    components = sum(counts.values()) * dim
    files = primaries["segments"].get("file_sizes", {})
    # The stats list one file per extension, while each vector field (and passage field) has files of its own
    # (_<seg>_Lucene99HnswVectorsFormat_<n>.vec): with more than one, the figures would be one field's.
    one_field = sum(1 for n in counts.values() if n) <= 1
    vector_files = {ext: files[ext]["size_in_bytes"] for ext in VECTOR_FILES if ext in files} if one_field else None
    native, why = _native_memory(client, index, manifest.get("engine"), warm_problem)
    cost.update({
        "vector_fields": fields, "vector_counts": counts, "dim": dim,
        "vector_bytes": vector_bytes(counts, dim, manifest),
        "store_bytes_per_dimension": round(store / components, 3) if components else None,
        "vector_bytes_per_dimension": round((vector_files.get("vec", 0) + vector_files.get("veq", 0)) / components, 3)
        if components and vector_files is not None else None,
        "vector_files_bytes": vector_files,
        "hnsw_graph_file_bytes": vector_files.get("vex") if vector_files is not None else None,
        **({} if one_field else {"vector_files_null_because": _ONE_FILE_PER_EXTENSION}),
        "warmed": warm_problem is None,
        "native_memory_bytes": native,
        **({"native_memory_null_because": why} if native is None else {}),
        "note": _BYTES_PER_DIMENSION_NOTE,
    })
    return cost


def cost_lines(cost: dict) -> list[str]:
    """An index manifest's cost section for `evalctl index status`."""
    if not cost:
        return ["cost: not measured (loaded before index cost was recorded; a load that adds documents measures it)"]
    lines = [f"cost ({cost['measured_at']}): {cost['documents']} documents, store {cost['store_bytes']:,} B "
             f"({cost['store_bytes_per_patent']} B per patent)"]
    if cost.get("dim"):
        native = (f"{cost['native_memory_bytes']:,} B" if cost["native_memory_bytes"] is not None
                  else f"none recorded ({cost['native_memory_null_because']})")
        files = (f"{cost['vector_bytes_per_dimension']} in the vector files; HNSW graph file "
                 f"{cost['hnsw_graph_file_bytes']} B" if cost.get("vector_files_bytes") is not None
                 else f"vector files not listed ({cost.get('vector_files_null_because', 'not measured')})")
        lines.append(f"  {cost['vector_fields']} vector field(s) x {cost['dim']} dims: "
                     f"{cost['store_bytes_per_dimension']} store B per dimension, {files}; native memory {native}")
    for view, settings in cost.get("encode", {}).items():
        lines += [f"  encode {view}: {cost_line(c)}" for c in settings] or [f"  encode {view}: no measurement"]
    return lines
