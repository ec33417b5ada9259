"""Embedding cache: float32 vectors on disk, keyed by everything that changes a vector.

Layout: cache_root()/embeddings/<model id>/<key digest>/
  meta.json                         the key in clear text (model, revision, prompt variant and string,
                                    role, view, dim, precision, package versions; an imported entry's
                                    corpus); checked on every open
  runs/<time>-<pid>.json            how each run encoded into it (device, precision, token budget,
                                    out-of-memory halvings, truncated texts) and what it cost (`cost`:
                                    evalctl.indexers.encode_cost; never part of the key)
  <digest8>-<uid>.vectors.npy       float32 [n, dim]
  <digest8>-<uid>.<sum>.hashes.npy  uint8 [n, 32]: sha256 of each text, row-aligned with the vectors;
                                    <sum> is "r" + a digest of the hashes and then the vectors, in row
                                    order (so rows swapped in either file are caught), verified before
                                    first use; shards written before it (<sum> without "r") carry a
                                    checksum of the vectors alone, which misses a reordered hashes file

A shard is committed by renaming its hashes file into place after its vectors file: a run killed at
any point leaves either a whole shard or nothing that counts, so a rerun resumes after the last
committed batch. Role and prompt string are part of the key, so query and document vectors of the
same text never share an entry (the collision of mteb#5383). The encoder sees only prompt + text, so an entry
may copy vectors from a sibling whose key differs in role or view alone (`siblings`): a query that is a
document's own text is not encoded twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from evalctl.atomic import write_text, writing
from evalctl.clock import utc_now
from evalctl.digests import array_digest
from evalctl.errors import Failure
from evalctl.paths import cache_root

FORMAT = 2
LEGACY_FORMAT = 1  # no precision or versions in the key
_HASH_BYTES = 32


class EmbeddingCacheError(Failure, RuntimeError):
    """A cache entry that must not be used (corrupt, wrong model, wrong dimension); names the file."""


@dataclass(frozen=True)
class CacheKey:
    """Everything besides the text itself that determines a vector."""

    model_id: str
    hf_id: str
    revision: str
    prompt_variant: str
    prompt: str
    role: str
    view: str
    dim: int
    # The precision the model ran at and the versions (major.minor) of torch, transformers and
    # sentence-transformers. Entries made before these were keyed (format 1) carry neither: they are read as
    # float32 of unknown versions (versions None), under their old digest, so indexes built from them still
    # read back and verify; a new encode (versions known) never adds to them.
    precision: str = "float32"
    versions: str | None = None
    # The corpus whose vectors an imported entry holds (`evalctl vectors import`): vectors made elsewhere serve
    # the corpus they were imported for only. None for vectors encoded here (the same for every corpus), and
    # then absent from meta.json, so those entries keep their digests.
    corpus: str | None = None

    def __post_init__(self) -> None:
        if self.versions is None and (self.precision != "float32" or self.corpus is not None):
            raise ValueError("a cache key without versions is a format-1 entry, which is float32 of no corpus")

    def meta(self) -> dict:
        """The key as meta.json holds it."""
        fields = asdict(self)
        if self.corpus is None:
            del fields["corpus"]
        if self.versions is None:
            del fields["precision"], fields["versions"]
            return {"format": LEGACY_FORMAT, **fields}
        return {"format": FORMAT, **fields}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.meta(), sort_keys=True).encode("utf-8")).hexdigest()[:24]


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


_ROWS = "r"  # a shard checksum over hashes and vectors (new shards); without it, over the vectors alone


def _checksum(hashes: np.ndarray, vectors: np.ndarray) -> str:
    return _ROWS + array_digest(hashes, vectors)[:16]


def _legacy_checksum(vectors: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(vectors).data, digest_size=8).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _atomic_save(path: Path, array: np.ndarray) -> None:
    with writing(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


class EmbeddingCache:
    """The committed vectors of one CacheKey; look up by text hash, append whole shards."""

    def __init__(self, key: CacheKey, root: Path | None = None):
        self.key = key
        self.dir = (root or cache_root() / "embeddings") / key.model_id / key.digest()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._prefix = key.digest()[:8]
        self._check_meta()
        self._shards: list[tuple[Path, Path, str]] = []  # (vectors, hashes file, checksum) per shard, in index order
        self._verified: set[int] = set()  # shards whose checksum was checked in this process
        self._index: dict[bytes, tuple[int, int]] = {}  # text hash -> (shard number, row)
        for hashes_file in sorted(self.dir.glob("*.hashes.npy")):
            self._add_shard(hashes_file)

    def _check_meta(self) -> None:
        meta_file = self.dir / "meta.json"
        expected = self.key.meta()
        if not meta_file.exists():
            write_text(meta_file, json.dumps(expected, indent=1, sort_keys=True))
            return
        try:
            found = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise EmbeddingCacheError(f"{meta_file}: unreadable ({e}); delete {self.dir} to rebuild it") from None
        if found != expected:
            diff = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
            raise EmbeddingCacheError(
                f"{meta_file}: cache belongs to another key (found vs expected: {diff}); delete {self.dir}"
            )

    def record_run(self, run: dict) -> None:
        """How one run encoded into this entry (device, precision, token budget, out-of-memory halvings, ...),
        as runs/<time>-<pid>.json beside the shards: the entry's record of how its vectors were made."""
        stem = f"{time.time_ns():020d}-{os.getpid()}"
        write_text(self.dir / "runs" / f"{stem}.json", json.dumps({"at": utc_now(), **run}, sort_keys=True))

    def runs(self) -> list[dict]:
        return read_runs(self.dir)

    def remove_leftovers(self) -> list[Path]:
        """Remove what writers killed on this machine left here: their temporaries (atomic.writing's hidden
        `.<name>.<pid>-<id>`) and vectors files whose hashes file (the commit point) never came. The cache
        ignores both; a writer still alive keeps its files. Returns the removed paths."""
        committed = {p.name.split(".", 1)[0] for p in self.dir.glob("*.hashes.npy")}
        removed = []
        for path in [*self.dir.glob(".*"), *(self.dir / "runs").glob(".*"), *self.dir.glob("*.vectors.npy")]:
            if path.name.endswith(".vectors.npy"):
                stem = path.name.split(".", 1)[0]
                pid = stem.rsplit("-", 1)[-1] if stem not in committed else None
            else:
                pid = path.name.rsplit(".", 1)[-1].split("-", 1)[0]
            if path.is_file() and pid and pid.isdigit() and not _alive(int(pid)):
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def _add_shard(self, hashes_file: Path) -> None:
        stem, checksum, _ = hashes_file.name.split(".", 2)
        vectors_file = hashes_file.with_name(f"{stem}.vectors.npy")
        if not stem.startswith(self._prefix + "-"):
            raise EmbeddingCacheError(f"{hashes_file}: shard of another cache key in {self.dir}; remove it")
        try:
            hashes = np.load(hashes_file, mmap_mode="r", allow_pickle=False)
            vectors = np.load(vectors_file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise EmbeddingCacheError(f"{vectors_file}: corrupt or truncated shard ({e}); remove it and "
                                      f"{hashes_file.name} to re-encode its texts") from None
        problem = None
        if hashes.dtype != np.uint8 or hashes.ndim != 2 or hashes.shape[1] != _HASH_BYTES:
            problem = f"hashes have shape {hashes.shape} and dtype {hashes.dtype}"
        elif vectors.dtype != np.float32 or vectors.ndim != 2:
            problem = f"vectors have shape {vectors.shape} and dtype {vectors.dtype}, expected float32 [n, dim]"
        elif vectors.shape[1] != self.key.dim:
            problem = f"vectors are {vectors.shape[1]}-dim, model {self.key.model_id} gives {self.key.dim}"
        elif vectors.shape[0] != hashes.shape[0]:
            problem = f"{hashes.shape[0]} hashes but {vectors.shape[0]} vectors"
        if problem:
            raise EmbeddingCacheError(f"{vectors_file}: {problem}; remove this shard to re-encode its texts")
        number = len(self._shards)
        self._shards.append((vectors_file, hashes_file, checksum))
        for row, h in enumerate(hashes):
            self._index.setdefault(h.tobytes(), (number, row))

    def __len__(self) -> int:
        return len(self._index)

    def siblings(self) -> list[EmbeddingCache]:
        """Other entries of this model whose key differs only in role or view: same weights, same prompt
        string, so the same text has the same vector there."""
        mine = self.key.meta()
        same = {k: v for k, v in mine.items() if k not in ("role", "view")}
        found = []
        for meta_file in sorted(self.dir.parent.glob("*/meta.json")):
            if meta_file.parent == self.dir:
                continue
            try:
                meta = json.loads(meta_file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue  # an unreadable entry is reported when its own key opens it
            if set(meta) == set(mine) and all(meta[k] == v for k, v in same.items()):
                key = CacheKey(**{k: meta[k] for k in mine if k != "format"})
                found.append(EmbeddingCache(key, root=self.dir.parent.parent))
        return found

    def __contains__(self, h: bytes) -> bool:
        return h in self._index

    def commit(self, hashes: list[bytes], vectors: np.ndarray) -> None:
        """Store one batch as a new shard; visible (and resumable) only once complete."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(hashes), self.key.dim):
            raise EmbeddingCacheError(
                f"refusing to store vectors of shape {vectors.shape} for {len(hashes)} texts of a "
                f"{self.key.dim}-dim model in {self.dir}"
            )
        if not np.isfinite(vectors).all():
            raise EmbeddingCacheError(f"refusing to store non-finite vectors from model {self.key.model_id}")
        stem = f"{self._prefix}-{time.time_ns():020d}-{os.getpid()}"
        hash_array = np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(len(hashes), _HASH_BYTES)
        hashes_file = self.dir / f"{stem}.{_checksum(hash_array, vectors)}.hashes.npy"
        _atomic_save(self.dir / f"{stem}.vectors.npy", vectors)
        _atomic_save(hashes_file, hash_array)  # the commit point
        self._add_shard(hashes_file)
        self._verified.add(len(self._shards) - 1)  # written from memory just now

    def _shard_vectors(self, number: int) -> np.ndarray:
        vectors_file, hashes_file, checksum = self._shards[number]
        vectors = np.load(vectors_file, mmap_mode="r", allow_pickle=False)
        if number not in self._verified:
            found = (_checksum(np.load(hashes_file, mmap_mode="r", allow_pickle=False), vectors)
                     if checksum.startswith(_ROWS) else _legacy_checksum(vectors))
            if found != checksum:
                raise EmbeddingCacheError(
                    f"{vectors_file}: contents (or the row order of {hashes_file.name}) do not match their checksum "
                    "(corrupt); remove this shard and its hashes file to re-encode its texts"
                )
            self._verified.add(number)
        return vectors

    def get(self, hashes: list[bytes]) -> np.ndarray:
        """Vectors for these text hashes, in order; every hash must be committed."""
        out = np.empty((len(hashes), self.key.dim), dtype=np.float32)
        by_shard: dict[int, tuple[list[int], list[int]]] = {}
        for i, h in enumerate(hashes):
            shard, row = self._index[h]
            positions, rows = by_shard.setdefault(shard, ([], []))
            positions.append(i)
            rows.append(row)
        for shard, (positions, rows) in by_shard.items():
            out[positions] = self._shard_vectors(shard)[rows]
        if not np.isfinite(out).all():
            raise EmbeddingCacheError(f"non-finite vectors read from {self.dir}; remove its shards to re-encode")
        return out

    def lookup(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(vectors, found): cached vectors by text, for verification; rows not found are NaN."""
        return self.lookup_hashes([text_hash(t) for t in texts])

    def lookup_hashes(self, hashes: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """lookup() by text_hash values."""
        found = np.array([h in self._index for h in hashes], dtype=bool)
        out = np.full((len(hashes), self.key.dim), np.nan, dtype=np.float32)
        if found.any():
            out[found] = self.get([h for h, ok in zip(hashes, found) if ok])
        return out, found


def read_runs(entry_dir: Path) -> list[dict]:
    """The run records of the cache entry in `entry_dir`, oldest first."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((entry_dir / "runs").glob("*.json"))]


def encode_devices(model_id: str, root: Path | None = None) -> set[str]:
    """The devices (cpu, cuda:0 ...) every recorded encoding of this model's cached vectors ran on (each entry's
    runs/*.json): what a report can say the vectors were made on."""
    base = (root or cache_root() / "embeddings") / model_id
    return {d for p in base.glob("*/runs/*.json") if (d := json.loads(p.read_text(encoding="utf-8")).get("device"))}
