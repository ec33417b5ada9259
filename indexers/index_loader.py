"""`evalctl index`: put a corpus's view texts and one model's vectors into OpenSearch.

Idempotent and resumable: document ids are patent ids, every document records the views it carries
(`loaded_views`), and a rerun loads only documents that lack one of the index's views. Vectors come
through the embedding cache, so a rerun after a crash or a dead node encodes nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tqdm import tqdm

from evalctl.clock import utc_now
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput
from evalctl.gc_tuning import long_lived_frozen
from evalctl.indexers.byte_vectors import is_byte, max_abs, quantisation, stored
from evalctl.indexers.embedding_cache import EmbeddingCache
from evalctl.indexers.encode_cost import entry_cost
from evalctl.indexers.encode_options import IMPORTED, INSTALLED, EncodeOptions
from evalctl.indexers.encoder import LazyEncoder, cache_key, encoding_versions, get_or_encode
from evalctl.indexers.endpoints import shown_url
from evalctl.indexers.index_cost import measure_index_cost
from evalctl.indexers.index_layout import (
    BM25_ONLY, CODE_FIELDS, FACETS, LABEL_TASKS, IndexSettings, corpus_alias, facet_manifest, field_unit, field_units,
    index_body, index_name, index_prefix, load_index_settings, passage_properties, passage_settings, record_codes,
    record_facets, task_units, task_vectors, text_field, vector_field, vector_properties, view_properties,
)
from evalctl.indexers.model_loader import require_weights
from evalctl.indexers import view_tokens
from evalctl.indexers.passages import (PassageError, PassageSpec, check_window, content_limit, passage_path,
                                       passage_spans, passage_unit)
from evalctl.indexers.vectors_import import ImportedVectors, imported_for_index, require_covered
from evalctl.opensearch.cluster_info import (IndexUnavailable, require_available, require_engine, simd_vectors,
                                             snapshot_read, wait_until_settled)
from evalctl.provenance import code_version

# Manifest keys that must match for new documents to join an existing index.
IDENTITY = ("corpus_hash", "model", "hf_id", "revision", "prompt_variant", "document_prompt", "dim",
            "similarity", "engine", "encoder", "hnsw", "bm25", "precision", "encoding_versions", "shards")
# Manifest keys that must also match for documents to join, but change no search result (so they are not part
# of a result's index identity): the code-prefix keyword fields every document carries, and whether _source
# holds the vectors (fixed by the mapping).
LAYOUT = ("facets", "vectors_in_source")
# Identity keys of byte vectors (evalctl.indexers.byte_vectors): compared on every load like IDENTITY, but in a
# result's index identity only for a byte index, so the runs of every float index keep the ids they were stored under.
BYTE_IDENTITY = ("data_type", "byte_quantisation")
# A model index's manifest written before precision was recorded: its vectors were float32, of unknown package
# versions (no encoding_versions; see evalctl.indexers.embedding_cache.CacheKey).
_BEFORE_PRECISION = {"precision": "float32"}
_BEFORE_SOURCE_SETTING = {"vectors_in_source": True}  # made before vectors_in_source: they were in _source
_BEFORE_DATA_TYPE = {"data_type": "float"}  # made before data_type: float vectors


def result_identity(manifest: dict, extra: tuple[str, ...] = ()) -> dict:
    """What of an index manifest identifies the results made from the index (IDENTITY and the `extra` keys,
    and for a byte index BYTE_IDENTITY)."""
    keys = (*IDENTITY, *extra, *(BYTE_IDENTITY if is_byte(manifest) else ()))
    return {k: manifest.get(k) for k in keys}


class IndexMismatch(BadInput, ValueError):
    """The target index was built from another corpus, model or setting: refuse, never merge."""


@dataclass
class IndexReport:
    index: str
    n_corpus: int
    n_loaded: int = 0  # documents this load created (or rewrote, where a view was missing)
    # documents already there: found at the start, or created meanwhile by another load of the same index
    # (its `create` refused 409 here), or by an earlier send of the same request after a lost connection
    n_already: int = 0
    missing_view: dict[str, int] = field(default_factory=dict)  # view -> records lacking its fields
    failed: list[str] = field(default_factory=list)
    # of the refusals, those whose cause evalctl names (refusal_cause): the setting or vector, not the record
    explained: int = 0
    seconds: float = 0.0
    segments: int | None = None  # segments of the index's primaries after the load (and merge)
    segments_loaded: int | None = None  # the same before the merge: 1 means no merge rebuilt the graph
    merge_seconds: float = 0.0  # time of the force-merge to one segment per shard
    task_vectors: dict = field(default_factory=dict)  # the index's task fields: {task: {"prompt", "views"}}
    warnings: list[str] = field(default_factory=list)  # what the load did but the user may not expect

    @property
    def docs_per_s(self) -> float:
        return self.n_loaded / self.seconds if self.seconds else 0.0


def index_manifest(corpus, model, views: list[str], settings: IndexSettings, *, variant: str | None = None,
                   tasks: dict[str, dict] | None = None,
                   passages: Mapping[str, Sequence[PassageSpec]] | None = None) -> dict:
    """`tasks`: the task fields ({task: {"prompt", "views"}}, see index_layout.task_vectors); the key is
    absent without any, so indexes of models whose task prompts equal the document prompt are as before.
    `passages`: the passage settings per view ({view: [setting names]}; absent without any)."""
    passages = {v: sorted(p.name for p in ps) for v, ps in sorted((passages or {}).items()) if ps}
    prompt = model.prompt_for("document", task_type="retrieval", variant=variant) if model else None
    return {
        "evalctl_index": 1,
        "index_prefix": index_prefix(),
        "corpus": corpus.name,
        "corpus_hash": corpus.manifest["content_hash"],
        "model": model.id if model else BM25_ONLY,
        "hf_id": model.hf_id if model else None,
        "revision": model.revision if model else None,
        "prompt_variant": (variant or model.default_variant) if model else None,
        "document_prompt": prompt,
        "dim": model.dim if model else None,
        "similarity": model.similarity if model else None,
        "views": sorted(views),
        "engine": settings.engine if model else None,
        "encoder": settings.encoder if model else None,
        "data_type": settings.data_type if model else None,
        "vectors_in_source": settings.vectors_in_source if model else None,
        "hnsw": vars(settings.hnsw) if model else None,
        "bm25": vars(settings.bm25),
        "shards": settings.shards,
        "replicas": settings.replicas,
        "facets": facet_manifest(),
        **({"task_vectors": tasks} if tasks else {}),
        **({"passages": passages} if passages else {}),
        **({"endpoint": shown_url(model)} if model and model.endpoint else {}),  # where a served model answered
        "code_version": code_version(),
        "created_at": utc_now(),
    }


def read_manifest(client, index: str) -> dict | None:
    """The index's manifest (its mapping's _meta), None when there is no such index; one request."""
    def read():
        mapping = client.indices.get_mapping(index=index, ignore=404)
        if index not in mapping:
            return None
        meta = mapping[index]["mappings"].get("_meta", {})
        if meta and "shards" not in meta:  # made before the manifest recorded it: the index itself knows
            meta["shards"] = shard_count(client, index)
        return {**_BEFORE_PRECISION, **_BEFORE_SOURCE_SETTING, **_BEFORE_DATA_TYPE, **meta} if meta.get("dim") else meta

    return snapshot_read(("manifest", index), read)


def shard_count(client, index: str) -> int:
    settings = client.indices.get_settings(index=index, name="index.number_of_shards")
    return int(settings[index]["settings"]["index"]["number_of_shards"])


def ensure_index(client, index: str, meta: dict, settings: IndexSettings, alias: str) -> dict:
    """Create the index, or check that it holds the same corpus/model/settings and add new views and task
    fields. Returns the index's manifest: every view and task field it has now."""
    if meta["dim"]:  # before any vector field exists: a node without the engine may die creating one
        require_engine(settings.engine)
    from opensearchpy.exceptions import RequestError  # opensearchpy: plans and reports import this module

    existing = read_manifest(client, index)
    if existing is None:
        try:
            client.indices.create(index=index, body=index_body(meta["views"], meta["dim"], meta["similarity"],
                                                               settings, meta))
        except RequestError as e:
            if e.error != "resource_already_exists_exception":
                raise
            # Another evalctl created it between our check and create: compare with its manifest below.
            existing = read_manifest(client, index)
        client.indices.put_alias(index=index, name=alias)
        if existing is None:
            return meta
    had, asked = existing.get("task_vectors", {}), meta.get("task_vectors", {})
    diff = [(k, existing.get(k), meta.get(k)) for k in (*IDENTITY, *BYTE_IDENTITY, *LAYOUT)
            if existing.get(k) != meta.get(k)]
    diff += [(f"task_vectors.{t}.prompt", had[t]["prompt"], asked[t]["prompt"])
             for t in sorted(set(had) & set(asked)) if had[t]["prompt"] != asked[t]["prompt"]]
    if diff:
        lines = "\n".join(f"  {k}: index has {old!r}, this load has {new!r}" for k, old, new in diff)
        if existing.get("shards") != meta["shards"]:  # the one difference a load option can undo
            lines += (f"\n  (an index's shard count is fixed when it is made: load it with --shards "
                      f"{existing.get('shards')}, or rebuild it with {meta['shards']})")
        if existing.get("facets") != meta["facets"]:
            lines += (f"\n  (an index made before the code-prefix keyword fields {', '.join(FACETS)}, or with others: "
                      f"its documents lack what Dashboards' charts and filters count, and documents added now would "
                      f"carry it; rebuild it)")
        raise IndexMismatch(
            f"index {index} was built from different data or settings; refusing to merge:\n{lines}\n"
            f"Delete it (evalctl index delete {index}) or load under another corpus name."
        )
    views = sorted(set(existing["views"]) | set(meta["views"]))
    tasks = {t: {"prompt": (had.get(t) or asked[t])["prompt"],
                 "views": sorted({*had.get(t, {}).get("views", ()), *asked.get(t, {}).get("views", ())})}
             for t in sorted({*had, *asked})}
    had_passages, asked_passages = existing.get("passages", {}), meta.get("passages", {})
    passages = {v: sorted({*had_passages.get(v, ()), *asked_passages.get(v, ())})
                for v in sorted({*had_passages, *asked_passages})}
    # replicas are a live setting (_restore applies them at the end of the load): recorded, never refused
    merged = {**existing, "views": views, "replicas": settings.replicas, **({"task_vectors": tasks} if tasks else {}),
              **({"passages": passages} if passages else {})}
    new_views = sorted(set(meta["views"]) - set(existing["views"]))
    new_units = sorted({field_unit(v, t) for v, t in task_units(merged)} - {field_unit(v, t) for v, t in task_units(existing)})
    new_passages = sorted(set(passage_settings(merged)) - set(passage_settings(existing)))
    if new_views or new_units or new_passages or existing.get("replicas") != settings.replicas:
        props = view_properties(new_views, meta["dim"], meta["similarity"], settings)
        props.update(vector_properties(new_units, meta["dim"], meta["similarity"], settings))
        if new_passages:
            props.update(passage_properties(new_passages, meta["dim"], meta["similarity"], settings))
        client.indices.put_mapping(index=index, body={"properties": props, "_meta": merged})
    return merged


def _loaded_query(client, index: str, views: list[str]) -> dict:
    client.indices.refresh(index=index)  # a load killed mid-way left refresh off: make its documents visible
    return {"bool": {"filter": [{"term": {"loaded_views": v}} for v in views]}}


def loaded_ids(client, index: str, views: list[str]) -> tuple[set[str], set[str]]:
    """(ids of documents that already carry every one of `views` (views or task fields: field_units), ids of
    documents in the index without all of them)."""
    from opensearchpy import helpers  # deferred: opensearchpy

    query = {"query": _loaded_query(client, index, []), "_source": ["loaded_views"]}
    done, partial = set(), set()
    for hit in helpers.scan(client, index=index, query=query, size=5000):
        (done if set(views) <= set(hit["_source"].get("loaded_views", ())) else partial).add(hit["_id"])
    return done, partial


def loaded_count(client, index: str, views: list[str]) -> int:
    """How many documents carry every one of `views`: a count, for checks that need no ids."""
    return client.count(index=index, body={"query": _loaded_query(client, index, views)})["count"]


def _relax(client, index: str) -> None:
    """Refresh off while loading (restored by _restore, even after a failed load). Replicas stay as configured:
    dropped for the load, a node lost mid-load took the only copy of its shards, and the load waited on them."""
    client.indices.put_settings(index=index, body={"index": {"refresh_interval": "-1"}})


@dataclass(frozen=True)
class ShardCopy:
    shard: str
    primary: bool
    segments: int
    deleted: int  # deleted documents still in its segments: they count in BM25's statistics until merged away


def shard_copies(client, index: str) -> list[ShardCopy]:
    """Every searchable copy of every shard of the index, primaries and replicas."""
    shards = client.indices.segments(index=index)["indices"][index]["shards"]
    return [ShardCopy(shard, c["routing"]["primary"], len(c["segments"]),
                      sum(seg.get("deleted_docs", 0) for seg in c["segments"].values()))
            for shard, copies in shards.items() for c in copies]


def segment_count(client, index: str) -> int:
    """Searchable segments of the index's primary shards."""
    return sum(c.segments for c in shard_copies(client, index) if c.primary)


# A force-merge of a large index takes minutes (a 113k x 384-d graph is rebuilt whole): the call waits for it.
MERGE_TIMEOUT_S = 3600
# A copy that was still recovering when the merge was sent keeps its own segments: merged again, a few times.
MERGE_ROUNDS = 3


def _merge_segments(client, index: str, settings: IndexSettings) -> tuple[int, float]:
    """(segments after, seconds): force-merged to one segment per shard copy where the settings ask for it, so
    a query searches one HNSW graph (several segments are searched one by one, and where their boundaries fall
    depends on flush timing), and every copy holds no deleted documents (a chunk sent again after a lost node
    or a killed load leaves them; BM25 reads its statistics from whichever copy answers). Lucene 10.3's merged
    graph is not the same on every merge of the same segments (docs/index-layout.md): a load that ends in one
    segment is not merged, and only such builds can give the same k-NN hits (docs/index-layout.md)."""
    t0 = time.perf_counter()
    for _ in range(MERGE_ROUNDS if settings.merge_to_one_segment else 0):
        # a copy still recovering (a replica rebuilt after a lost node) misses a merge sent now
        wait_until_settled(client, index)
        if all(c.segments <= 1 and not c.deleted for c in shard_copies(client, index)):
            break
        client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=MERGE_TIMEOUT_S)
        client.indices.refresh(index=index)
    return segment_count(client, index), time.perf_counter() - t0


def unplaced_replicas(client, index: str, replicas: int) -> str | None:
    """Why `replicas` copies of each shard cannot be placed (fewer data nodes than copies), or None (they
    can, or a role that may not read cluster health leaves it unknown)."""
    from opensearchpy.exceptions import AuthorizationException  # deferred: opensearchpy

    if not replicas:
        return None
    try:
        health = client.cluster.health(index=index)
    except AuthorizationException:
        return None
    nodes = health["number_of_data_nodes"]
    if replicas < nodes:
        return None
    return (f"replicas {replicas} (--replicas or configs/index.yaml): OpenSearch keeps a replica only on another "
            f"node than its primary, and the cluster has {nodes} data node{'s' if nodes > 1 else ''}, so "
            f"{health['unassigned_shards']} shard cop{'ies stay' if health['unassigned_shards'] != 1 else 'y stays'} "
            f"unassigned and {index} is {health['status']} (searches and loads work, on the primaries alone). "
            f"Index with --replicas {max(nodes - 1, 0)} (the most this cluster places), or add nodes.")


def _restore(client, index: str, settings: IndexSettings, refresh: bool = True) -> None:
    # Restored from the config, not from the index: a load killed mid-way left "-1" behind. A red index is not
    # refreshed: the refresh waits on the lost shard until the client gives up (two minutes for nothing).
    client.indices.put_settings(index=index, body={"index": {"refresh_interval": None,
                                                             "number_of_replicas": settings.replicas}})
    if refresh:
        client.indices.refresh(index=index)


# The record columns `document` reads besides the views' texts: the loading pass reads only these
# (no citations, aliases or unused text fields).
DOCUMENT_COLUMNS = ("family_id", "jurisdiction", "kind", *CODE_FIELDS, "title", "publication_date")


def document(record, texts: dict[str, str], vectors: dict, views: list[str],
             passages: dict[str, list[dict]] | None = None) -> dict:
    """`vectors` and `views` by field unit: a view, or a view's task field (index_layout.field_unit); `passages`
    by nested field (passages.passage_path): each passage's ord, offsets, text and vector."""
    doc = {
        "doc_id": record.id,
        "family_id": record.family,
        "jurisdiction": record.jurisdiction,
        "kind": record.kind,
        **record_codes(record),
        **record_facets(record),
        "title": record.title,
        "loaded_views": views,
    }
    if record.publication_date:
        doc["pub_date"] = record.publication_date.isoformat()
    for v, text in texts.items():
        doc[text_field(v)] = text
    for unit, vec in vectors.items():
        doc[vector_field(unit)] = vec
    doc.update(passages or {})
    return {k: val for k, val in doc.items() if val is not None}


def _chunks(items: Iterable, n: int, first: int | None = None) -> Iterator[list]:
    chunk = []
    size = first or n
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk, size = [], n
    if chunk:
        yield chunk


def _in_background(chunks: Iterator, depth: int = 2) -> Iterator:
    """Run a producer in a thread, so preparing documents overlaps with the server indexing the previous
    request; yields what it produces in order and re-raises the producer's errors."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        q.put(chunk, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # handed to the consumer
            q.put(e)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        while (item := q.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=30)


def bulk_requests(lines: Iterable[tuple[str, bytes]], max_docs: int, max_bytes: int
                  ) -> Iterator[list[tuple[str, bytes]]]:
    """(doc id, action + source ndjson) grouped into `_bulk` requests of at most max_docs documents and
    max_bytes bytes (a single larger document goes alone)."""
    group: list[tuple[str, bytes]] = []
    size = 0
    for doc_id, line in lines:
        if group and size + len(line) > max_bytes:
            yield group
            group, size = [], 0
        group.append((doc_id, line))
        size += len(line)
        if len(group) == max_docs:  # now, not when the next line arrives: that may be a whole chunk later
            yield group
            group, size = [], 0
    if group:
        yield group


# took, and per item its status and error only: a response of 500 items parses in a fraction of the time.
_BULK_FILTER = "took,errors,items.*.status,items.*.error,items.*._index"


def _created_before(op: dict) -> bool:
    """A `create` refused because the document is there: an earlier send of the same chunk wrote it."""
    return op["status"] == 409 and (op.get("error") or {}).get("type") == "version_conflict_engine_exception"


_ZERO_VECTOR = re.compile(r"zero[ -]vector[^'\"}]*", re.IGNORECASE)


def refusal_cause(error, line: bytes) -> str | None:
    """What made the node refuse a document, where it is not the record's text: a passage setting that cuts it into
    more passages than a document may hold, or a vector cosine cannot score. None: the node's own words stand."""
    reason = str(error)  # the cause may stand in a caused_by of the node's error, not its own reason
    if "nested documents has exceeded the allowed limit" in reason:
        source = json.loads(line.split(b"\n")[1])
        counts = {k: len(v) for k, v in source.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
        limit = reason.split("limit of [")[1].split("]")[0] if "limit of [" in reason else "?"
        worst = max(counts, key=counts.get) if counts else "?"
        return (f"its passages ({counts.get(worst, '?')} in {worst}, {sum(counts.values())} in all) are more than the "
                f"{limit} nested objects a document may hold (index.mapping.nested_objects.limit): the passage setting "
                "cuts this text too fine; use a longer window or stride for it")
    if zero := _ZERO_VECTOR.search(reason):
        return ("a vector of norm 0, which its space cannot score; the model or server gave it for this text "
                f"({zero.group()})")
    return None


def send_bulk(client, request: list[tuple[str, bytes]], bulk, report: "IndexReport") -> None:
    """Post one pre-built `_bulk` request; documents refused with 429 (queue full) are sent again after
    a backoff that doubles from bulk.initial_backoff, up to bulk.max_retries times (as opensearch-py's
    streaming_bulk does); other refusals are recorded in report.failed with the document id. A document
    refused because its shard has no active primary (503, after the node's wait: bulk.timeout) stops the load
    with the index named red and its shards (IndexUnavailable) when no copy is left; else it is sent again.
    A `create` refused because the document is there counts as already present, not loaded: another load
    of the index wrote it (two loads started together each send every document; each creates some)."""
    pending, backoff = request, bulk.initial_backoff
    # opensearch-py takes a `timeout` param for its own read timeout unless request_timeout is given: with both,
    # the node gets its wait and the request keeps the client's own read timeout
    params = {"filter_path": _BULK_FILTER, "timeout": bulk.timeout,
              "request_timeout": client.transport.kwargs["timeout"]}
    for attempt in range(bulk.max_retries + 1):
        resp = client.bulk(body=b"".join(line for _, line in pending), params=params)
        if not resp.get("errors"):
            report.n_loaded += len(pending)
            return
        retry = []
        for (doc_id, line), item in zip(pending, resp["items"]):
            op = next(iter(item.values()))
            if op["status"] < 300:
                report.n_loaded += 1
            elif _created_before(op):
                report.n_already += 1
            elif op["status"] == 429 and attempt < bulk.max_retries:
                retry.append((doc_id, line))
            elif op["status"] == 503 and attempt < bulk.max_retries:
                # every later chunk would wait its minute on that shard
                require_available(client, op["_index"], done="the documents loaded so far are kept and a rerun "
                                                             "of the same command loads the rest")
                retry.append((doc_id, line))
            else:
                cause = refusal_cause(op.get("error"), line)
                report.explained += cause is not None
                report.failed.append(f"{doc_id}: {cause or op.get('error')}")
        if not retry:
            return
        time.sleep(min(backoff, bulk.max_backoff))
        backoff *= 2
        pending = retry


def _vector_fields(manifest: dict) -> dict[str, list[tuple[str, str | None]]]:
    """Each view's vector fields as (unit, task), the document vectors first (task None)."""
    fields = {v: [(v, None)] for v in manifest["views"]}
    for v, t in task_units(manifest):
        fields[v].append((field_unit(v, t), t))
    return fields


def _dim_proven(model, views, variant: str | None, prompt: str | None) -> bool:
    """Every view already has vectors of this model, revision, prompt and dim in the embedding cache, which
    stores no vector of another dim: the weights gave the spec's dim, no need to load them to check (a
    12B model takes minutes to load; re-indexing after a lost node then loads nothing)."""
    return all(len(EmbeddingCache(cache_key(model, "document", v.name, variant, prompt=prompt))) for v in views)


@dataclass(frozen=True)
class IndexOptions:
    """How a load runs. `encoding`: the prompt variant, device and batch size of the vectors (each field's prompt and
    the cache entry are the index's own). `passages` ({view: settings}, views among those given): each a nested
    field (indexers.passages). `label_tasks` ({task: views}; default every label task on every view given) adds a
    task field per view where the model's prompt for that task differs from its document prompt ({} adds none)."""

    encoding: EncodeOptions = EncodeOptions()
    settings: IndexSettings | None = None  # default: configs/index_settings.yaml
    chunk_docs: int = 2000
    label_tasks: dict[str, list[str]] | None = None
    passages: Mapping[str, Sequence[PassageSpec]] | None = None
    progress: bool = True


def index_corpus(client, corpus, views, model=None, **options) -> IndexReport:
    """Load `corpus` (text of every view, and `model`'s vectors when given) into its index (`options`: IndexOptions'
    fields). A load that fails (or whose every document is refused) after creating the index, before any document
    is in it, removes that index: what is left is the index as it was, or none."""
    name = index_name(corpus.name, model.id if model else None)
    existed = client.indices.exists(index=name)
    try:
        report = _load_corpus(client, corpus, views, model, IndexOptions(**options))
    except IndexUnavailable:
        raise  # a red index stays as the node holds it (its count and refresh would wait on the lost shard)
    except BaseException:
        if not existed:
            _remove_if_empty(client, name)
        raise
    if not existed and report.failed and not report.n_loaded and not report.n_already:
        _remove_if_empty(client, name)
    return report


def _remove_if_empty(client, name: str) -> None:
    with contextlib.suppress(Exception):  # the node may be what failed: the load's own error is the news
        client.indices.refresh(index=name)
        if client.count(index=name)["count"] == 0:
            client.indices.delete(index=name)


@dataclass
class _Load:
    """What the steps of one _load_corpus share. Set in order: the inputs; the vectors' source, passages, manifest
    and encoder (before the index exists); then, from _open, the index's own manifest and what it already holds."""
    client: Any
    corpus: Any
    views: list  # the views asked for
    model: Any  # the ModelSpec, or None: text only
    settings: IndexSettings
    variant: str | None
    name: str = field(init=False)
    prompt: str | None = field(init=False)  # the document prompt
    by_name: dict = field(init=False)  # view name -> view: those asked for, then every view of the index
    imported: ImportedVectors | None = None  # vectors of `evalctl vectors import`, or None: encoded here
    passages: dict = field(default_factory=dict)  # {view: passage settings}
    encoder: LazyEncoder | None = None
    meta: dict = field(default_factory=dict)  # this load's manifest (index_manifest)
    merged: dict = field(default_factory=dict)  # the index's manifest, this load's views and fields added
    all_views: list = field(default_factory=list)
    units: list = field(default_factory=list)  # every view and task field of the index (field_units)
    fields: dict = field(default_factory=dict)  # view -> its vector fields (_vector_fields)
    done: set = field(default_factory=set)  # ids of documents that carry every unit
    partial: set = field(default_factory=set)  # ids of documents that lack some
    dumps: Any = None  # the client's serializer
    cutters: dict = field(default_factory=dict)  # passage setting -> the tokenizer that cuts it (checked on first use)

    def __post_init__(self):
        self.name = index_name(self.corpus.name, self.model.id if self.model else None)
        model = self.model
        self.prompt = model.prompt_for("document", task_type="retrieval", variant=self.variant) if model else None
        self.by_name = {v.name: v for v in self.views}

    @property
    def versions(self) -> str:
        return IMPORTED if self.imported else INSTALLED

    def render(self, chunk: list, names: list[str]) -> dict[str, dict[str, str]]:
        """{view: {id: text}} of the records of `chunk` that render each view."""
        return {v: {r.id: t for r in chunk if (t := self.by_name[v].render(r))} for v in names}

    def encode(self, texts: dict[str, dict[str, str]], fields: dict) -> dict[str, tuple[list[str], object]]:
        """{unit: (ids, vectors)} of the rendered texts, from the embedding cache or the model."""
        out = {}
        for v, by_id in texts.items():
            ids = list(by_id)
            for unit, task in fields[v] if ids else ():
                out[unit] = (ids, get_or_encode(self.model, "document", v, ids, list(by_id.values()),
                                                variant=self.variant, task_type=task or "retrieval",
                                                encoder=self.encoder, progress=False, versions=self.versions,
                                                corpus=self.corpus.name))
        return out

    def cutter(self, p: PassageSpec):
        """The tokenizer that cuts passage setting `p`; its window is checked against the model on first use."""
        if p not in self.cutters:
            tokenizer = self.encoder.tokenizer()
            check_window(p, content_limit(self.model.max_seq_length, tokenizer, self.prompt or ""), self.model.id)
            self.cutters[p] = tokenizer
        return self.cutters[p]

    def passage_lists(self, texts: dict[str, dict[str, str]]) -> dict[str, dict[str, list[dict]]]:
        """{doc id: {nested field: passages}} of the rendered texts, for every passage field of the index."""
        out: dict[str, dict[str, list[dict]]] = defaultdict(dict)
        for v, p in passage_settings(self.merged):
            by_id = texts.get(v, {})
            if not by_id:
                continue
            spans = {i: passage_spans(t, self.cutter(p), p) for i, t in by_id.items()}
            keys = [(i, n) for i, ss in spans.items() for n in range(len(ss))]
            arr = get_or_encode(self.model, "document", passage_unit(v, p), [f"{i}#{n}" for i, n in keys],
                                [by_id[i][slice(*spans[i][n])] for i, n in keys], variant=self.variant,
                                encoder=self.encoder, progress=False, versions=self.versions,
                                corpus=self.corpus.name)
            vectors = stored(arr, self.merged)
            for (i, n), vec in zip(keys, vectors):
                start, end = spans[i][n]
                out[i].setdefault(passage_path(v, p), []).append(
                    {"ord": n, "start": start, "end": end, "text": by_id[i][start:end], "vec": vec})
        return out


def _load_corpus(client, corpus, views, model, options: IndexOptions) -> IndexReport:
    o = options
    load = _Load(client, corpus, views, model, o.settings or load_index_settings(), o.encoding.variant)
    label_tasks = {t: [v.name for v in views] for t in LABEL_TASKS} if o.label_tasks is None else o.label_tasks
    tasks = task_vectors(model, load.variant, label_tasks) if model else {}
    _vectors_source(load, tasks)
    load.passages = _checked_passages(load, o.passages)
    _prepare_manifest(load, tasks, o.encoding)
    if model is not None and load.settings.data_type == "byte":
        load.meta["byte_quantisation"] = _byte_quantisation(load, o.chunk_docs)
    report = _open(load)
    _record_view_tokens(load)
    _send_all(load, report, o.chunk_docs, o.progress)
    _finish(load, report)
    return report


def _vectors_source(load: _Load, tasks: dict[str, dict]) -> None:
    """Vectors brought in by `evalctl vectors import` where the cache has them (evalctl.indexers.vectors_import),
    else the model's, whose weights must be there."""
    model, views = load.model, load.views
    load.imported = imported_for_index(model, {v.name: (v.name, load.prompt) for v in views} | {
        field_unit(v, t): (v, tv["prompt"]) for t, tv in tasks.items() for v in tv["views"]},
        load.variant, read_manifest(load.client, load.name), load.corpus.name) if model else None
    if load.imported is not None:
        require_covered(model, load.corpus, views, load.imported, load.variant)
    elif model is not None:  # before the index exists: missing weights must not leave an empty index behind
        require_weights(model)


def _checked_passages(load: _Load, passages: Mapping[str, Sequence[PassageSpec]] | None) -> dict:
    """The passage settings asked for, by view, views without any left out; refused where they cannot be made."""
    passages = {v: ps for v, ps in (passages or {}).items() if ps}
    if unknown := sorted(set(passages) - {v.name for v in load.views}):
        raise PassageError(f"passages of view {unknown[0]}, which this load does not index (views: "
                           f"{', '.join(v.name for v in load.views)})")
    if passages and load.model is None:
        raise PassageError("passages need a model: they are vectors of the model's tokens (--model)")
    if passages and load.imported is not None:
        raise PassageError(f"passages of {load.model.id}'s vectors imported from elsewhere (evalctl vectors import): "
                           "the passages would be encoded here, beside vectors made elsewhere; index passages with "
                           "vectors encoded here")
    return passages


def _prepare_manifest(load: _Load, tasks: dict[str, dict], encoding: EncodeOptions) -> None:
    """This load's manifest and encoder, checked against the model before any index exists."""
    model, imported, prompt = load.model, load.imported, load.prompt
    meta = load.meta = index_manifest(load.corpus, model, [v.name for v in load.views], load.settings,
                                      variant=load.variant, tasks=tasks, passages=load.passages)
    encoder = load.encoder = LazyEncoder(model, device=encoding.device, batch_size=encoding.batch_size,
                                         **({"precision": imported.precision} if imported else {})) if model else None
    if encoder is not None:  # vectors of another precision or package versions are other vectors
        meta.update(precision=encoder.precision,
                    encoding_versions=IMPORTED if imported else encoding_versions(model, encoder.precision))
    if imported is not None:
        meta["vectors_import"] = imported.provenance
    # every window against the model before the mapping or _meta names it: a refused setting leaves the index as it was
    for p in dict.fromkeys(p for ps in load.passages.values() for p in ps):
        check_window(p, content_limit(model.max_seq_length, encoder.tokenizer(), prompt or ""), model.id)
    if imported is None and encoder is not None and read_manifest(load.client, load.name) is None \
            and not _dim_proven(model, load.views, load.variant, prompt):
        encoder.check_dim()  # a spec whose dim disagrees with its model fails here, before an empty index exists


def _byte_quantisation(load: _Load, chunk_docs: int):
    """A byte index's quantisation: the index's own rule, or for a new index the scale of every vector of this
    first load (encoded, and cached, first). A float index is refused by ensure_index, naming data_type."""
    existing = read_manifest(load.client, load.name)
    if existing is not None:
        return existing.get("byte_quantisation")
    columns = {c for v in load.views for c in v.columns}
    fields = _vector_fields(load.meta)
    return quantisation(max(
        (max_abs(arr for _, arr in load.encode(load.render(chunk, load.meta["views"]), fields).values())
         for chunk in _chunks(load.corpus.records(columns), chunk_docs)), default=0.0))


def _open(load: _Load) -> IndexReport:
    """Create or extend the index, and find which of its documents are already loaded."""
    client, name = load.client, load.name
    load.merged = merged = ensure_index(client, name, load.meta, load.settings, corpus_alias(load.corpus.name))
    require_available(client, name)
    load.all_views, load.units = merged["views"], field_units(merged)
    load.fields = _vector_fields(merged) if load.model is not None else {v: [] for v in load.all_views}
    if set(load.all_views) - set(load.by_name):
        load.by_name.update({n: v for n, v in load_views().items() if n in load.all_views})
    load.done, load.partial = loaded_ids(client, name, load.units)
    report = IndexReport(index=name, n_corpus=len(load.corpus), n_already=len(load.done),
                         missing_view={v: 0 for v in load.all_views}, task_vectors=merged.get("task_vectors", {}))
    load.dumps = client.transport.serializer.dumps
    return report


def _record_view_tokens(load: _Load) -> None:
    """How much of each passage view the document vector truncates, beside its passages (view_tokens)."""
    model, by_name = load.model, load.by_name
    for v in load.passages:
        ident = view_tokens.identity(load.corpus.content_hash, model.id, model.revision, load.prompt, v)
        if view_tokens.find(load.corpus.name, ident) is None:
            tokenizer = load.encoder.tokenizer()
            texts = (t for r in load.corpus.records(by_name[v].columns) if (t := by_name[v].render(r)))
            view_tokens.record(load.corpus.name, ident, view_tokens.measure(
                texts, tokenizer, content_limit(model.max_seq_length, tokenizer, load.prompt or "")))


def _prepared(load: _Load, report: IndexReport, chunk_docs: int) -> Iterator[tuple[str, bytes]]:
    """(id, action and _source as ndjson bytes) per document: rendered, looked up or encoded and
    serialised off the sending thread."""
    all_views, dumps = load.all_views, load.dumps
    columns = {c for v in all_views for c in load.by_name[v].columns}.union(DOCUMENT_COLUMNS)
    todo = (r for r in load.corpus.records(columns) if r.id not in load.done)
    # the first chunk is one request's worth: the node starts on it while the next is prepared
    for chunk in _chunks(todo, chunk_docs, first=load.settings.bulk.max_docs):
        texts = load.render(chunk, all_views)
        for v in all_views:
            report.missing_view[v] += len(chunk) - len(texts[v])
        # numpy rows (int8 for a byte index): the serializer writes them directly
        vectors = {u: dict(zip(ids, stored(arr, load.merged)))
                   for u, (ids, arr) in load.encode(texts, load.fields).items()}
        nested = load.passage_lists(texts) if load.model is not None else {}
        for r in chunk:
            doc = document(r, {v: texts[v][r.id] for v in all_views if r.id in texts[v]},
                           {u: vec[r.id] for u, vec in vectors.items() if r.id in vec}, load.units, nested.get(r.id))
            # a new document is created, never overwritten: a chunk sent again after a lost node or a killed
            # load is then refused (409) where it arrived, instead of leaving deleted copies whose terms
            # count in BM25's statistics (soft deletes outlive a force-merge while a lost copy's lease holds)
            op = "index" if r.id in load.partial else "create"
            yield r.id, f"{dumps({op: {'_index': load.name, '_id': r.id}})}\n{dumps(doc)}\n".encode()


def _send_all(load: _Load, report: IndexReport, chunk_docs: int, progress: bool) -> None:
    """Send every document not yet loaded, refresh off meanwhile; the index's settings are restored (and the
    encoder closed) however the load ends."""
    client, name, settings = load.client, load.name, load.settings
    _relax(client, name)
    t0 = time.perf_counter()
    bar = tqdm(total=report.n_corpus - report.n_already, unit="doc", desc=f"index {name}", disable=not progress)
    red = False
    with long_lived_frozen():  # a load builds ~20 objects per patent: see evalctl.gc_tuning
        try:
            # whole request bodies are built in the producer thread, so the next one is ready the moment the
            # node answers the last (one request in flight, as with streaming_bulk, without its per-request
            # chunking and response walk between requests: 0.5 s of gaps in a 4 s load of 6,650 documents)
            lines = _prepared(load, report, chunk_docs)
            for request in _in_background(bulk_requests(lines, settings.bulk.max_docs, settings.bulk.max_bytes)):
                send_bulk(client, request, settings.bulk, report)
                bar.set_postfix(docs_per_s=f"{report.n_loaded / (time.perf_counter() - t0):.0f}", refresh=False)
                bar.update(len(request))
        except IndexUnavailable:
            red = True
            raise
        finally:
            bar.close()
            if load.encoder is not None:
                load.encoder.close()
            _restore(client, name, settings, refresh=not red)
    report.seconds = time.perf_counter() - t0


def _finish(load: _Load, report: IndexReport) -> None:
    """After the documents: the replicas' warning, the merge, and the manifest's record of the load."""
    client, name = load.client, load.name
    if (why := unplaced_replicas(client, name, load.settings.replicas)) is not None:
        report.warnings.append(why)
    report.segments_loaded = segment_count(client, name)
    report.segments, report.merge_seconds = _merge_segments(client, name, load.settings)
    final = _final_manifest(load, report)
    if final != load.merged:
        client.indices.put_mapping(index=name, body={"_meta": final})


def _final_manifest(load: _Load, report: IndexReport) -> dict:
    """The index's manifest after the load: its segments, how its graphs were built, and what it cost."""
    merged, imported, encoder = load.merged, load.imported, load.encoder
    final = {**merged, "segments": report.segments, **({"vectors_import": imported.provenance} if imported else {})}
    # whether a merge ever rebuilt the graph (then a rebuild's k-NN hits can differ: docs/index-layout.md);
    # left out for an index loaded before this was recorded, until a merge settles it
    rebuilt = report.segments < report.segments_loaded
    if rebuilt or "graph_merged" in merged or "segments" not in merged:
        final["graph_merged"] = rebuilt or merged.get("graph_merged", False)
    # whether any load built graphs with Lucene's SIMD code (then so can a rebuild's hits differ); None: unknown
    if merged.get("dim") and ("simd_vectors" in merged or "segments" not in merged):
        loads = (merged.get("simd_vectors", False), simd_vectors(load.client))
        final["simd_vectors"] = True if True in loads else None if None in loads else False
    if report.n_loaded or "cost" not in merged:  # a load that added nothing leaves the last measurement
        final["cost"] = measure_index_cost(load.client, load.name, final)
        if encoder is not None:  # what the vectors cost to encode, per view and passage field: their cache entries'
            final["cost"]["encode"] = {u: entry_cost(EmbeddingCache(cache_key(
                load.model, "document", u, load.variant, prompt=load.prompt, precision=encoder.precision,
                versions=load.versions, corpus=load.corpus.name)).runs())
                for u in [*load.all_views, *(passage_unit(v, p) for v, p in passage_settings(merged))]}
    return final
