"""`evalctl vectors merge`: the embedding caches of `evalctl encode --shard i/n` runs on n machines, merged into
this machine's cache, so `evalctl index` loads the corpus without encoding anything.

Each source is another machine's cache folder (its EVALCTL_CACHE, copied here). Its entry must have the very key
this machine would encode under (model, revision, prompt, role, view, precision, package versions): an entry of
another key is named with the fields that differ, since its vectors would not be the ones `index` asks for.
Everything is checked before anything is written (BadInput): every text of the corpus's view must be in some
source (the missing records are named), and a text held by several sources (records of one text fall in
different shards, or a shard was encoded twice) must have the same vector in each. The merged texts then go in
as one shard of the cache (its atomic commit), each exactly once, with a run record naming the sources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalctl.errors import BadInput
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache, text_hash
from evalctl.indexers.encode_corpus import view_texts
from evalctl.indexers.encode_options import PromptChoice
from evalctl.indexers.encoder import cache_key
from evalctl.indexers.vector_agreement import FirstVectors
from evalctl.paths import cache_root


class MergeError(BadInput, ValueError):
    """The caches cannot be merged as given; names the source, the record or the key field."""


@dataclass(frozen=True)
class MergeReport:
    cache_dir: Path
    n_records: int  # records of the view with text
    n_texts: int  # distinct texts among them: what the merged entry must hold
    n_merged: int  # texts stored by this merge
    n_already: int  # texts this cache held before (the same vectors)
    n_in_several: int  # texts held by more than one source (the same vectors: kept once)
    per_source: dict[str, int]  # source -> texts of this view it contributed


def _entry(source: Path, key: CacheKey) -> EmbeddingCache:
    """The source cache's entry of `key`; a missing one is refused naming the closest entry's differing fields."""
    base = source / "embeddings"
    if (base / key.model_id / key.digest() / "meta.json").is_file():
        return EmbeddingCache(key, root=base)
    mine = key.meta()
    near = []
    for meta_file in sorted((base / key.model_id).glob("*/meta.json")):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if (meta.get("role"), meta.get("view")) == (key.role, key.view):
            near.append({k: (meta.get(k), v) for k, v in mine.items() if meta.get(k) != v})
    if not near:
        raise MergeError(f"{source}: no embedding cache entry of model {key.model_id}, role {key.role}, view {key.view} "
                         f"(looked in {base / key.model_id}); run `evalctl encode --shard i/n` there with this cache")
    diff = "; ".join(f"{k}: source has {a!r}, this machine {b!r}" for k, (a, b) in min(near, key=len).items())
    raise MergeError(f"{source}: its entry of model {key.model_id}, view {key.view} has another key ({diff}): its vectors "
                     "are not the ones evalctl index asks for here; encode with the same precision and package versions")


def merge_caches(store, view_spec, model, sources: list[Path], *, prompts: PromptChoice = PromptChoice(),
                 precision: str | None = None) -> MergeReport:
    ids, texts, _ = view_texts(store, view_spec, prompts.role)
    if not ids:
        raise MergeError(f"corpus {store.name} has no {view_spec.name} text to merge vectors for")
    key = cache_key(model, prompts.role, view_spec.name, prompts.variant, prompt=prompts.prompt(model),
                    precision=precision)
    wanted: dict[bytes, str] = {}  # text hash -> the first record of that text
    for doc_id, text in zip(ids, texts):
        wanted.setdefault(text_hash(text), doc_id)
    resolved = [Path(s).resolve() for s in sources]
    if len(set(resolved)) != len(resolved):
        raise MergeError(f"a source cache is given twice: {', '.join(map(str, sources))}")
    entries = {src: _entry(src, key) for src in resolved}
    holders: dict[bytes, list[Path]] = {}
    for src, entry in entries.items():
        for h in wanted:
            if h in entry:
                holders.setdefault(h, []).append(src)
    here = cache_root() / "embeddings"
    # this cache's entry is opened only where it exists: a refused merge leaves no trace here
    target = EmbeddingCache(key, root=here) if (here / key.model_id / key.digest() / "meta.json").is_file() else {}
    missing = sorted(wanted[h] for h in wanted if h not in holders and h not in target)
    if missing:
        raise MergeError(f"{len(missing)} of {len(wanted)} distinct {view_spec.name} texts of corpus {store.name} are in "
                         f"none of the {len(sources)} caches (records e.g. {', '.join(missing[:5])}): a shard was not "
                         "encoded or its cache not given; nothing was merged")
    # each text's vector from its first holder; every other holder (and this cache) must agree with it
    first = FirstVectors()
    for src, entry in [*entries.items(), (here, target)]:
        held = [h for h in wanted if h in entry]
        if clash := first.add((h, src, vector) for h, vector in zip(held, entry.get(held) if held else ())):
            raise MergeError(f"record {wanted[clash.text]} ({view_spec.name}): {clash.first} and {src} hold different "
                             f"vectors for its text (max |diff| {clash.diff:.3g}) under one key; nothing was merged")
    new = [h for h in holders if h not in target]
    target = target or EmbeddingCache(key, root=here)
    if new:
        target.commit(new, np.stack([first[h] for h in new]))
    per_source = {str(src): sum(h in e for h in wanted) for src, e in entries.items()}
    target.record_run({"merge": {"corpus": store.name, "corpus_hash": store.manifest["content_hash"],
                                 "view": view_spec.name, "sources": per_source, "n_merged": len(new)}})
    return MergeReport(target.dir, len(ids), len(wanted), len(new), len(wanted) - len(new),
                       sum(len(s) > 1 for s in holders.values()), per_source)
