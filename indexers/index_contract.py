"""The index contract: what retrieval, vector read-back, `index verify` and the study runner check before they
read a corpus x model index, in one place.

An index can be read for (corpus, model, views) when it exists, was built from this version of the corpus
(its manifest's corpus hash) and holds the views. Its manifest also says how close its vectors are to the
embedding cache they were encoded into (the vector tolerance) and which cache that is (the cache key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalctl.errors import BadInput
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest

# sq_fp16 rounds each component to half precision (|x| <= 1 for normalised vectors).
FP16_TOLERANCE = 1e-3
# An index loaded from this cache reads back bit-identical (max |diff| 0 is printed). A cache filled by
# another run agrees only to ~1e-7 (batch padding changes the float arithmetic: 1.4e-7 seen), while a
# wrong model, prompt or text differs by ~1e-1; so checks against the cache allow this much.
REENCODE_TOLERANCE = 1e-5


class IndexUnavailable(BadInput, LookupError):
    """The index is missing, holds another corpus version, or lacks a view."""


@dataclass(frozen=True)
class IndexState:
    name: str
    manifest: dict  # {} when the index does not exist
    problems: tuple[str, ...]  # the contract's failed checks, each a message saying what to do

    @property
    def exists(self) -> bool:
        return bool(self.manifest)

    @property
    def tolerance(self) -> float:
        """How far a vector read back may be from the cached one (flat float32 vs sq_fp16 encoders)."""
        return REENCODE_TOLERANCE if self.manifest.get("encoder", "flat") == "flat" else FP16_TOLERANCE

    def cache_key(self, view: str, model=None):
        """The embedding cache the index's `view` vectors were loaded from (`model`: the manifest's by
        default; raises SpecError for a model no longer in the registry)."""
        from evalctl.indexers.encoder import cache_key
        from evalctl.models import get_model

        m = self.manifest
        return cache_key(model or get_model(m["model"]), "document", view, m["prompt_variant"], m["document_prompt"])


def inspect_index(client, corpus, model_id: str | None, views: Sequence[str] = ()) -> IndexState:
    """The corpus x model index and which checks of the contract it fails (none: it can be read)."""
    name = index_name(corpus.name, model_id)
    manifest = read_manifest(client, name)
    how = (f"evalctl index --corpus {corpus.name}" + (f" --model {model_id}" if model_id else "")
           + "".join(f" --view {v}" for v in views))
    if manifest is None:
        return IndexState(name, {}, (f"index {name} does not exist; build it with `{how}`",))
    problems = []
    if manifest.get("corpus_hash") != corpus.content_hash:
        problems.append(f"index {name} was built from corpus hash {manifest.get('corpus_hash')}, corpus "
                        f"{corpus.name} now has {corpus.content_hash}: re-index it")
    have = manifest.get("views", [])
    if missing := [v for v in views if v not in have]:
        problems.append(f"index {name} has no view {', '.join(missing)} (has {', '.join(have)}); "
                        f"add it with `{how}`")
    return IndexState(name, manifest, tuple(problems))


def open_index(client, corpus, model_id: str | None, views: Sequence[str] = (),
               error: type[Exception] = IndexUnavailable) -> IndexState:
    """The index, if it meets the contract; else `error` (the caller's error type) with the first problem."""
    state = inspect_index(client, corpus, model_id, views)
    if state.problems:
        raise error(state.problems[0])
    return state
