"""Index names, mappings and settings for a corpus x model index (configs/index.yaml).

One index per corpus x model: text fields for every view (BM25, `english` analyzer) plus one
`knn_vector` field per view for that model, so hybrid queries see text and vectors in one index and a
second model never touches the first model's index. Where the model's classification or clustering
prompt differs from its document prompt, a view can also carry that task's vectors (`vec_TA__clustering`),
which the label tasks read back (docs/classification-clustering.md). An alias per corpus (`evalctl-<corpus>`) groups
them for Dashboards. The `evalctl` prefix is configurable, so several caches or users can share a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from evalctl.config_files import build, load_yaml
from evalctl.corpus.label_sets import LabelSetSpec
from evalctl.indexers.passages import PassageSpec, passage_path, passage_unit
from evalctl.opensearch.connection import DEFAULT_INDEX_PREFIX, load_settings

BM25_ONLY = "bm25"
SPACE_TYPES = {"cosine": "cosinesimil", "dot": "innerproduct"}
MAX_SHARDS = 1024
# Metadata fields every index carries (keywords, so they filter and aggregate).
META_FIELDS = ("doc_id", "family_id", "jurisdiction", "kind", "cpc", "ipc", "labels")


# A document's vector as script fields read it from the field's vector values (not from _source, which may
# exclude them: `vectors_in_source: false`). A copy: k-NN 3.5's script doc values hand out one reused array, so
# a page of hits that keeps the array itself shows the last document's vector in every hit.
# A byte field's doc value is a byte[] (copied into floats the same way; evalctl.indexers.byte_vectors dequantises).
_COPY = ("{t}[] v = doc[params.field].value; float[] c = new float[v.length]; "
         "for (int i = 0; i < v.length; ++i) {{ c[i] = v[i]; }} return c;")
VECTOR_SCRIPTS = {"float": _COPY.format(t="float"), "byte": _COPY.format(t="byte")}


def vector_script(manifest: dict) -> str:
    """The script that reads an index's vectors (an index made before data_type holds floats)."""
    return VECTOR_SCRIPTS[manifest.get("data_type") or "float"]


# The tasks that read vectors back from the index; each may have its own prompt, hence its own field.
LABEL_TASKS = ("classification", "clustering")

CODE_FIELDS = ("cpc", "ipc", "labels")  # record columns (and index fields) of record_codes


def record_codes(record) -> dict[str, list[str]]:
    """A record's codes as its index document stores them (in record order, which label rules rely on)."""
    return {"cpc": [c.code for c in record.cpc], "ipc": [c.code for c in record.ipc],
            "labels": list(record.labels)}


# Keyword fields of code prefixes (a record's distinct values, cut as the label sets of the same name), so
# Dashboards filters and aggregates on them as on any keyword: a scripted field returning a list never
# matched Dashboards' phrase filter (`s.get() == v`) and made its "Other" bucket count every document.
FACETS = {name: LabelSetSpec(name=name, source=source, level=level) for name, source, level in (
    ("cpc_subclass", "cpc", "subclass"), ("ipc_subclass", "ipc", "subclass"), ("ipc3", "ipc", "class"))}


def facet_manifest() -> dict[str, list[str]]:
    """What an index manifest records of FACETS: {field: [source, level]} (JSON-shaped, compared as read back)."""
    return {name: [spec.source, spec.level] for name, spec in FACETS.items()}


def record_facets(record) -> dict[str, list[str]]:
    return {name: spec.labels_of(record) for name, spec in FACETS.items()}


@dataclass(frozen=True)
class HnswSettings:
    m: int = 16
    ef_construction: int = 100
    ef_search: int = 100


@dataclass(frozen=True)
class Bm25Settings:
    k1: float = 1.2
    b: float = 0.75


@dataclass(frozen=True)
class BulkSettings:
    max_docs: int = 500
    max_bytes: int = 10_000_000
    max_retries: int = 5
    initial_backoff: float = 2.0
    max_backoff: float = 60.0
    # How long the node holds a document whose shard has no active primary before refusing it (503): the bulk
    # request's `timeout`, in OpenSearch's time units. The loader then names the red index (send_bulk).
    timeout: str = "1m"

    def __post_init__(self):
        if not re.fullmatch(r"[1-9][0-9]*(ms|s|m|h)", str(self.timeout)):
            raise ValueError(f"bulk timeout {self.timeout!r}: a whole number and a unit, ms, s, m or h (e.g. 1m)")


@dataclass(frozen=True)
class IndexSettings:
    engine: Literal["lucene", "faiss"] = "lucene"
    # flat: float32 graph vectors; sq: Lucene's scalar quantisation to 7-bit integers per segment (a quarter
    # of the graph's vector memory; the float32 vectors stay on disk and in _source, so read-back is exact);
    # sq_fp16: faiss's half precision
    encoder: Literal["flat", "sq", "sq_fp16"] = "flat"
    hnsw: HnswSettings = field(default_factory=HnswSettings)
    bm25: Bm25Settings = field(default_factory=Bm25Settings)
    shards: int = 1  # primaries: fixed when the index is made (part of its identity)
    replicas: int = 0  # copies of each primary on other nodes: changed in place on a later load
    # BM25 on an index of more than one shard: corpus-wide term statistics (dfs_query_then_fetch), so the
    # scores do not depend on the shard count; False: each shard's own (one round trip less per query)
    dfs: bool = True
    bulk: BulkSettings = field(default_factory=BulkSettings)
    # After a load, force-merge to one segment per shard: HNSW search runs per segment and segment boundaries
    # differ between builds (flush timing). Lucene 10.3's merged graph itself differs from merge to merge, so
    # only a load that ends in one segment can give the same k-NN hits on a rebuild (docs/index-layout.md).
    merge_to_one_segment: bool = True
    # False: _source and the recovery source (the operation history kept for replicas) leave out the vec_*
    # fields, so each vector is stored once (in the vector format), not again as JSON text; read-back and
    # `index verify` read the vector values with script fields either way. Fixed when an index is made (a
    # mapping's _source cannot change); a _reindex would lose the vectors, and so would a replica replaying
    # that history: refused with replicas.
    vectors_in_source: bool = True
    # byte: knn_vector fields of int8 values, which evalctl quantises from the float vectors by the rule in
    # evalctl.indexers.byte_vectors (a quarter of float32's bytes on disk and in the graph); part of the identity
    data_type: Literal["float", "byte"] = "float"

    def __post_init__(self):
        needs = {"sq": "lucene", "sq_fp16": "faiss"}.get(self.encoder, self.engine)
        if needs != self.engine:
            raise ValueError(f"encoder {self.encoder} needs engine {needs}, not {self.engine}")
        if self.data_type == "byte" and self.encoder != "flat":  # the node refuses an encoder on byte fields too
            raise ValueError(f"data_type byte with encoder {self.encoder}: byte vectors are already quantised "
                             f"(by evalctl); use encoder flat, or data_type float for {self.encoder}")
        if self.data_type == "byte" and self.engine != "lucene":
            raise ValueError(f"data_type byte needs engine lucene, not {self.engine} (the engine evalctl's byte "
                             f"vectors are built and tested on)")
        if not 1 <= self.shards <= MAX_SHARDS:  # OpenSearch's own bound on number_of_shards
            raise ValueError(f"shards {self.shards}: must be between 1 and {MAX_SHARDS}")
        if self.replicas < 0:
            raise ValueError(f"replicas {self.replicas}: must be 0 or more")
        if self.replicas and not self.vectors_in_source:
            raise ValueError(f"replicas {self.replicas} with vectors_in_source false: a replica recovering from the "
                             f"operation history would get documents without vectors (keep them in _source)")

    def search_type(self, shards: int) -> str | None:
        """The search_type a BM25 query of an index of `shards` shards needs (None: the default)."""
        return "dfs_query_then_fetch" if self.dfs and shards > 1 else None


def load_index_settings(path: str = "index.yaml", **given) -> IndexSettings:
    """configs/<path>, with the fields `given` (those not None, e.g. `evalctl index --shards`) replaced."""
    data = {**(load_yaml(path) or {}), **{k: v for k, v in given.items() if v is not None}}
    return build(IndexSettings, data, f"configs/{path}")


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9_.+-]+", "-", s.lower()).strip("-")


def index_prefix() -> str:
    """The configured prefix (EVALCTL_INDEX_PREFIX or the config's opensearch.index_prefix; default evalctl)."""
    return load_settings().index_prefix


def index_name(corpus: str, model_id: str | None) -> str:
    """<prefix>-<corpus>--<model>, e.g. evalctl-pizza--minilm-l6 (lowercase, as OpenSearch requires)."""
    return f"{index_prefix()}-{_slug(corpus)}--{_slug(model_id or BM25_ONLY).replace('+', '.')}"


def corpus_alias(corpus: str) -> str:
    return f"{index_prefix()}-{_slug(corpus)}"


def owned_by_prefix(name: str, meta: dict, prefix: str) -> bool:
    """Whether index `name` belongs to `prefix`: a longer prefix (evalctl-alice) also matches evalctl-*,
    so the manifest's own prefix decides (indexes made before prefixes existed have the default)."""
    return name.startswith(f"{prefix}-") and meta.get("index_prefix", DEFAULT_INDEX_PREFIX) == prefix


def text_field(view: str) -> str:
    return f"text_{view}"


def field_unit(view: str, task: str | None = None) -> str:
    """What a document's `loaded_views` marks: a view, or a view's vectors under a label task's prompt."""
    return view if task is None else f"{view}__{task}"


def vector_field(view: str, task: str | None = None) -> str:
    """vec_<view> (document prompt) or vec_<view>__<task> (the task's prompt); also takes a field_unit."""
    return f"vec_{field_unit(view, task)}"


def task_prompts(model, variant: str | None, tasks=LABEL_TASKS) -> dict[str, str]:
    """The label tasks whose prompt (MTEB precedence, texts in the document role) differs from the
    document prompt, with that prompt: these get vectors of their own."""
    document = model.prompt_for("document", task_type="retrieval", variant=variant)
    prompts = {t: model.prompt_for("document", task_type=t, variant=variant) for t in tasks}
    return {t: p for t, p in prompts.items() if p != document}


def task_vectors(model, variant: str | None, label_tasks: dict[str, list[str]]) -> dict[str, dict]:
    """The manifest entry for the task fields wanted ({task: views}): {task: {"prompt", "views"}}, only for
    tasks whose prompt differs from the document prompt."""
    prompts = task_prompts(model, variant, tuple(label_tasks))
    return {t: {"prompt": p, "views": sorted(set(label_tasks[t]))} for t, p in prompts.items() if label_tasks[t]}


def task_units(meta: dict) -> list[tuple[str, str]]:
    """(view, task) of every task field an index manifest lists."""
    return [(v, t) for t, tv in sorted(meta.get("task_vectors", {}).items()) for v in tv["views"]]


def passage_settings(meta: dict) -> list[tuple[str, PassageSpec]]:
    """(view, passage setting) of every passage field an index manifest lists."""
    return [(v, PassageSpec.parse(name)) for v, names in sorted(meta.get("passages", {}).items()) for name in names]


def field_units(meta: dict) -> list[str]:
    """Every unit a complete document of this index carries: its views, its task fields and its passage fields."""
    return [*meta["views"], *(field_unit(v, t) for v, t in task_units(meta)),
            *(passage_unit(v, p) for v, p in passage_settings(meta))]


def vector_units(meta: dict) -> list[str]:
    """The units that are top-level knn_vector fields (views and task fields; passages are nested)."""
    return [*meta["views"], *(field_unit(v, t) for v, t in task_units(meta))]


def knn_method(similarity: str, settings: IndexSettings) -> dict:
    method = {
        "name": "hnsw",
        "engine": settings.engine,
        "space_type": SPACE_TYPES[similarity],
        "parameters": {"m": settings.hnsw.m, "ef_construction": settings.hnsw.ef_construction},
    }
    if settings.encoder == "sq_fp16":
        method["parameters"]["encoder"] = {"name": "sq", "parameters": {"type": "fp16"}}
    elif settings.encoder == "sq":  # k-NN 3.5 requires bits; 7 is Lucene's int7 quantiser
        method["parameters"]["encoder"] = {"name": "sq", "parameters": {"bits": 7}}
    return method


def view_properties(views: list[str], dim: int | None, similarity: str | None, settings: IndexSettings) -> dict:
    """Mapping properties for the given views (text always; a vector when the index has a model)."""
    props = {}
    for v in views:
        props[text_field(v)] = {"type": "text", "analyzer": "english", "similarity": "patent_bm25"}
        if dim is not None:
            props.update(vector_properties([v], dim, similarity, settings))
    return props


def vector_properties(units: list[str], dim: int, similarity: str, settings: IndexSettings) -> dict:
    """A knn_vector field per unit (a view, or a view's task field)."""
    kind = {"data_type": "byte"} if settings.data_type == "byte" else {}
    return {vector_field(u): {"type": "knn_vector", "dimension": dim, **kind, "method": knn_method(similarity, settings)}
            for u in units}


VECTOR_PATHS = [vector_field("*"), "psg_*.vec"]  # every vector field: top-level, and nested in passages (passage_path)


def passage_properties(fields: list[tuple[str, PassageSpec]], dim: int, similarity: str,
                       settings: IndexSettings) -> dict:
    """A nested field per view x passage setting: each passage's order, character offsets, text (BM25) and vector.
    OpenSearch's own bounds apply: index.mapping.nested_fields.limit (50 nested fields an index) and
    index.mapping.nested_objects.limit (10,000 passages a document)."""
    return {passage_path(v, p): {"type": "nested", "properties": {
        "ord": {"type": "integer"}, "start": {"type": "integer"}, "end": {"type": "integer"},
        "text": {"type": "text", "analyzer": "english", "similarity": "patent_bm25"},
        "vec": vector_properties(["x"], dim, similarity, settings)[vector_field("x")]}} for v, p in fields}


def index_body(views: list[str], dim: int | None, similarity: str | None, settings: IndexSettings,
               meta: dict) -> dict:
    properties = {f: {"type": "keyword"} for f in (*META_FIELDS, *FACETS)}
    properties["pub_date"] = {"type": "date", "format": "strict_date_optional_time||yyyy-MM-dd||yyyyMMdd"}
    properties["title"] = {"type": "text", "analyzer": "english"}  # for people searching in Dashboards
    properties["loaded_views"] = {"type": "keyword"}  # which views this document carries: resume marker
    properties.update(view_properties(views, dim, similarity, settings))
    if dim is not None:
        properties.update(vector_properties([field_unit(v, t) for v, t in task_units(meta)], dim, similarity, settings))
        properties.update(passage_properties(passage_settings(meta), dim, similarity, settings))
    return {
        "settings": {
            "index": {
                "number_of_shards": settings.shards,
                "number_of_replicas": settings.replicas,
                "knn": dim is not None,
                **({
                    "knn.algo_param.ef_search": settings.hnsw.ef_search,
                    # Vectors kept verbatim in _source: k-NN 3.5's derived source failed reads after a
                    # node restart ("already_closed_exception" on the .vec slice); read-back must be exact.
                    "knn.derived_source.enabled": False,
                } if dim is not None else {}),
            },
            "similarity": {"patent_bm25": {"type": "BM25", "k1": settings.bm25.k1, "b": settings.bm25.b}},
        },
        "mappings": {"dynamic": "strict", "_meta": meta, "properties": properties,
                     **({"_source": {"excludes": VECTOR_PATHS, "recovery_source_excludes": VECTOR_PATHS}}
                        if dim is not None and not settings.vectors_in_source else {})},
    }
