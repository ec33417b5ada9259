"""`evalctl vectors export`: every document's vector and codes for one view, read back from its index.

Vectors are streamed from a point-in-time with `search_after` on the keyword `doc_id` (scroll-free, no
10k window, a consistent snapshot): first the ids in doc_id order, then vectors and codes in parallel
slices, each page's vectors written straight into their rows of an on-disk `.npy` (open_memmap), so
client memory stays at a few pages plus the id -> row map and the codes lines, whatever the corpus size.
The export is written under a temporary name and renamed into place once it is complete and checked:

  cache_root()/vectors/<index>/<view>/
    vectors.npy     float32 [n, dim], row i is the document on line i of ids.txt
    ids.txt         document ids, in doc_id order
    codes.jsonl     {"cpc": [...], "ipc": [...], "labels": [...]} per row, as stored in the index
    manifest.json   index, field, index manifest, count, dim, and the checks that passed

Checks: the count equals the documents of the snapshot carrying the field and the corpus records that
render the view (same ids); every vector whose text is in the embedding cache equals the cached one
(bit-identical when the index was loaded from this cache; within REENCODE_TOLERANCE when another run
filled the cache; within the fp16 tolerance for sq_fp16 indexes), as `index verify` does for a sample.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from numpy.lib.format import open_memmap
from tqdm import tqdm

from evalctl.atomic import new_staging_dir, replace_dir
from evalctl.clock import utc_now
from evalctl.errors import BadInput
from evalctl.indexers.index_contract import IndexState, open_index
from evalctl.indexers.index_layout import vector_field
from evalctl.paths import cache_root
from evalctl.corpus.patent_record import PatentRecord
from evalctl.provenance import code_version
from evalctl.specs import SpecError

# Codes kept per document: what label sets read (platform/corpus/label_sets.py).
CODE_FIELDS = ("cpc", "ipc", "labels")
PIT_KEEP_ALIVE = "5m"
# Bytes of JSON per page (about 10 characters per float), all slices together: 4096-d vectors go ~500 a
# page, 384-d ~5000.
PAGE_BYTES = 20_000_000
SLICES = 3  # vector pages fetched in parallel (see _stream)
ID_PAGE = 10_000  # ids per page (index.max_result_window)


class ReadbackError(BadInput, ValueError):
    """The index cannot be exported as asked, or the export disagrees with the index, corpus or cache."""


@dataclass
class VectorExport:
    """A complete export: vectors (memory-mapped, read-only), ids and codes row by row."""

    path: Path
    manifest: dict
    ids: list[str]
    vectors: np.ndarray
    codes: list[dict]

    def rows(self, ids: list[str]) -> np.ndarray:
        pos = {d: i for i, d in enumerate(self.ids)}
        return np.asarray(self.vectors[[pos[d] for d in ids]])

    def records(self) -> Iterator[PatentRecord]:
        """Id and codes of each row as a PatentRecord, so label sets apply unchanged."""
        for doc_id, codes in zip(self.ids, self.codes):
            yield PatentRecord.from_dict({"id": doc_id, **codes})


@dataclass
class ExportReport:
    export: VectorExport
    reused: bool
    seconds: float = 0.0
    checks: list[str] = field(default_factory=list)

    @property
    def vectors_per_s(self) -> float:
        return len(self.export.ids) / self.seconds if self.seconds else 0.0


def export_dir(index: str, view: str) -> Path:
    return cache_root() / "vectors" / index / view


def load_export(index: str, view: str) -> VectorExport | None:
    path = export_dir(index, view)
    if not (path / "manifest.json").is_file():
        return None
    manifest = json.loads((path / "manifest.json").read_text())
    ids = (path / "ids.txt").read_text(encoding="utf-8").splitlines()
    codes = [json.loads(line) for line in (path / "codes.jsonl").read_text(encoding="utf-8").splitlines()]
    vectors = np.load(path / "vectors.npy", mmap_mode="r", allow_pickle=False)
    return VectorExport(path, manifest, ids, vectors, codes)


def page_size(dim: int) -> int:
    return max(50, min(5000, PAGE_BYTES // (dim * 10)))


def iter_pages(client, pit: str, fields: list[str] | bool, query: dict, size: int,
               slice_: tuple[int, int] | None = None) -> Iterator[tuple[int, list[dict]]]:
    """(slice total, hits) per page of a point-in-time (or of one slice of it), sorted on doc_id; `fields`
    is the `_source` filter (False: none)."""
    after = None
    while True:
        body = {"pit": {"id": pit, "keep_alive": PIT_KEEP_ALIVE}, "size": size, "query": query,
                "sort": [{"doc_id": "asc"}], "_source": fields, "track_total_hits": after is None}
        if slice_ is not None:
            body["slice"] = {"id": slice_[0], "max": slice_[1]}
        if after is not None:
            body["search_after"] = after
        resp = client.search(body=body)
        pit, hits = resp.get("pit_id", pit), resp["hits"]
        if not hits["hits"]:
            return
        yield hits["total"]["value"] if after is None else -1, hits["hits"]
        after = hits["hits"][-1]["sort"]


def _stream(client, index: str, view: str, dim: int, dest: Path, page_docs: int, progress: bool) -> int:
    """Write vectors.npy, ids.txt and codes.jsonl into `dest`; returns the row count.

    Two passes over one point-in-time: the ids in doc_id order, from the sort values alone (no `_source`
    to load: 4,000 ids in 0.08 s), which fixes each document's row; then vectors and codes in SLICES
    parallel slices, each page's vectors written straight into their rows of the on-disk array (codes are
    kept by row, a short line each, and written at the end). The node loads and filters `_source` on
    several threads at once, and the client parses one slice's page while the node prepares another's.
    Measured on this 2-core machine, 4,000 384-d vectors: one sorted stream 0.49 s, 3 slices 0.38 s, a
    plain scroll of [doc_id, vector] 0.57-0.70 s; under a load of 5, 2,471 vectors: 1.7 s one stream,
    0.82 s 3 slices, 1.3 s the scroll."""
    vec = vector_field(view)
    query = {"exists": {"field": vec}}
    pit = client.create_pit(index=index, keep_alive=PIT_KEEP_ALIVE)["pit_id"]
    try:
        row: dict[str, int] = {}
        with open(dest / "ids.txt", "w", encoding="utf-8") as ids_f:
            for _, hits in iter_pages(client, pit, False, query, ID_PAGE):  # the sort value is the doc_id
                for hit in hits:
                    doc_id = hit["sort"][0]
                    if doc_id in row:
                        raise ReadbackError(f"{index}: duplicate doc_id values in the index ({doc_id!r})")
                    row[doc_id] = len(row)
                    ids_f.write(doc_id + "\n")
        vectors = open_memmap(dest / "vectors.npy", mode="w+", dtype=np.float32, shape=(len(row), dim))
        codes: list[str | None] = [None] * len(row)  # codes.jsonl lines, by row
        lock = threading.Lock()

        def fetch(part: int) -> None:
            for _, hits in iter_pages(client, pit, ["doc_id", vec, *CODE_FIELDS], query, max(50, page_docs // SLICES),
                                      (part, SLICES)):
                sources = [h["_source"] for h in hits]
                try:
                    rows = np.fromiter((row[s["doc_id"]] for s in sources), dtype=np.int64, count=len(hits))
                except KeyError as e:
                    raise ReadbackError(f"{index}: document {e} came back with a vector but not in the id pass")
                vectors[rows] = np.array([s[vec] for s in sources], dtype=np.float32)
                for r, s in zip(rows.tolist(), sources):
                    codes[r] = json.dumps({k: s.get(k) or [] for k in CODE_FIELDS})
                with lock:
                    bar.update(len(hits))

        with tqdm(total=len(row), unit="vec", desc=f"export {index} {vec}", disable=not progress) as bar, \
                ThreadPoolExecutor(max_workers=SLICES) as pool:
            list(pool.map(fetch, range(SLICES)))
        missing = sum(c is None for c in codes)
        if missing:
            raise ReadbackError(f"{index}: snapshot has {len(row)} documents with {vec}, "
                                f"{len(row) - missing} vectors came back")
        with open(dest / "codes.jsonl", "w", encoding="utf-8") as codes_f:
            codes_f.writelines(c + "\n" for c in codes)
        vectors.flush()
        del vectors
        return len(row)
    finally:
        client.delete_pit(body={"pit_id": [pit]})


def _open_cache(state: IndexState, view: str):
    """The embedding cache the index was loaded from, or the reason it cannot be checked."""
    from evalctl.indexers.embedding_cache import EmbeddingCache

    try:
        cache = EmbeddingCache(state.cache_key(view))
    except SpecError as e:  # e.g. a fine-tuned model not in configs/models/
        return None, f"embedding cache not checked: model {state.manifest['model']!r} is not in the registry ({e})"
    if not len(cache):
        return None, "embedding cache not checked: no cached vectors for this model, view and prompt"
    return cache, ""


def _rendered(corpus, view_spec) -> list[tuple[str, bytes]]:
    """(id, text hash) of every record that renders the view: the corpus pass of the checks, which runs
    while the vectors stream in."""
    from evalctl.indexers.embedding_cache import text_hash

    return [(r.id, text_hash(text)) for r in corpus.records() if (text := view_spec.render(r))]


def _check(export: VectorExport, rendered: list[tuple[str, bytes]], corpus_name: str, view: str,
           state: IndexState, chunk: int = 5000) -> list[str]:
    """The exported ids are exactly the records that render the view, and every exported vector whose text
    is cached equals the cached vector."""
    pos = {d: i for i, d in enumerate(export.ids)}
    if len(pos) != len(export.ids):
        raise ReadbackError(f"{export.path}: duplicate doc_id values in the index")
    expected = {d for d, _ in rendered}
    if expected != pos.keys():
        missing, extra = sorted(expected - pos.keys()), sorted(pos.keys() - expected)
        raise ReadbackError(
            f"index has {len(pos)} documents with {vector_field(view)}, corpus {corpus_name} has "
            f"{len(expected)} records rendering view {view}: {len(missing)} missing (e.g. "
            f"{missing[:3]}), {len(extra)} not in the corpus (e.g. {extra[:3]}); finish or rebuild the index")
    cache, skipped = _open_cache(state, view)
    tol = state.tolerance
    n_found, worst = 0, 0.0
    for start in range(0, len(rendered) if cache is not None else 0, chunk):
        batch = rendered[start:start + chunk]
        cached, found = cache.lookup_hashes([h for _, h in batch])
        if found.any():
            rows = np.asarray(export.vectors[[pos[d] for d, _ in batch]])
            n_found += int(found.sum())
            worst = max(worst, float(np.abs(rows[found] - cached[found]).max()))
    if worst > tol:
        raise ReadbackError(f"exported vectors differ from the embedding cache by up to {worst:.3g} "
                            f"(tolerance {tol}): the index does not hold what was encoded; rebuild it")
    return [f"count {len(pos)} = corpus records rendering view {view} (same ids)",
            skipped or f"{n_found} of {len(pos)} vectors found in the embedding cache, max |diff| {worst:.3g}"]


def export_vectors(client, corpus, view_spec, model_id: str, *, force: bool = False, page_docs: int | None = None,
                   progress: bool = True) -> ExportReport:
    """Export `view_spec`'s vectors of the corpus x model index, or reuse an export of the same index state."""
    state = open_index(client, corpus, model_id, [view_spec.name], error=ReadbackError)
    index, meta = state.name, state.manifest
    client.indices.refresh(index=index)
    n_index = client.count(index=index, body={"query": {"exists": {"field": vector_field(view_spec.name)}}})["count"]
    old = load_export(index, view_spec.name)
    if old and not force and old.manifest["index_manifest"] == meta and old.manifest["count"] == n_index:
        return ExportReport(old, reused=True, checks=old.manifest["checks"])

    dest = export_dir(index, view_spec.name)
    tmp = new_staging_dir(dest)
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=1) as pool:
            streaming = pool.submit(_stream, client, index, view_spec.name, meta["dim"], tmp,
                                    page_docs or page_size(meta["dim"]), progress)
            rendered = _rendered(corpus, view_spec)  # client work while the node serves the pages
            n = streaming.result()
        seconds = time.perf_counter() - t0
        manifest = {"index": index, "view": view_spec.name, "field": vector_field(view_spec.name),
                    "index_manifest": meta, "count": n, "dim": meta["dim"], "dtype": "float32",
                    "order": "doc_id ascending", "seconds": round(seconds, 3),
                    "code_version": code_version(), "created_at": utc_now()}
        export = VectorExport(tmp, manifest, (tmp / "ids.txt").read_text(encoding="utf-8").splitlines(),
                              np.load(tmp / "vectors.npy", mmap_mode="r"), [])
        checks = [f"count {n} = index documents with {vector_field(view_spec.name)} in the snapshot",
                  *_check(export, rendered, corpus.name, view_spec.name, state)]
        manifest["checks"] = checks
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        del export
        replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportReport(load_export(index, view_spec.name), reused=False, seconds=seconds, checks=checks)
