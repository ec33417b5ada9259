"""Encoding texts with a model spec, through the embedding cache.

The core works on (ids, texts), so it serves corpora, query sets and tests alike. Texts already in
the cache are not encoded again; identical texts are encoded once; new texts are encoded longest
first (so each batch pads little) and committed to the cache in groups, so an interrupted run
resumes after its last committed group.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np
from tqdm import tqdm

from evalctl.heap import thaw
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache, text_hash
from evalctl.indexers.model_loader import Source, load_model
from evalctl.models import ModelSpec, Role, TaskType

if TYPE_CHECKING:
    from pathlib import Path

    from sentence_transformers import SentenceTransformer

# A token covers at least one character, so a text shorter (in characters) than the token limit
# cannot be truncated; longer texts are tokenised only up to this many characters per token allowed.
_CHARS_PER_TOKEN_PROBE = 8


class TextEncoder(Protocol):
    """What encode_texts needs from an encoder (the real one is Encoder; tests may wrap it)."""

    dim: int

    def encode(self, texts: list[str], prompt: str) -> np.ndarray: ...

    def count_truncated(self, texts: list[str], prompt: str) -> int: ...


# Models loaded in this process, most recently used last: every step of an `evalctl run` (index, query
# encoding per split and view, ...) reuses them instead of loading the weights again.
_SHARED: OrderedDict[tuple, SentenceTransformer] = OrderedDict()
_SHARED_MAX = 3  # a study's models at once (e.g. a base, its fine-tuned copy, a second family)
_SHARED_LOCK = threading.Lock()


def _loaded(spec: ModelSpec, device: str | None, source: Source, precision: str, all_gpus: bool = False
            ) -> SentenceTransformer:
    """A freshly loaded model, in half precision on GPUs when asked (CPU kernels for fp16/bf16 are slow)."""
    model = load_model(spec, device=device, source=source)
    if (all_gpus or str(model.device).startswith("cuda")) and precision in ("float16", "bfloat16"):
        import torch

        model.to(getattr(torch, precision))
    return model


def shared_model(spec: ModelSpec, device: str | None = None, source: Source = "auto",
                 precision: str | None = None) -> SentenceTransformer:
    """The process's loaded model for this spec (id, revision, folder, length limit), device, source and precision:
    loaded once, then shared by every encoder asking for the same. Only encoding uses it (read-only);
    fine-tuning loads its own copy."""
    key = (spec.id, spec.revision, spec.path, spec.max_seq_length, device, source, precision or spec.dtype)
    with _SHARED_LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            return _SHARED[key]
        model = _loaded(spec, device, source, precision or spec.dtype)
        _SHARED[key] = model
        while len(_SHARED) > _SHARED_MAX:
            thaw()  # a frozen heap (evalctl.heap) would keep the evicted model in memory
            _SHARED.popitem(last=False)
        return model


class Encoder:
    """A loaded model (shared within the process, see shared_model) plus its runtime settings: device(s),
    dtype, batch size, length limit."""

    def __init__(self, spec: ModelSpec, *, device: str | None = None, batch_size: int = 32,
                 source: Source = "auto", dtype: str | None = None):
        self.spec = spec
        self.batch_size = batch_size
        self.dim = spec.dim
        self.max_tokens = spec.max_seq_length
        self.pool = None
        precision = dtype or spec.dtype
        if device != "all":
            self.model = shared_model(spec, device, source, precision)
            return
        import torch

        self.model = _loaded(spec, None, source, precision, all_gpus=True)
        gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if not gpus:
            raise RuntimeError("--device all: no CUDA GPU is visible on this machine")
        self.pool = self.model.start_multi_process_pool(gpus)

    def close(self) -> None:
        if self.pool is not None:
            self.model.stop_multi_process_pool(self.pool)
            self.pool = None

    def encode(self, texts: list[str], prompt: str) -> np.ndarray:
        vectors = self.model.encode(
            texts, prompt=prompt or None, batch_size=self.batch_size, normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True, show_progress_bar=False, pool=self.pool,
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_truncated(self, texts: list[str], prompt: str) -> int:
        """How many texts (with their prompt) exceed the model's token limit and get cut."""
        limit = self.max_tokens
        probe = [prompt + t[: limit * _CHARS_PER_TOKEN_PROBE] for t in texts if len(prompt) + len(t) > limit - 2]
        if not probe:
            return 0
        lengths = [len(ids) for ids in self.model.tokenizer(probe, add_special_tokens=True, verbose=False)["input_ids"]]
        return sum(n > limit for n in lengths)


class LazyEncoder:
    """An Encoder that loads its model on first use, so a fully cached run never pays for loading."""

    def __init__(self, spec: ModelSpec, **kwargs):
        self._spec, self._kwargs, self._encoder = spec, kwargs, None

    def load(self) -> Encoder:
        if self._encoder is None:
            self._encoder = Encoder(self._spec, **self._kwargs)
        return self._encoder

    def encode(self, texts: list[str], prompt: str) -> np.ndarray:
        return self.load().encode(texts, prompt)

    def count_truncated(self, texts: list[str], prompt: str) -> int:
        return self.load().count_truncated(texts, prompt)

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()


@dataclass(frozen=True)
class EncodeReport:
    """Vectors aligned with the input ids, and what it took to get them."""

    vectors: np.ndarray
    cache_dir: Path
    prompt: str
    n_texts: int
    n_unique: int
    n_cached: int  # unique texts found in the cache before this run
    n_encoded: int  # unique texts encoded now
    n_reused: int  # of the n_cached, copied now from a sibling entry (the same text in another role or view)
    n_truncated: int  # of the n_encoded, how many exceeded the token limit
    seconds: float

    @property
    def truncated_share(self) -> float:
        return self.n_truncated / self.n_encoded if self.n_encoded else 0.0

    @property
    def docs_per_s(self) -> float:
        return self.n_encoded / self.seconds if self.seconds > 0 else 0.0


def cache_key(spec: ModelSpec, role: Role, view: str, variant: str | None, prompt: str) -> CacheKey:
    return CacheKey(
        model_id=spec.id, hf_id=spec.hf_id, revision=spec.revision, prompt_variant=variant or spec.default_variant,
        prompt=prompt, role=role, view=view, dim=spec.dim,
    )


def encode_texts(
    spec: ModelSpec,
    role: Role,
    view: str,
    ids: Sequence[str],
    texts: Sequence[str],
    *,
    variant: str | None = None,
    task_type: TaskType | None = "retrieval",
    task: str | None = None,
    encoder: TextEncoder | None = None,
    device: str | None = None,
    batch_size: int = 32,
    commit_every: int | None = None,
    source: Source = "auto",
    cache_root: Path | None = None,
    progress: bool = True,
) -> EncodeReport:
    """Vectors for `texts` (one per id), encoding only what the cache does not already hold."""
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    empty = [i for i, t in zip(ids, texts) if not t or not t.strip()]
    if empty:
        raise ValueError(f"{len(empty)} empty text(s), e.g. id {empty[0]!r}; filter them out before encoding")
    started = time.perf_counter()
    prompt = spec.prompt_for(role, task_type=task_type, task=task, variant=variant)
    cache = EmbeddingCache(cache_key(spec, role, view, variant, prompt), root=cache_root)
    hashes = [text_hash(t) for t in texts]
    unique = dict(zip(hashes, texts))  # one encode per distinct text
    todo = [h for h in unique if h not in cache]
    n_reused = 0
    for sibling in cache.siblings() if todo else ():
        hits = [h for h in todo if h in sibling]
        if hits:
            cache.commit(hits, sibling.get(hits))
            n_reused += len(hits)
            todo = [h for h in todo if h not in cache]
    n_truncated = 0
    if todo:
        own_encoder = encoder is None
        enc = encoder or Encoder(spec, device=device, batch_size=batch_size, source=source)
        todo.sort(key=lambda h: -len(unique[h]))  # longest first, like sentence-transformers
        group = commit_every or batch_size * 8
        try:
            with tqdm(total=len(todo), unit="doc", desc=f"encode {spec.id}", disable=not progress) as bar:
                for start in range(0, len(todo), group):
                    chunk = todo[start : start + group]
                    chunk_texts = [unique[h] for h in chunk]
                    cache.commit(chunk, enc.encode(chunk_texts, prompt))
                    n_truncated += enc.count_truncated(chunk_texts, prompt)
                    bar.update(len(chunk))
        finally:
            if own_encoder:
                enc.close()
    return EncodeReport(
        vectors=cache.get(hashes), cache_dir=cache.dir, prompt=prompt, n_texts=len(texts), n_unique=len(unique),
        n_cached=len(unique) - len(todo), n_encoded=len(todo), n_reused=n_reused, n_truncated=n_truncated,
        seconds=time.perf_counter() - started,
    )


def get_or_encode(spec: ModelSpec, role: Role, view: str, ids: Sequence[str], texts: Sequence[str],
                  **kwargs) -> np.ndarray:
    """The vectors only (see encode_texts for the options and the run report)."""
    return encode_texts(spec, role, view, ids, texts, **kwargs).vectors


def parse_shard(value: str) -> tuple[int, int]:
    """'i/n' -> (i, n), with 0 <= i < n: this machine takes part i of n."""
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise ValueError(f"--shard {value!r}: expected i/n, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard {value!r}: need 0 <= i < n")
    return i, n


def in_shard(record_id: str, shard: tuple[int, int]) -> bool:
    """Stable split by id hash, independent of record order, so machines agree without talking."""
    i, n = shard
    return n == 1 or int.from_bytes(hashlib.sha1(record_id.encode("utf-8")).digest()[:8], "big") % n == i
