"""A system's serving layout: the index a user serving only this system would keep. A study's index holds every
view's text, vectors and passages of a model (one index per corpus x model), and a system's latency and size in it
are those of that study layout, not of the system. For a latency experiment (latency_experiment), each system gets
an index of its own, copied from the study's index by `_reindex` (its stored text and vectors: nothing is encoded
again) holding only the fields the system searches (a view's text for BM25, its vector field for dense, its passage
field for a passage method, both for a fused method) beside the fields every document carries (ids, family, codes),
with the study index's settings and mapping for them, merged to one segment, its cost measured as a load measures
one (index_cost), and removed after the experiment.

A study index whose `_source` leaves out the vectors (`vectors_in_source: false`) cannot be copied without encoding
again: its dense systems are measured in the study layout, and the experiment says so.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

from evalctl.evaluators.retrieval.retrieve import RetrievalSpec
from evalctl.indexers.index_cost import measure_index_cost
from evalctl.indexers.index_layout import passage_settings, text_field, vector_field
from evalctl.indexers.passages import PassageSpec, passage_path

LAYOUTS = ("serving", "study")
# the study index's settings a copy keeps (flat names): what shapes its answers and its size
_SETTINGS = ("index.number_of_shards", "index.number_of_replicas", "index.knn", "index.analysis.", "index.similarity.",
             "index.max_result_window")
COPY_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Layout:
    kind: str  # "serving" (an index of its own) or "study" (the study's index, holding every view)
    index: str
    manifest: dict  # its index manifest, `cost` included
    why_not_served: str | None = None  # a serving layout asked for and not made: why


def system_fields(spec: RetrievalSpec) -> set[str]:
    """The fields the system searches."""
    m = spec.definition
    own = {text_field(spec.view)} if m.text else set()
    if m.vector:
        own |= {passage_path(spec.view, PassageSpec.parse(spec.passages))} if spec.passages else {
            vector_field(spec.view)}
    return own


def _other_fields(manifest: dict) -> set[str]:
    """Every view's text, vector and passage field the study index may hold: what a copy leaves out unless the
    system searches it."""
    views = set(manifest.get("views") or []) | {v for v, _ in passage_settings(manifest)}
    fields = {text_field(v) for v in views} | {vector_field(v) for v in views}
    fields |= {vector_field(v, t) for t, tv in (manifest.get("task_vectors") or {}).items() for v in tv["views"]}
    return fields | {passage_path(v, p) for v, p in passage_settings(manifest)}


def _own_manifest(spec: RetrievalSpec, manifest: dict) -> dict:
    """The study index's manifest as the copy's: its one view, its passages only, no task vectors; no vectors at all
    for a text-only system."""
    m = spec.definition
    own = {**manifest, "views": [spec.view], "task_vectors": {},
           "passages": {spec.view: [spec.passages]} if spec.passages and m.vector else {}}
    return own if m.vector else {k: v for k, v in own.items() if k != "dim"}


def _name(study_index: str, spec: RetrievalSpec) -> str:
    key = "|".join(sorted(system_fields(spec)))
    return f"{study_index}--serving-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def make_serving(client, spec: RetrievalSpec, study_index: str, manifest: dict) -> Layout:
    """Copy the system's part of `study_index` into an index of its own (see the module docstring)."""
    if spec.definition.vector and not manifest.get("vectors_in_source", True):
        return Layout("study", study_index, manifest, "the study index's _source leaves out the vectors "
                      "(vectors_in_source: false): an index of this system's own would need them encoded again")
    keep = system_fields(spec)
    drop = _other_fields(manifest) - keep
    mappings = client.indices.get_mapping(index=study_index)[study_index]["mappings"]
    props = {k: v for k, v in mappings.get("properties", {}).items() if k not in drop}
    own = _own_manifest(spec, manifest)
    flat = client.indices.get_settings(index=study_index, flat_settings=True)[study_index]["settings"]
    settings = {k: v for k, v in flat.items() if k.startswith(_SETTINGS)}
    name = _name(study_index, spec)
    client.indices.delete(index=name, ignore_unavailable=True)  # a copy a killed experiment left
    client.indices.create(index=name, body={"settings": settings, "mappings": {
        **{k: v for k, v in mappings.items() if k not in ("properties", "_meta")}, "properties": props, "_meta": own}})
    try:
        client.reindex(body={"source": {"index": study_index, "_source": sorted(props)}, "dest": {"index": name}},
                       wait_for_completion=True, refresh=True, request_timeout=COPY_TIMEOUT_S)
        client.indices.forcemerge(index=name, max_num_segments=1, request_timeout=COPY_TIMEOUT_S)
        client.indices.refresh(index=name)
        # the documents' encoding is the study index's (the copy encoded nothing): what the loader adds to a cost
        encoded = (manifest.get("cost") or {}).get("encode", {})
        own["cost"] = {**measure_index_cost(client, name, own), "encode": encoded}
    except BaseException:
        client.indices.delete(index=name, ignore_unavailable=True)
        raise
    return Layout("serving", name, own)


@contextlib.contextmanager
def layouts(client, specs: list[RetrievalSpec], studied: list[tuple[str, dict]], kinds: tuple[str, ...]):
    """Per layout kind asked for, each system's Layout (`studied`: each system's study index and its manifest);
    the serving copies removed on leaving, whatever happened."""
    made: list[str] = []
    try:
        out = {}
        for kind in kinds:
            if kind == "study":
                out[kind] = [Layout("study", index, manifest) for index, manifest in studied]
                continue
            copies: dict[str, Layout] = {}  # systems that search the same fields share one copy
            for spec, (index, manifest) in zip(specs, studied):
                if (name := _name(index, spec)) not in copies:
                    copies[name] = make_serving(client, spec, index, manifest)
                    made += [copies[name].index] if copies[name].kind == "serving" else []
            out[kind] = [copies[_name(index, spec)] for spec, (index, _) in zip(specs, studied)]
        yield out
    finally:
        for name in made:
            with contextlib.suppress(Exception):  # the node may be what failed: the experiment's error is the news
                client.indices.delete(index=name, ignore_unavailable=True)
