"""`evalctl vectors export`: every document's vector and codes for one view, read back from its index.

A label task (classification, clustering) reads the view's vectors under its own prompt
(`vec_<VIEW>__<task>`) where the model's prompt for it differs from the document prompt, else (or when
asked) the document vectors `vec_<VIEW>` (indexers/index_contract.vector_source).

Vectors are streamed from a point-in-time with `search_after` on the keyword `doc_id` (scroll-free, no
10k window, a consistent snapshot): first the ids in doc_id order, then the vectors (script fields over
the field's vector values) in parallel slices, each page's vectors written straight into their rows of an
on-disk `.npy` (open_memmap), so client memory stays at a few pages plus the id -> row map and the codes
lines, whatever the corpus size. Codes are the corpus records' (the index was built from the same corpus
hash, checked first), in the order the index documents store them.
The export is written under a temporary name and renamed into place once it is complete and checked:

  cache_root()/vectors/<index>/<view or view__task>/
    vectors.npy     float32 [n, dim], row i is the document on line i of ids.txt
    ids.txt         document ids, in doc_id order
    codes.jsonl     {"cpc": [...], "ipc": [...], "labels": [...]} per row, as stored in the index
    manifest.json   index, field, task and prompt, index manifest, count, dim, the checks that passed, and
                    the digest of each file above (evalctl.digests)

Checks: the count equals the documents of the snapshot carrying the field and the corpus records that
render the view (same ids); every vector whose text is in the embedding cache equals the cached one
(bit-identical when the index was loaded from this cache; within REENCODE_TOLERANCE when another run
filled the cache; within the fp16 tolerance for sq_fp16 indexes; for a byte index, its vectors dequantised
by the manifest's rule, within half a quantisation step: the export manifest's `dequantised`), as `index
verify` does for a sample. An export is reused only while its files have the digests its manifest
recorded; a damaged, truncated or edited one (or one from before digests were kept) is exported again.
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
from evalctl.config_files import SpecError
from evalctl.corpus.patent_record import PatentRecord
from evalctl.corpus.store import Corpus
from evalctl.corpus.views import ViewSpec
from evalctl.digests import DamagedFile, check, digests, read_json
from evalctl.errors import BadInput
from evalctl.gc_tuning import long_lived_frozen
from evalctl.indexers.byte_vectors import is_byte, read_back
from evalctl.indexers.embedding_cache import EmbeddingCache, text_hash
from evalctl.indexers.index_cost import without_measurements
from evalctl.indexers.index_contract import IndexState, VectorChoice, VectorSource, open_index, vector_source
from evalctl.indexers.index_layout import CODE_FIELDS, record_codes, vector_script
from evalctl.opensearch.connection import search_cbor
from evalctl.paths import cache_root
from evalctl.provenance import code_version

PIT_KEEP_ALIVE = "5m"
# Floats per page, all slices together (about 10 MB of CBOR): 4096-d vectors go ~500 a page, 384-d ~5000.
PAGE_FLOATS = 2_000_000
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

    def positions(self, ids: list[str]) -> np.ndarray:
        pos = {d: i for i, d in enumerate(self.ids)}
        return np.array([pos[d] for d in ids], dtype=np.int64)

    def rows(self, ids: list[str]) -> np.ndarray:
        return np.asarray(self.vectors[self.positions(ids)])

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
    source: VectorSource | None = None  # which field and prompt the vectors are

    @property
    def vectors_per_s(self) -> float:
        return len(self.export.ids) / self.seconds if self.seconds else 0.0


def export_dir(index: str, unit: str) -> Path:
    """`unit`: a view, or a view's task field (index_layout.field_unit)."""
    return cache_root() / "vectors" / index / unit


_FILES = ("vectors.npy", "ids.txt", "codes.jsonl")
_REBUILD = "rerun the command (a damaged export is exported again) or `evalctl vectors export ... --force`"


def load_export(index: str, unit: str) -> VectorExport | None:
    """The stored export, None if there is none; DamagedFile if a file differs from its recorded digest."""
    path = export_dir(index, unit)
    if not (path / "manifest.json").is_file():
        return None
    manifest = read_json(path / "manifest.json", _REBUILD)
    if set(manifest.get("digests") or ()) != set(_FILES):
        raise DamagedFile(path / "manifest.json", "no digests of the export's files (an older export)", _REBUILD)
    check(path, manifest["digests"], _REBUILD)
    ids = (path / "ids.txt").read_text(encoding="utf-8").splitlines()
    codes = [json.loads(line) for line in (path / "codes.jsonl").read_text(encoding="utf-8").splitlines()]
    vectors = np.load(path / "vectors.npy", mmap_mode="r", allow_pickle=False)
    return VectorExport(path, manifest, ids, vectors, codes)


def page_size(dim: int) -> int:
    return max(50, min(5000, PAGE_FLOATS // dim))


def iter_pages(client, pit: str, query: dict, size: int, slice_: tuple[int, int] | None = None,
               script_fields: dict | None = None) -> Iterator[tuple[int, list[dict]]]:
    """(slice total, hits) per page of a point-in-time (or of one slice of it), sorted on doc_id, without
    `_source`; each hit's sort value is its doc_id. Pages come back as CBOR (binary floats)."""
    from opensearchpy.exceptions import RequestError  # deferred: opensearchpy

    after = None
    while True:
        body = {"pit": {"id": pit, "keep_alive": PIT_KEEP_ALIVE}, "size": size, "query": query,
                "sort": [{"doc_id": "asc"}], "_source": False, "track_total_hits": after is None}
        if script_fields:
            body["script_fields"] = script_fields
        if slice_ is not None:
            body["slice"] = {"id": slice_[0], "max": slice_[1]}
        if after is not None:
            body["search_after"] = after
        try:
            resp = search_cbor(client, body)
        except RequestError as e:
            if "script" in str(e):
                raise ReadbackError(f"read-back needs inline painless scripts on the node (it reads each vector "
                                    f"through a script field; check script.allowed_types): {e}") from e
            raise
        pit, hits = resp.get("pit_id", pit), resp["hits"]
        if not hits["hits"]:
            return
        yield hits["total"]["value"] if after is None else -1, hits["hits"]
        after = hits["hits"][-1]["sort"]


def _stream(client, state: IndexState, vec: str, dest: Path, page_docs: int, progress: bool) -> int:
    """Write vectors.npy and ids.txt into `dest`; returns the row count.

    Two passes over one point-in-time: the ids in doc_id order, from the sort values alone (no `_source`
    to load), which fixes each document's row; then the vectors in SLICES parallel slices, each page's
    vectors written straight into their rows of the on-disk array. The vectors come from the field's
    vector values through a script field, not from `_source`: the node then never decompresses and
    parses whole documents (texts and every view's vector) to cut one field out. Measured on this 2-core
    machine, 2,471 x 384-d: `_source` filtering took 550-600 ms of node time, the script field 120-180 ms,
    same float32 bits. Codes are not read here: they come from the corpus (same hash as the index).
    `state`: the index and its manifest (a byte index's vectors are dequantised by its rule); `vec`: the vector
    field."""
    index, meta = state.name, state.manifest
    query = {"exists": {"field": vec}}
    pit = client.create_pit(index=index, keep_alive=PIT_KEEP_ALIVE)["pit_id"]
    try:
        row: dict[str, int] = {}
        with open(dest / "ids.txt", "w", encoding="utf-8") as ids_f:
            for _, hits in iter_pages(client, pit, query, ID_PAGE):  # the sort value is the doc_id
                for hit in hits:
                    doc_id = hit["sort"][0]
                    if doc_id in row:
                        raise ReadbackError(f"{index}: duplicate doc_id values in the index ({doc_id!r})")
                    row[doc_id] = len(row)
                    ids_f.write(doc_id + "\n")
        vectors = open_memmap(dest / "vectors.npy", mode="w+", dtype=np.float32, shape=(len(row), meta["dim"]))
        seen = np.zeros(len(row), dtype=bool)
        lock = threading.Lock()
        script = {"v": {"script": {"source": vector_script(meta), "params": {"field": vec}}}}

        def fetch(part: int) -> None:
            for _, hits in iter_pages(client, pit, query, max(50, page_docs // SLICES),
                                      (part, SLICES) if SLICES > 1 else None, script):
                try:
                    rows = np.fromiter((row[h["sort"][0]] for h in hits), dtype=np.int64, count=len(hits))
                except KeyError as e:
                    raise ReadbackError(f"{index}: document {e} came back with a vector but not in the id pass")
                vectors[rows] = read_back([h["fields"]["v"][0] for h in hits], meta)
                seen[rows] = True
                with lock:
                    bar.update(len(hits))

        with tqdm(total=len(row), unit="vec", desc=f"export {index} {vec}", disable=not progress) as bar, \
                ThreadPoolExecutor(max_workers=SLICES) as pool:
            list(pool.map(fetch, range(SLICES)))
        if not seen.all():
            raise ReadbackError(f"{index}: snapshot has {len(row)} documents with {vec}, "
                                f"{int(seen.sum())} vectors came back")
        vectors.flush()
        del vectors
        return len(row)
    finally:
        client.delete_pit(body={"pit_id": [pit]})


def _open_cache(state: IndexState, source: VectorSource):
    """The embedding cache the index was loaded from, or the reason it cannot be checked."""
    try:
        cache = EmbeddingCache(state.cache_key(source.view, prompt=source.prompt))
    except SpecError as e:  # e.g. a fine-tuned model not in configs/models/
        return None, f"embedding cache not checked: model {state.manifest['model']!r} is not in the registry ({e})"
    if not len(cache):
        return None, "embedding cache not checked: no cached vectors for this model, view and prompt"
    return cache, ""


def _rendered(corpus, view_spec) -> list[tuple[str, bytes, dict]]:
    """(id, text hash, codes) of every record that renders the view: the corpus pass, which
    runs while the vectors stream in."""
    return [(r.id, text_hash(text), record_codes(r))
            for r in corpus.records(columns=(*view_spec.columns, *CODE_FIELDS)) if (text := view_spec.render(r))]


def _check(export: VectorExport, rendered: list[tuple[str, bytes, dict]], corpus_name: str, source: VectorSource,
           state: IndexState, chunk: int = 5000) -> list[str]:
    """The exported ids are exactly the records that render the view, and every exported vector whose text
    is cached equals the cached vector."""
    pos = {d: i for i, d in enumerate(export.ids)}
    if len(pos) != len(export.ids):
        raise ReadbackError(f"{export.path}: duplicate doc_id values in the index")
    expected = {d for d, _, _ in rendered}
    if expected != pos.keys():
        missing, extra = sorted(expected - pos.keys()), sorted(pos.keys() - expected)
        raise ReadbackError(
            f"index has {len(pos)} documents with {source.field}, corpus {corpus_name} has "
            f"{len(expected)} records rendering view {source.view}: {len(missing)} missing (e.g. "
            f"{missing[:3]}), {len(extra)} not in the corpus (e.g. {extra[:3]}); finish or rebuild the index")
    cache, skipped = _open_cache(state, source)
    tol = state.tolerance
    n_found, worst = 0, 0.0
    for start in range(0, len(rendered) if cache is not None else 0, chunk):
        batch = rendered[start:start + chunk]
        cached, found = cache.lookup_hashes([h for _, h, _ in batch])
        if found.any():
            rows = np.asarray(export.vectors[[pos[d] for d, _, _ in batch]])
            n_found += int(found.sum())
            worst = max(worst, float(np.abs(rows[found] - cached[found]).max()))
    if worst > tol:
        raise ReadbackError(f"exported vectors differ from the embedding cache by up to {worst:.3g} "
                            f"(tolerance {tol}): the index does not hold what was encoded; rebuild it")
    return [f"count {len(pos)} = corpus records rendering view {source.view} (same ids)",
            skipped or f"{n_found} of {len(pos)} vectors found in the embedding cache, max |diff| {worst:.3g}"]


@dataclass(frozen=True)
class ViewVectors:
    """One view's vectors in a corpus x model index, as a task reads them: its own prompt's ("task": where the model
    has one for the task, MTEB's convention) or the document vectors ("document")."""

    corpus: Corpus
    view: ViewSpec
    model_id: str | None
    vectors: VectorChoice = "task"


@long_lived_frozen()  # full collections skip the long-lived heap (evalctl.gc_tuning)
def export_vectors(client, of: ViewVectors, *, task: str | None = None, force: bool = False,
                   page_docs: int | None = None, progress: bool = True) -> ExportReport:
    """Export the vectors `task` reads (None: the document vectors) from the corpus x model index, or reuse an
    export of the same index state."""
    corpus, view_spec, view = of.corpus, of.view, of.view.name
    label_tasks = {task: [view]} if task and of.vectors == "task" else None
    state = open_index(client, corpus, of.model_id, [view], error=ReadbackError, label_tasks=label_tasks)
    index, meta = state.name, state.manifest
    source = vector_source(state, view, task, of.vectors)
    client.indices.refresh(index=index)
    n_index = client.count(index=index, body={"query": {"exists": {"field": source.field}}})["count"]
    old, refused = None, []
    try:
        old = None if force else load_export(index, source.unit)
    except DamagedFile as e:
        refused = [f"stored export refused, exported again: {e}"]
    if old and without_measurements(old.manifest["index_manifest"]) == without_measurements(meta) \
            and old.manifest["count"] == n_index:
        return ExportReport(old, reused=True, checks=old.manifest["checks"], source=source)

    dest = export_dir(index, source.unit)
    tmp = new_staging_dir(dest)
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=1) as pool:
            streaming = pool.submit(_stream, client, state, source.field, tmp, page_docs or page_size(meta["dim"]),
                                    progress)
            rendered = _rendered(corpus, view_spec)  # client work while the node serves the pages
            n = streaming.result()
        seconds = time.perf_counter() - t0
        manifest = {"index": index, "view": view, **source.describe(),
                    "index_manifest": meta, "count": n, "dim": meta["dim"], "dtype": "float32",
                    "order": "doc_id ascending", "codes": "corpus records (the index's corpus hash)",
                    **({"dequantised": {**meta["byte_quantisation"], "tolerance": state.tolerance}}
                       if is_byte(meta) else {}),
                    "seconds": round(seconds, 3),
                    "code_version": code_version(), "created_at": utc_now()}
        export = VectorExport(tmp, manifest, (tmp / "ids.txt").read_text(encoding="utf-8").splitlines(),
                              np.load(tmp / "vectors.npy", mmap_mode="r"), [])
        checks = [f"count {n} = index documents with {source.field} in the snapshot",
                  *_check(export, rendered, corpus.name, source, state)]
        manifest["checks"] = checks
        by_id = {d: codes for d, _, codes in rendered}
        codes = [by_id[d] for d in export.ids]
        with open(tmp / "codes.jsonl", "w", encoding="utf-8") as codes_f:
            codes_f.writelines(json.dumps(c) + "\n" for c in codes)
        manifest["digests"] = digests(tmp, _FILES)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        ids = export.ids
        del export
        replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    done = VectorExport(dest, manifest, ids, np.load(dest / "vectors.npy", mmap_mode="r", allow_pickle=False),
                        codes)
    return ExportReport(done, reused=False, seconds=seconds, checks=refused + checks, source=source)
