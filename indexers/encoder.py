"""Encoding texts with a model spec, through the embedding cache.

The core works on (ids, texts), so it serves corpora, query sets and tests alike. Texts already in
the cache are not encoded again; identical texts are encoded once; new texts are encoded longest
first (so each batch pads little) and committed to the cache in groups, so an interrupted run
resumes after its last committed group.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.metadata
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
from tqdm import tqdm

from evalctl.errors import BadInput, Failure
from evalctl.gc_tuning import thaw
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache, text_hash
from evalctl.indexers.encode_cost import measured
from evalctl.indexers.encode_options import IMPORTED, INSTALLED, Encoded, EncodeOptions, PartlyEncoded, TextEncoder
from evalctl.indexers.endpoints import served_versions
from evalctl.indexers.model_loader import Source, load_model
from evalctl.indexers.passages import PassageError
from evalctl.indexers.runtime import (CPU_BATCH_TOKENS, MAX_CUDA_BATCH_TOKENS, Runtime, current as current_runtime,
                                      resolve_devices, resolve_precision)
from evalctl.indexers.served_encoder import ServedEncoder
from evalctl.models import ModelSpec, Role

if TYPE_CHECKING:
    from pathlib import Path

    from sentence_transformers import SentenceTransformer


class EncodeFailure(Failure, RuntimeError):
    """Encoding cannot go on on this device (a single text does not fit in its memory)."""


# Models loaded in this process, most recently used last: every step of an `evalctl run` (index, query
# encoding per split and view, ...) reuses them instead of loading the weights again. Bounded by memory, not
# count: a model that would not fit beside the resident ones on its device evicts them first (8B + 8B + 12B in
# bf16 is 55 GB).
_SHARED: OrderedDict[tuple, SentenceTransformer] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


def resident_budget(device: str) -> int:
    """Bytes of weights the process keeps loaded on `device`: most of a GPU, half the RAM of a CPU."""
    if device.startswith("cuda"):
        import torch  # deferred: torch

        return int(0.8 * torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return int(0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _free(device: str) -> None:
    thaw()  # a frozen heap (evalctl.gc_tuning) would keep an evicted model in memory
    gc.collect()
    if device.startswith("cuda"):
        import torch  # deferred: torch

        torch.cuda.empty_cache()


def shared_model(spec: ModelSpec, device: str, source: Source, precision: str,
                 attn_implementation: str | None = None) -> SentenceTransformer:
    """The process's loaded model for this spec (id, revision, folder, length limit, loading options), device,
    source, precision and attention: loaded once, then shared by every encoder asking for the same. Only
    encoding uses it (read-only); fine-tuning loads its own copy."""
    loading = repr((spec.trust_remote_code, sorted(spec.model_kwargs.items()), sorted(spec.tokenizer_kwargs.items())))
    key = (spec.id, spec.revision, spec.path, spec.max_seq_length, device, source, precision, attn_implementation,
           loading)
    with _SHARED_LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            return _SHARED[key]
        needed = spec.params_m * 1e6 * _BYTES[precision]
        on_device = [k for k in _SHARED if k[4] == device]
        evicted = False
        while on_device and sum(_weight_bytes(_SHARED[k]) for k in on_device) + needed > resident_budget(device):
            del _SHARED[on_device.pop(0)]  # least recently used first
            evicted = True
        if evicted:
            _free(device)  # before the new weights arrive, not after
        model = load_model(spec, device=device, source=source, precision=precision,
                           attn_implementation=attn_implementation)
        model.eval()
        _SHARED[key] = model
        return model


class PrecisionError(BadInput, ValueError):
    """A precision this device cannot run (evalctl.indexers.runtime.resolve_precision says why)."""


def encoding_precision(spec: ModelSpec, runtime: Runtime) -> str:
    """The precision an encoder made with `runtime` runs at, known before any model loads (for the cache key); a
    served model's is its spec's dtype (the server decides it, not this process)."""
    if spec.endpoint is not None:
        return spec.dtype
    try:
        return resolve_precision(spec, resolve_devices(runtime.device)[0], runtime.precision)
    except ValueError as e:
        raise PrecisionError(f"model {spec.id}: {e}") from None


def default_batch_tokens(model, device: str, precision: str, attn_implementation: str | None) -> int:
    """Padded tokens per forward pass: a fixed CPU_BATCH_TOKENS on a CPU; on CUDA what 70% of the memory free
    after loading holds, at the activation bytes per token of one layer's forward pass (the only one alive at
    inference), plus the score matrix where attention is eager."""
    if not device.startswith("cuda"):
        return CPU_BATCH_TOKENS
    import torch  # deferred: torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    cfg = model[0].auto_model.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    hidden = cfg.hidden_size
    per_token = _BYTES[precision] * (8 * hidden + 3 * getattr(cfg, "intermediate_size", 4 * hidden))
    if attn_implementation == "eager" or getattr(cfg, "_attn_implementation", None) == "eager":
        per_token += _BYTES[precision] * 2 * cfg.num_attention_heads * model.max_seq_length
    return max(model.max_seq_length, min(MAX_CUDA_BATCH_TOKENS, int(0.7 * free / per_token)))


def plan_batches(lengths: Sequence[int], max_tokens: int, max_texts: int | None = None) -> list[list[int]]:
    """Positions of `lengths` (token counts, longest first) grouped into batches whose padded size, texts x the
    longest, stays within max_tokens (a text longer than that goes alone)."""
    batches: list[list[int]] = []
    for i, n in enumerate(lengths):
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens \
                and (max_texts is None or len(batches[-1]) < max_texts):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def assign_batches(batches: list[list[int]], lengths: Sequence[int], n_devices: int) -> list[list[list[int]]]:
    """The batches dealt to devices, each to the one with the fewest padded tokens so far (largest first)."""
    load = [0] * n_devices
    dealt: list[list[list[int]]] = [[] for _ in range(n_devices)]
    for batch in sorted(batches, key=lambda b: -len(b) * lengths[b[0]]):
        d = load.index(min(load))
        dealt[d].append(batch)
        load[d] += len(batch) * lengths[batch[0]]
    return dealt


def _lengths_and_cut(features, limit: int) -> tuple[list[int], int]:
    """Token counts per text (padding not counted) and how many were cut, from the tokenisation itself: a fast
    tokenizer's encodings say whether anything overflowed; otherwise (unpadded flash batches, slow tokenizers) a
    text that reached the limit counts as cut."""
    encodings = getattr(features, "encodings", None)
    if encodings:  # a padded batch's encodings are all as long as its longest: their attention masks count
        return [sum(e.attention_mask) for e in encodings], sum(bool(e.overflowing) for e in encodings)
    if "attention_mask" in features:
        lengths = features["attention_mask"].sum(1).tolist()
    else:  # flattened: one row, positions restart at 0 where each text begins
        starts = (features["position_ids"][0] == 0).nonzero().flatten().tolist()
        lengths = [b - a for a, b in zip(starts, [*starts[1:], features["position_ids"].shape[1]])]
    return lengths, sum(n >= limit for n in lengths)


class Encoder:
    """Loaded model replica(s), one per device (shared within the process, see shared_model), and how they
    run: precision, token budget per batch, attention. Texts are tokenised once, by the model's own
    preprocessing, batch by batch; token counts, truncation and the budget's calibration come from it."""

    def __init__(self, spec: ModelSpec, *, device: str | None = None, precision: str | None = None,
                 max_batch_tokens: int | None = None, attn_implementation: str | None = None,
                 batch_size: int | None = None, source: Source = "auto"):
        rt = Runtime(device, precision, max_batch_tokens, attn_implementation).over(current_runtime())
        self.spec, self.dim, self.max_texts = spec, spec.dim, batch_size
        self.precision = encoding_precision(spec, rt)
        self.devices = resolve_devices(rt.device)
        self.models = [shared_model(spec, d, source, self.precision, rt.attn_implementation)
                       for d in self.devices]
        self.model = self.models[0]
        self.max_batch_tokens = rt.max_batch_tokens or default_batch_tokens(
            self.model, self.devices[0], self.precision, rt.attn_implementation)
        self.oom_halvings = 0
        self.tokens = 0  # tokens encoded, as the tokenizer made them (cut at max_seq_length): encode_cost counts them
        self._chars_per_token = 3.0  # conservative start (English BPE: ~4); calibrated on each batch
        self._lock = threading.Lock()

    def close(self) -> None:
        self.models = []  # the process cache decides when the weights go
        self.model = None

    def _estimate(self, text: str, prompt: str) -> int:
        return min(self.spec.max_seq_length, int((len(prompt) + len(text)) / self._chars_per_token) + 2)

    def encode(self, texts: list[str], prompt: str) -> Encoded:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        estimated = [self._estimate(texts[i], prompt) for i in order]
        batches = plan_batches(estimated, self.max_batch_tokens, self.max_texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        cut = [0]

        def run(model, device: str, todo: list[list[int]]) -> None:
            for batch in todo:
                idx = [order[p] for p in batch]
                vectors, n_cut = self._forward(model, device, [texts[i] for i in idx], prompt)
                out[idx] = vectors
                with self._lock:
                    cut[0] += n_cut

        if len(self.models) == 1:
            run(self.model, self.devices[0], batches)
        else:  # one thread per replica: tokenizers and CUDA kernels release the GIL
            dealt = assign_batches(batches, estimated, len(self.models))
            with ThreadPoolExecutor(len(self.models)) as pool:
                for f in [pool.submit(run, m, d, b) for m, d, b in zip(self.models, self.devices, dealt)]:
                    f.result()
        return Encoded(out, cut[0])

    def _forward(self, model, device: str, batch: list[str], prompt: str) -> tuple[np.ndarray, int]:
        """One batch through the model; on CUDA out-of-memory the batch (and the budget) halves and it retries."""
        import torch  # deferred: torch, sentence_transformers
        from sentence_transformers.util import batch_to_device

        # prompt "" is no prompt: preprocess adds only what it is given, never the model's default_prompt_name
        features = model.preprocess(batch, prompt=prompt)
        lengths, n_cut = _lengths_and_cut(features, self.spec.max_seq_length)
        try:
            with torch.inference_mode():
                # float32 before normalising: a bfloat16 norm is off by up to 0.4%, and every score with it
                emb = model(batch_to_device(features, torch.device(device)))["sentence_embedding"].float()
                if self.spec.normalize:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=1)
                vectors = emb.cpu().numpy()
        except torch.cuda.OutOfMemoryError:
            del features
            if len(batch) == 1:
                raise EncodeFailure(f"model {self.spec.id}: one text of {lengths[0]} tokens does not fit on {device} "
                                    f"at {self.precision}; lower max_seq_length in its spec or use a larger device") from None
            _free(device)
            with self._lock:
                self.oom_halvings += 1
                self.max_batch_tokens = max(1, min(self.max_batch_tokens, len(batch) * max(lengths)) // 2)
            half = len(batch) // 2
            (a, cut_a), (b, cut_b) = (self._forward(model, device, part, prompt) for part in (batch[:half], batch[half:]))
            return np.concatenate([a, b]), cut_a + cut_b
        kept = [(len(prompt) + len(t), n) for t, n in zip(batch, lengths) if n < self.spec.max_seq_length]
        with self._lock:
            self.tokens += sum(lengths)
            if kept:  # texts that were not cut tell how many characters a token takes
                self._chars_per_token = max(1.0, 0.9 * sum(c for c, _ in kept) / sum(n for _, n in kept))
        return vectors, n_cut


def make_encoder(spec: ModelSpec, **kwargs) -> TextEncoder:
    """The encoder of `spec` (Encoder's keyword arguments): a served model's ServedEncoder (which takes only the
    batch size: device, precision and attention are the server's), else a loaded Encoder."""
    if spec.endpoint is not None:
        return ServedEncoder(spec, batch_size=kwargs.get("batch_size"))
    return Encoder(spec, **kwargs)


class LazyEncoder:
    """An Encoder that loads its model on first use, so a fully cached run never pays for loading."""

    def __init__(self, spec: ModelSpec, **kwargs):
        self._spec, self._kwargs, self._encoder = spec, kwargs, None
        self.dim = spec.dim
        keys = ("device", "precision", "max_batch_tokens", "attn_implementation")
        rt = Runtime(**{k: kwargs.get(k) for k in keys}).over(current_runtime())
        self.precision = encoding_precision(spec, rt)

    def __getattr__(self, name: str):  # the loaded encoder's settings and counters (devices, oom_halvings, ...)
        if name.startswith("_") or self._encoder is None:
            raise AttributeError(name)
        return getattr(self._encoder, name)

    def load(self) -> TextEncoder:
        if self._encoder is None:
            self._encoder = make_encoder(self._spec, **self._kwargs)
        return self._encoder

    def check_dim(self) -> None:
        """Prove the vectors' width before anything is made of them: loading checks a local model's weights
        (model_loader), a served model is asked for one text."""
        encoder = self.load()
        if isinstance(encoder, ServedEncoder):
            encoder.check_dim()

    def encode(self, texts: list[str], prompt: str) -> Encoded:
        return self.load().encode(texts, prompt)

    def tokenizer(self):
        """The tokenizer that encodes the model's texts (passages are cut in its tokens); a served model's is the
        server's, not here."""
        encoder = self.load()
        if isinstance(encoder, ServedEncoder):
            raise PassageError(f"model {self._spec.id} is served: its tokenizer is the server's, and passages are cut "
                                "in the tokens of the tokenizer that encodes them; index passages with a local model")
        return encoder.model.tokenizer

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()


@dataclass(frozen=True)
class EncodeReport:
    """Vectors aligned with the input ids, and what it took to get them."""

    vectors: np.ndarray
    cache_dir: Path
    prompt: str
    precision: str
    n_texts: int
    n_unique: int
    n_cached: int  # unique texts found in the cache before this run
    n_encoded: int  # unique texts encoded now
    n_reused: int  # of the n_cached, copied now from a sibling entry (the same text in another role or view)
    n_truncated: int  # of the n_encoded, how many exceeded the token limit
    seconds: float
    max_batch_tokens: int | None = None  # the token budget per batch at the end (None: nothing encoded)
    oom_halvings: int = 0  # CUDA out-of-memory retries, each with half the batch
    cost: dict | None = None  # this run's encode_cost measurement (None: nothing was encoded)

    @property
    def truncated_share(self) -> float:
        return self.n_truncated / self.n_encoded if self.n_encoded else 0.0

    @property
    def docs_per_s(self) -> float:
        return self.n_encoded / self.seconds if self.seconds > 0 else 0.0


_VECTOR_PACKAGES = ("torch", "transformers", "sentence-transformers")
# evalctl's own arithmetic on a half-precision embedding, raised when it changes such vectors (2: normalised in
# float32, not in the model's dtype). float32 and int8 embeddings never went through it: their versions, and so
# their cache digests and index identities, stay as they were.
HALF_PRECISION_ARITHMETIC = 2
HALF_PRECISIONS = ("bfloat16", "float16")


def encoding_versions(spec: ModelSpec | None = None, precision: str | None = None) -> str:
    """The major.minor versions of the packages whose numerics make the vectors (a patch release does not
    change kernels' results; a minor one may), e.g. "torch 2.15, transformers 5.24, sentence-transformers 6.2",
    and for bfloat16 or float16 vectors evalctl's HALF_PRECISION_ARITHMETIC; for a served model (`spec` with an
    endpoint), its served name and revision label instead."""
    if spec is not None and spec.endpoint is not None:
        return served_versions(spec.endpoint)
    packages = ", ".join(f"{p} {'.'.join(importlib.metadata.version(p).split('.')[:2])}" for p in _VECTOR_PACKAGES)
    return f"{packages}, evalctl half {HALF_PRECISION_ARITHMETIC}" if precision in HALF_PRECISIONS else packages


def cache_key(spec: ModelSpec, role: Role, view: str, variant: str | None, *, prompt: str,
              precision: str | None = None, versions: str | None = INSTALLED, corpus: str | None = None) -> CacheKey:
    """The cache entry of these vectors. precision None: the process runtime's for this model; versions: those of
    the installed packages by default, an index's own as its manifest names them, None for an entry made before
    versions were keyed (embedding_cache.LEGACY_FORMAT). corpus: the corpus the vectors are for, which keys
    imported entries only (vectors made elsewhere serve the corpus they were imported for)."""
    precision = precision or encoding_precision(spec, current_runtime())
    return CacheKey(
        model_id=spec.id, hf_id=spec.hf_id, revision=spec.revision, prompt_variant=variant or spec.default_variant,
        prompt=prompt, role=role, view=view, dim=spec.dim, precision=precision,
        versions=encoding_versions(spec, precision) if versions == INSTALLED else versions,
        corpus=corpus if versions == IMPORTED else None,
    )


def encode_texts(spec: ModelSpec, role: Role, view: str, ids: Sequence[str], texts: Sequence[str],
                 options: EncodeOptions = EncodeOptions()) -> EncodeReport:
    """Vectors for `texts` (one per id), encoding only what the cache does not already hold."""
    o = options
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    empty = [i for i, t in zip(ids, texts) if not t or not t.strip()]
    if empty:
        raise ValueError(f"{len(empty)} empty text(s), e.g. id {empty[0]!r}; filter them out before encoding")
    started = time.perf_counter()
    rt = Runtime(device=o.device).over(o.runtime or Runtime()).over(current_runtime())
    precision = o.encoder.precision if o.encoder is not None else encoding_precision(spec, rt)
    prompt = spec.prompt_for(role, task_type=o.task_type, task=o.task, variant=o.variant)
    key = cache_key(spec, role, view, o.variant, prompt=prompt, precision=precision, versions=o.versions,
                    corpus=o.corpus)
    cache = EmbeddingCache(key, root=o.cache_root)
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
    n_truncated, budget, halvings, cost = 0, None, 0, None
    if todo:
        own_encoder = o.encoder is None
        enc = o.encoder or make_encoder(spec, device=rt.device, precision=rt.precision,
                                        max_batch_tokens=rt.max_batch_tokens, attn_implementation=rt.attn_implementation,
                                        batch_size=o.batch_size, source=o.source)
        todo.sort(key=lambda h: -len(unique[h]))  # longest first: a group's batches pad little
        if isinstance(enc, LazyEncoder):  # its model loads now, outside the encoding time measured below
            enc.load()
        halvings = getattr(enc, "oom_halvings", 0)  # a shared encoder counts across calls
        tokens = getattr(enc, "tokens", None)
        served = enc.usage() if hasattr(enc, "usage") else {}  # a served model's requests, retries, tokens
        encoding_started = time.perf_counter()
        try:
            with tqdm(total=len(todo), unit="doc", desc=f"encode {spec.id}", disable=not o.progress) as bar:
                for start in range(0, len(todo), o.commit_every):
                    chunk = todo[start : start + o.commit_every]
                    try:
                        encoded = enc.encode([unique[h] for h in chunk], prompt)
                    except PartlyEncoded as partly:  # keep what was encoded before the failure
                        if partly.done:
                            cache.commit([chunk[i] for i in partly.done], partly.vectors)
                        raise partly.cause from None
                    cache.commit(chunk, encoded.vectors)
                    n_truncated += encoded.n_truncated
                    bar.update(len(chunk))
        finally:
            encoding_seconds = time.perf_counter() - encoding_started
            budget = getattr(enc, "max_batch_tokens", None)
            halvings = getattr(enc, "oom_halvings", 0) - halvings
            # a served model's tokens are the server's `usage` (None when it answered none)
            tokens = getattr(enc, "tokens", 0) - tokens if tokens is not None else None
            if hasattr(enc, "usage"):
                served = {k: v - served.get(k, 0) if isinstance(v, int) else v for k, v in enc.usage().items()}
            if own_encoder:
                enc.close()
        cost = measured(enc, key, o.batch_size, len(todo), tokens or None, encoding_seconds).record()
        cache.record_run({"device": ",".join(getattr(enc, "devices", [])) or None, "precision": precision,
                          "max_batch_tokens": budget, "oom_halvings": halvings, "n_encoded": len(todo),
                          "n_truncated": n_truncated, "seconds": round(time.perf_counter() - started, 3),
                          "versions": encoding_versions(spec, precision), "cost": cost, **served})
    return EncodeReport(
        vectors=cache.get(hashes), cache_dir=cache.dir, prompt=prompt, precision=precision, n_texts=len(texts),
        n_unique=len(unique), n_cached=len(unique) - len(todo), n_encoded=len(todo), n_reused=n_reused,
        n_truncated=n_truncated, seconds=time.perf_counter() - started, max_batch_tokens=budget,
        oom_halvings=halvings, cost=cost,
    )


def get_or_encode(spec: ModelSpec, role: Role, view: str, ids: Sequence[str], texts: Sequence[str],
                  **options) -> np.ndarray:
    """The vectors only (`options`: EncodeOptions' fields; encode_texts gives the run report too)."""
    return encode_texts(spec, role, view, ids, texts, EncodeOptions(**options)).vectors


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
