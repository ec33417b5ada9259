"""`evalctl index verify` and `evalctl index status`: is an index exactly what its manifest says?"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from evalctl.indexers.byte_vectors import is_byte, read_back
from evalctl.indexers.embedding_cache import EmbeddingCache
from evalctl.indexers.index_contract import inspect_index
from evalctl.indexers.index_layout import index_prefix, vector_script, owned_by_prefix, text_field, vector_field
from evalctl.indexers.index_loader import read_manifest


@dataclass
class VerifyReport:
    index: str
    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _count(client, index: str, query: dict | None = None) -> int:
    return client.count(index=index, body={"query": query or {"match_all": {}}})["count"]


def verify_index(client, corpus, views: dict, model=None, *, sample: int = 50, seed: int = 0) -> VerifyReport:
    """Counts per field, vector dimension, and a sample of vectors read back against the cache."""
    state = inspect_index(client, corpus, model.id if model else None)
    name, meta = state.name, state.manifest
    rep = VerifyReport(index=name, problems=list(state.problems))
    if not state.exists:
        return rep
    client.indices.refresh(index=name)
    n_docs = _count(client, name)
    # Streamed twice, keeping ids only: which records render each view, then the sampled texts.
    n_records, rendering = 0, {v: [] for v in meta["views"]}
    for r in corpus.records():
        n_records += 1
        for v in meta["views"]:
            if views[v].render(r):
                rendering[v].append(r.id)
    rerun = _load_command(corpus, model, meta)
    (rep.checks if n_docs == n_records else rep.problems).append(
        f"documents: index {n_docs}, corpus {n_records}" + (
            f": {n_records - n_docs} not loaded (a load that stopped before the end, e.g. a killed client or node); "
            f"{rerun} loads only what is missing" if n_docs < n_records else ""))
    picked = {v: random.Random(seed).sample(ids, min(sample, len(ids))) if model else [] for v, ids in rendering.items()}
    wanted = {i for ids in picked.values() for i in ids}
    texts = {r.id: {v: views[v].render(r) for v in meta["views"]} for r in corpus.records() if r.id in wanted}
    mapping = client.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    for v in meta["views"]:
        expected = rendering[v]
        fields = [text_field(v)] + ([vector_field(v)] if model else [])
        for f in fields:
            got = _count(client, name, {"exists": {"field": f}})
            (rep.checks if got == len(expected) else rep.problems).append(
                f"{f}: {got} documents, {len(expected)} records render view {v}")
        if not model:
            continue
        dim = mapping[vector_field(v)]["dimension"]
        (rep.checks if dim == model.dim else rep.problems).append(f"{vector_field(v)} dimension {dim}, model {model.dim}")
        if not picked[v]:
            continue
        stored = _stored_vectors(client, name, vector_field(v), picked[v], vector_script(meta))
        if absent := [i for i in picked[v] if i not in stored]:
            rep.problems.append(
                f"{vector_field(v)}: {len(absent)} of {len(picked[v])} sampled records have no vector in the index "
                f"(e.g. {', '.join(absent[:3])}); {rerun} loads them")
        ids = [i for i in picked[v] if i in stored]
        if not ids:
            continue
        cached, found = EmbeddingCache(state.cache_key(v, model)).lookup([texts[i][v] for i in ids])
        found = np.asarray(found, dtype=bool)
        stored_arr = read_back([stored[i] for i in ids], meta)  # a byte index's dequantised
        if not found.all():
            rep.problems.append(f"{vector_field(v)}: {int((~found).sum())} sampled texts are not in the embedding cache")
        tol = state.tolerance
        err = float(np.abs(stored_arr[found] - cached[found]).max()) if found.any() else 0.0
        (rep.checks if err <= tol else rep.problems).append(
            f"{vector_field(v)}: {int(found.sum())} sampled vectors read back, max |diff| {err:.3g} (tolerance {tol:.3g}"
            + (", byte vectors dequantised" if is_byte(meta) else "") + ")")
    return rep


def _load_command(corpus, model, meta: dict) -> str:
    """The `evalctl index` command that completes this index (it keeps what is loaded)."""
    args = [f"--corpus {corpus.name}"] + ([f"--model {model.id}"] if model else [])
    args += [f"--view {v}" for v in meta["views"]]
    if model and meta.get("prompt_variant") not in (None, model.default_variant):
        args.append(f"--prompt-variant {meta['prompt_variant']}")
    return f"`evalctl index {' '.join(args)}`"


def _stored_vectors(client, index: str, field: str, ids: list[str], script: str) -> dict[str, list]:
    """The `field` vector of each id that has one in `index` (a document not loaded, or loaded without the
    view, is left out)."""
    body = {"query": {"bool": {"filter": [{"ids": {"values": ids}}, {"exists": {"field": field}}]}}, "size": len(ids),
            "_source": False, "script_fields": {"v": {"script": {"source": script, "params": {"field": field}}}}}
    return {h["_id"]: h["fields"]["v"][0] for h in client.search(index=index, body=body)["hits"]["hits"]}


def index_status(client) -> list[dict]:
    """Every evalctl index with its manifest, document count and size."""
    rows, prefix = [], index_prefix()
    for row in client.cat.indices(index=f"{prefix}-*", format="json", bytes="b"):
        meta = read_manifest(client, row["index"]) or {}
        if not owned_by_prefix(row["index"], meta, prefix):
            continue  # another cache's or user's index (a longer prefix)
        rows.append({"index": row["index"], "docs": int(row["docs.count"] or 0),
                     "size_mb": round(int(row["store.size"] or 0) / 1e6, 1), "health": row["health"], **meta,
                     # what the node has now (a load leaves replicas relaxed until it ends)
                     "shards": int(row["pri"]), "replicas": int(row["rep"])})
    copies = shard_copies(client, f"{prefix}-*") if rows else {}
    for r in rows:
        r["shard_copies"] = copies.get(r["index"], [])
    return sorted(rows, key=lambda r: r["index"])


def shard_copies(client, indexes: str) -> dict[str, list[dict]]:
    """Every shard copy of `indexes` (a name or pattern) by index: shard number, primary or replica, state
    and the node holding it (None while unassigned), from `_cat/shards`."""
    out: dict[str, list[dict]] = {}
    for row in client.cat.shards(index=indexes, format="json", h="index,shard,prirep,state,node"):
        out.setdefault(row["index"], []).append({
            "shard": int(row["shard"]), "copy": "primary" if row["prirep"] == "p" else "replica",
            "state": row["state"], "node": row.get("node")})
    for copies in out.values():
        copies.sort(key=lambda c: (c["shard"], c["copy"] != "primary", c["node"] or ""))
    return out
