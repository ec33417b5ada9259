"""`evalctl vectors export`: every document's vector and codes for one view, read back from its index.

Vectors are streamed with a point-in-time and `search_after` on the keyword `doc_id` (scroll-free, no
10k window, a consistent snapshot), each page written straight into an on-disk `.npy` (open_memmap),
so client memory stays at one page whatever the corpus size. The export is written under a temporary
name and renamed into place once it is complete and checked:

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
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from numpy.lib.format import open_memmap
from tqdm import tqdm

from evalctl.errors import BadInput
from evalctl.indexers.index_layout import index_name, vector_field
from evalctl.indexers.index_loader import read_manifest
from evalctl.paths import cache_root
from evalctl.patent_record import PatentRecord
from evalctl.provenance import code_version
from evalctl.specs import SpecError

# Codes kept per document: what label sets read (platform/label_sets.py).
CODE_FIELDS = ("cpc", "ipc", "labels")
PIT_KEEP_ALIVE = "5m"
# Bytes of JSON per page (about 10 characters per float): 4096-d vectors go ~500 a page, 384-d ~2000.
PAGE_BYTES = 20_000_000


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


def iter_pages(client, index: str, fields: list[str], query: dict, size: int) -> Iterator[tuple[int, list[dict]]]:
    """(snapshot total, hits) per page over a point-in-time, sorted on doc_id; the PIT is always freed."""
    pit = client.create_pit(index=index, keep_alive=PIT_KEEP_ALIVE)["pit_id"]
    try:
        after = None
        while True:
            body = {"pit": {"id": pit, "keep_alive": PIT_KEEP_ALIVE}, "size": size, "query": query,
                    "sort": [{"doc_id": "asc"}], "_source": fields, "track_total_hits": after is None}
            if after is not None:
                body["search_after"] = after
            resp = client.search(body=body)
            pit = resp.get("pit_id", pit)
            hits = resp["hits"]["hits"]
            if not hits:
                return
            yield resp["hits"]["total"]["value"] if after is None else -1, hits
            after = hits[-1]["sort"]
    finally:
        client.delete_pit(body={"pit_id": [pit]})


def _stream(client, index: str, view: str, dim: int, dest: Path, page_docs: int, progress: bool) -> int:
    """Write vectors.npy, ids.txt and codes.jsonl into `dest`; returns the row count."""
    vec = vector_field(view)
    vectors, row = None, 0
    with open(dest / "ids.txt", "w", encoding="utf-8") as ids_f, \
            open(dest / "codes.jsonl", "w", encoding="utf-8") as codes_f, \
            tqdm(unit="vec", desc=f"export {index} {vec}", disable=not progress) as bar:
        for total, hits in iter_pages(client, index, ["doc_id", vec, *CODE_FIELDS], {"exists": {"field": vec}},
                                      page_docs):
            if vectors is None:
                vectors = open_memmap(dest / "vectors.npy", mode="w+", dtype=np.float32, shape=(total, dim))
                bar.total = total
            if row + len(hits) > len(vectors):
                raise ReadbackError(f"{index}: more than the {len(vectors)} documents of the snapshot came back")
            sources = [hit["_source"] for hit in hits]
            vectors[row:row + len(hits)] = np.array([s[vec] for s in sources], dtype=np.float32)
            ids_f.writelines(s["doc_id"] + "\n" for s in sources)
            codes_f.writelines(json.dumps({k: s.get(k) or [] for k in CODE_FIELDS}) + "\n" for s in sources)
            row += len(hits)
            bar.update(len(hits))
    if vectors is None:  # no document carries the field
        open_memmap(dest / "vectors.npy", mode="w+", dtype=np.float32, shape=(0, dim))
    else:
        if row != len(vectors):
            raise ReadbackError(f"{index}: snapshot has {len(vectors)} documents with {vec}, {row} came back")
        vectors.flush()
        del vectors
    return row


def _open_cache(meta: dict, view: str):
    """The embedding cache the index was loaded from, or the reason it cannot be checked."""
    from evalctl.indexers.embedding_cache import EmbeddingCache
    from evalctl.indexers.encoder import cache_key
    from evalctl.models import get_model

    try:
        model = get_model(meta["model"])
    except SpecError as e:  # e.g. a fine-tuned model not in configs/models/
        return None, f"embedding cache not checked: model {meta['model']!r} is not in the registry ({e})"
    cache = EmbeddingCache(cache_key(model, "document", view, meta["prompt_variant"], meta["document_prompt"]))
    if not len(cache):
        return None, "embedding cache not checked: no cached vectors for this model, view and prompt"
    return cache, ""


def _check(export: VectorExport, corpus, view_spec, meta: dict, chunk: int = 5000) -> list[str]:
    """One pass over the corpus: the exported ids are exactly the records that render the view, and
    every exported vector whose text is cached equals the cached vector."""
    from evalctl.indexers.index_verify import FP16_TOLERANCE, REENCODE_TOLERANCE

    pos = {d: i for i, d in enumerate(export.ids)}
    if len(pos) != len(export.ids):
        raise ReadbackError(f"{export.path}: duplicate doc_id values in the index")
    cache, skipped = _open_cache(meta, view_spec.name)
    tol = REENCODE_TOLERANCE if meta.get("encoder", "flat") == "flat" else FP16_TOLERANCE
    expected, n_found, worst = set(), 0, 0.0

    def compare(batch: list[tuple[str, str]]) -> None:
        nonlocal n_found, worst
        cached, found = cache.lookup([t for _, t in batch])
        if found.any():
            rows = np.asarray(export.vectors[[pos[d] for d, _ in batch]])
            n_found += int(found.sum())
            worst = max(worst, float(np.abs(rows[found] - cached[found]).max()))

    batch = []
    for r in corpus.records():
        if not (text := view_spec.render(r)):
            continue
        expected.add(r.id)
        if cache is not None and r.id in pos:
            batch.append((r.id, text))
            if len(batch) == chunk:
                compare(batch)
                batch = []
    if batch:
        compare(batch)
    if expected != pos.keys():
        missing, extra = sorted(expected - pos.keys()), sorted(pos.keys() - expected)
        raise ReadbackError(
            f"index has {len(pos)} documents with {vector_field(view_spec.name)}, corpus {corpus.name} has "
            f"{len(expected)} records rendering view {view_spec.name}: {len(missing)} missing (e.g. "
            f"{missing[:3]}), {len(extra)} not in the corpus (e.g. {extra[:3]}); finish or rebuild the index")
    if worst > tol:
        raise ReadbackError(f"exported vectors differ from the embedding cache by up to {worst:.3g} "
                            f"(tolerance {tol}): the index does not hold what was encoded; rebuild it")
    return [f"count {len(pos)} = corpus records rendering view {view_spec.name} (same ids)",
            skipped or f"{n_found} of {len(pos)} vectors found in the embedding cache, max |diff| {worst:.3g}"]


def export_vectors(client, corpus, view_spec, model_id: str, *, force: bool = False, page_docs: int | None = None,
                   progress: bool = True) -> ExportReport:
    """Export `view_spec`'s vectors of the corpus x model index, or reuse an export of the same index state."""
    index = index_name(corpus.name, model_id)
    meta = read_manifest(client, index)
    if meta is None:
        raise ReadbackError(f"index {index} does not exist: run `evalctl index --corpus {corpus.name} "
                            f"--model {model_id} --view {view_spec.name}` first")
    if view_spec.name not in meta.get("views", []):
        raise ReadbackError(f"index {index} has no view {view_spec.name} (it has {', '.join(meta.get('views', []))})")
    if meta.get("corpus_hash") != corpus.manifest["content_hash"]:
        raise ReadbackError(f"index {index} was built from corpus hash {meta.get('corpus_hash')}, corpus "
                            f"{corpus.name} now has {corpus.manifest['content_hash']}: re-index it")
    client.indices.refresh(index=index)
    n_index = client.count(index=index, body={"query": {"exists": {"field": vector_field(view_spec.name)}}})["count"]
    old = load_export(index, view_spec.name)
    if old and not force and old.manifest["index_manifest"] == meta and old.manifest["count"] == n_index:
        return ExportReport(old, reused=True, checks=old.manifest["checks"])

    dest = export_dir(index, view_spec.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{view_spec.name}.", dir=dest.parent))
    try:
        t0 = time.perf_counter()
        n = _stream(client, index, view_spec.name, meta["dim"], tmp, page_docs or page_size(meta["dim"]), progress)
        seconds = time.perf_counter() - t0
        manifest = {"index": index, "view": view_spec.name, "field": vector_field(view_spec.name),
                    "index_manifest": meta, "count": n, "dim": meta["dim"], "dtype": "float32",
                    "order": "doc_id ascending", "seconds": round(seconds, 3),
                    "code_version": code_version(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        export = VectorExport(tmp, manifest, (tmp / "ids.txt").read_text(encoding="utf-8").splitlines(),
                              np.load(tmp / "vectors.npy", mmap_mode="r"), [])
        checks = [f"count {n} = index documents with {vector_field(view_spec.name)} in the snapshot",
                  *_check(export, corpus, view_spec, meta)]
        manifest["checks"] = checks
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        del export
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportReport(load_export(index, view_spec.name), reused=False, seconds=seconds, checks=checks)
