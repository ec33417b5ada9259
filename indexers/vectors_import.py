"""`evalctl vectors import`: embeddings made elsewhere (a GPU box, an inference server, another team) into the
embedding cache, so `evalctl index`, `retrieve` and the label tasks use them as if evalctl had encoded them.

Sources: a NumPy `.npy` [n, dim] with its ids (a text file, one id a line, or a BEIR `corpus.jsonl` whose `_id`s
give the row order, as BEIR and MTEB encoders write them), or Parquet with an id column and a vector (list)
column. Each id is a record of the corpus; its text under the view is what the cache keys the vector by.

The entry is the one the model spec, role, view and prompt name, at the precision the vectors were made in
(declared: it cannot be read off float32 files) and with versions "imported" (the packages that made them are
not this machine's), so an imported entry never mixes with a local encode of other package versions.

The entry is the corpus's own: vectors made elsewhere serve the corpus they were imported for, and another
corpus (even one of the same texts) encodes its own.

Everything is checked before anything is written (BadInput naming the file and row), reading a `.npy` a block at
a time (a bad row 0 is refused without loading the file): dimension against the spec, NaN/inf, norms where the
spec normalises, duplicate ids, ids unknown to the corpus, row counts, and one vector per text (records of one
text given different vectors are refused as `vectors merge` refuses them); then all vectors go in as one shard
(the cache's atomic commit) and, only then, the provenance (files and their sha256, the command, counts,
coverage) as the entry's run record, which the index manifest carries. An entry counts as imported once it
holds such a record: an import killed before it leaves nothing `index` uses, and the next import removes its
leftovers. A partial import is allowed and its coverage reported: `evalctl index` encodes only the missing
texts, with the model at the imported precision, into the same entry (its run record says so), or refuses
before any work when the model's weights are not here.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evalctl.errors import BadInput
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache, text_hash
from evalctl.indexers.encode_options import PromptChoice
from evalctl.indexers.encoder import IMPORTED, cache_key
from evalctl.indexers.model_loader import ModelLoadError, require_weights
from evalctl.indexers.runtime import Runtime
from evalctl.indexers.vector_agreement import FirstVectors
from evalctl.paths import cache_root
from evalctl.provenance import code_version, file_sha256

NORM_TOLERANCE = 1e-2  # |norm - 1| allowed where the spec normalises (a float16 source rounds to ~1e-3)
BLOCK_BYTES = 32 << 20  # rows read at a time from a memory-mapped source: checks hold one block, not the file


class VectorsImportError(BadInput, ValueError):
    """The vectors cannot be imported as given; names the file and row."""


@dataclass
class VectorFile:
    """Vectors and the id of each row, and how to name a row in a message."""

    vectors: np.ndarray  # [n, dim], as read (any float dtype)
    ids: list[str]
    files: list[Path]  # the sources, for provenance
    id_file: Path | None = None  # where the ids came from when not the vectors' own file
    id_line: int = 1  # line of the id file holding row 0's id (BEIR and plain lists: 1)

    def where(self, row: int) -> str:
        at = f"{self.files[0]} row {row} (id {self.ids[row]!r}"
        return at + (f", line {row + self.id_line} of {self.id_file})" if self.id_file else ")")


def _lines(path: Path) -> list[str]:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise VectorsImportError(f"{path} line {line}: not UTF-8 text (byte "
                                 f"{raw[e.start]:#04x} at offset {e.start}); save the ids as UTF-8") from None


def _ids_from_text(path: Path) -> list[str]:
    return [line.strip() for line in _lines(path)]


def _ids_from_beir(path: Path) -> list[str]:
    ids = []
    for n, line in enumerate(_lines(path), 1):
        try:
            doc_id = json.loads(line).get("_id") if line.strip() else None
        except (json.JSONDecodeError, AttributeError):
            doc_id = None
        if doc_id is None:
            raise VectorsImportError(f"{path} line {n}: not a BEIR corpus line with an _id")
        ids.append(str(doc_id))
    return ids


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise VectorsImportError(f"{path}: no such {what} file")
    return path


def read_npy(vectors: Path, ids: Path | None = None, beir_corpus: Path | None = None) -> VectorFile:
    """A `.npy` matrix with its ids from a text file (one a line) or a BEIR corpus.jsonl (its `_id`s in order)."""
    if (ids is None) == (beir_corpus is None):
        raise VectorsImportError(f"{vectors}: give the row ids as an ids file or a BEIR corpus.jsonl (one of them)")
    _require(vectors, "vectors")
    id_file = _require(ids or beir_corpus, "ids" if ids else "BEIR corpus")
    try:
        matrix = np.load(vectors, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise VectorsImportError(f"{vectors}: not a readable .npy matrix ({e})") from None
    if not isinstance(matrix, np.ndarray):  # np.load opens a .npz archive whatever the file is called
        matrix.close()
        raise VectorsImportError(f"{vectors}: a .npz archive, not a .npy matrix: save the vectors array alone "
                                 "(numpy.save) and give that")
    row_ids = _ids_from_text(id_file) if ids else _ids_from_beir(id_file)
    return VectorFile(matrix, row_ids, [vectors, id_file], id_file=id_file)


def read_parquet(path: Path, id_column: str = "id", vector_column: str = "vector") -> VectorFile:
    """A Parquet file with an id column and a vector column (list or fixed-size list of floats)."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.parquet as pq

    _require(path, "Parquet")
    if id_column == vector_column:
        raise VectorsImportError(f"--id-column and --vector-column both name {id_column!r}: the ids and the vectors "
                                 "are two columns")
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise VectorsImportError(f"{path}: not a readable Parquet file ({e})") from None
    missing = [c for c in (id_column, vector_column) if c not in schema.names]
    if missing:
        raise VectorsImportError(f"{path}: no column {', '.join(map(repr, missing))} (it has {', '.join(schema.names)}); "
                                 "name them with --id-column and --vector-column")
    for c in (id_column, vector_column):
        if (n := schema.names.count(c)) > 1:
            raise VectorsImportError(f"{path}: column {c!r} appears {n} times, so which one is meant is unknown; "
                                     "rename the others")
    try:
        table = pq.read_table(path, columns=[id_column, vector_column])
    except (OSError, pa.ArrowException) as e:  # the footer read, a data page did not (corrupt, truncated)
        raise VectorsImportError(f"{path}: not a readable Parquet file ({e})") from None
    ids = table.column(id_column).to_pylist()
    column = table.column(vector_column).combine_chunks()
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)) or not pa.types.is_floating(column.type.value_type):
        raise VectorsImportError(f"{path}: column {vector_column!r} is {column.type}, expected a list of floats")
    if column.null_count:
        row = column.is_null().to_pylist().index(True)
        raise VectorsImportError(f"{path} row {row} (id {ids[row]!r}): no vector")
    lengths = np.diff(np.asarray(column.offsets)) if not pa.types.is_fixed_size_list(column.type) \
        else np.full(len(column), column.type.list_size)
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise VectorsImportError(f"{path} row {row} (id {ids[row]!r}): {lengths[row]} values, row 0 has {lengths[0]}")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    matrix = flat.reshape(len(ids), int(lengths[0]) if len(lengths) else 0)
    if any(i is None for i in ids):
        raise VectorsImportError(f"{path} row {ids.index(None)}: no id in column {id_column!r}")
    return VectorFile(matrix, [str(i) for i in ids], [path])


def _blocks(vectors: np.ndarray):
    """(first row, rows) of `vectors` a block at a time, as float32 in memory (a memory-mapped file is read
    only as far as the caller goes)."""
    step = max(1, BLOCK_BYTES // max(1, vectors.shape[1] * vectors.itemsize))
    for start in range(0, vectors.shape[0], step):
        with np.errstate(over="ignore"):  # beyond float32: inf, refused as such
            block = np.asarray(vectors[start:start + step], dtype=np.float32)
        yield start, block


def check_rows(src: VectorFile, dim: int, normalized: bool, model_id: str) -> None:
    """Shape, finiteness, norms and unique ids, each failure naming its file and first row."""
    v, label = src.vectors, src.files[0]
    if v.ndim != 2 or not np.issubdtype(v.dtype, np.floating):
        raise VectorsImportError(f"{label}: vectors are {v.dtype} of shape {v.shape}, expected floats [n, {dim}]")
    if v.shape[0] != len(src.ids):
        raise VectorsImportError(f"{label} has {v.shape[0]} rows but {src.id_file or label} has {len(src.ids)} ids: "
                                 "they must be row-aligned")
    if not v.shape[0]:
        raise VectorsImportError(f"{label}: no rows, nothing to import")
    if v.shape[1] != dim:
        raise VectorsImportError(f"{label}: vectors are {v.shape[1]}-dim, model {model_id} gives {dim} (configs/models/)")
    for start, block in _blocks(v):  # float32, as stored: a float64 value beyond its range is not finite
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            raise VectorsImportError(f"{src.where(start + int(np.flatnonzero(bad)[0]))}: non-finite values (NaN or inf"
                                     f"{', or beyond float32' if v.dtype.itemsize > 4 else ''})")
        norms = np.linalg.norm(block.astype(np.float64), axis=1) if normalized else None
        if norms is not None and (off := np.abs(norms - 1) > NORM_TOLERANCE).any():
            row = int(np.flatnonzero(off)[0])
            raise VectorsImportError(f"{src.where(start + row)}: norm {norms[row]:.4g}; model {model_id}'s vectors "
                                     f"are unit-normalised (normalize: true in its spec): normalise them first")
    first: dict[str, int] = {}
    for row, doc_id in enumerate(src.ids):
        if not doc_id:
            raise VectorsImportError(f"{src.where(row)}: empty id")
        if (seen := first.setdefault(doc_id, row)) != row:
            raise VectorsImportError(f"{src.where(row)}: duplicate id, also row {seen}")


def _rows(vectors: np.ndarray, rows: list[int]) -> np.ndarray:
    """float32 copies of these rows, gathered a block at a time (no second copy in the source's dtype)."""
    out = np.empty((len(rows), vectors.shape[1]), dtype=np.float32)
    step = max(1, BLOCK_BYTES // max(1, vectors.shape[1] * vectors.itemsize))
    for start in range(0, len(rows), step):
        out[start:start + step] = vectors[rows[start:start + step]]
    return out


@dataclass
class ImportReport:
    cache_dir: Path
    key: CacheKey
    n_rows: int
    n_imported: int  # new vectors stored: one per distinct text (records of the same text share it)
    n_already: int  # texts the entry already held (the same vectors)
    n_no_text: int  # rows whose record has no text for the view (nothing to key them by)
    n_view_records: int  # records of the corpus with text for the view
    n_covered: int  # of those, how many have a vector in the entry now
    missing_example: list[str] = field(default_factory=list)  # ids of records still without a vector

    @property
    def coverage(self) -> float:
        return self.n_covered / self.n_view_records if self.n_view_records else 1.0


def _one_vector_per_text(src: VectorFile, rows: dict[int, bytes], cache: EmbeddingCache | None, held: list[bytes],
                         view: str) -> None:
    """Rows of one text (records with the same text, or a text the entry holds) must give it the same vector:
    the entry keeps one per text, so another would be dropped silently (`vectors merge` refuses the same)."""
    counts, in_entry = Counter(rows.values()), set(held)
    shared = [row for row, h in rows.items() if counts[h] > 1 or h in in_entry]
    first = FirstVectors()
    if held:
        first.add((h, None, v) for h, v in zip(held, cache.get(held)))  # None: the entry
    clash = first.add((rows[row], row, src.vectors[row]) for row in shared)
    if clash is None:
        return
    if clash.first is None:
        raise VectorsImportError(f"{src.where(clash.other)}: the entry {cache.dir} already holds another vector for "
                                 f"this text (max |diff| {clash.diff:.3g}); delete that folder to replace its vectors")
    raise VectorsImportError(
        f"{src.where(clash.other)} and row {clash.first} (id {src.ids[clash.first]!r}) have the same {view} text but "
        f"different vectors (max |diff| {clash.diff:.3g}): the cache keeps one vector per text, so one record would "
        "carry the other's; give them the same vector or leave one out; nothing was imported")


def import_vectors(corpus, view_spec, model, src: VectorFile, *, precision: str,
                   prompts: PromptChoice = PromptChoice(), command: str | None = None) -> ImportReport:
    """Check `src` against the model spec and the corpus, then store it in the corpus's entry of (model, role,
    view, prompt, precision, imported) with its provenance. Raises VectorsImportError before writing anything."""
    check_rows(src, model.dim, model.normalize, model.id)
    texts = {r.id: view_spec.render(r) for r in corpus.records(view_spec.columns)}
    unknown = [row for row, i in enumerate(src.ids) if i not in texts]
    if unknown:
        raise VectorsImportError(f"{src.where(unknown[0])}: no such record in corpus {corpus.name}; "
                                 f"{len(unknown)} of {len(src.ids)} ids are unknown to it (another corpus?)")
    rows = {row: text_hash(texts[i]) for row, i in enumerate(src.ids) if texts[i]}
    if not rows:
        raise VectorsImportError(f"{src.files[0]}: none of its {len(src.ids)} rows is a record with {view_spec.name} "
                                 f"text in corpus {corpus.name}: nothing to import")
    key = cache_key(model, prompts.role, view_spec.name, prompts.variant, prompt=prompts.prompt(model),
                    precision=precision, versions=IMPORTED, corpus=corpus.name)
    base = cache_root() / "embeddings"
    # the entry is opened only where it exists: a refused import leaves no trace
    cache = EmbeddingCache(key, root=base) if (base / key.model_id / key.digest() / "meta.json").is_file() else None
    held = sorted({h for h in rows.values() if cache is not None and h in cache})
    _one_vector_per_text(src, rows, cache, held, view_spec.name)
    new: dict[bytes, int] = {}  # text hash -> its first row: records of one text share its vector
    for row, h in rows.items():
        new.setdefault(h, row)
    for h in held:
        del new[h]
    cache = cache or EmbeddingCache(key, root=base)
    cache.remove_leftovers()  # of an import killed earlier
    if new:
        cache.commit(list(new), _rows(src.vectors, list(new.values())))
    with_text = [i for i, t in texts.items() if t]
    missing = sorted(i for i in with_text if text_hash(texts[i]) not in cache)
    report = ImportReport(cache.dir, key, len(src.ids), len(new), len(held), len(src.ids) - len(rows),
                          len(with_text), len(with_text) - len(missing), missing[:5])
    cache.record_run({"import": {  # last: an entry counts as imported once its rows are committed
        "files": [{"path": str(p.resolve()), "sha256": file_sha256(p), "bytes": p.stat().st_size} for p in src.files],
        "command": command, "source_dtype": str(src.vectors.dtype), "precision": precision,
        "corpus": corpus.name, "corpus_hash": corpus.content_hash, "n_rows": report.n_rows,
        "n_imported": report.n_imported, "n_already": report.n_already, "n_no_text": report.n_no_text,
        "coverage": f"{report.n_covered}/{report.n_view_records} records", "code_version": code_version()}})
    return report


def import_records(cache: EmbeddingCache) -> list[dict]:
    """The provenance of each import into an entry (its run records), oldest first."""
    return [{"at": r["at"], **r["import"]} for r in cache.runs() if "import" in r]


@dataclass(frozen=True)
class ImportedVectors:
    """An index's vectors come from imported entries: their precision and provenance per field unit."""

    precision: str
    provenance: dict  # {unit: [import records]}


def imported_entries(model, view: str, variant: str | None, prompt: str, corpus: str) -> dict[str, EmbeddingCache]:
    """{precision: entry} of the imported document vectors of this corpus for this model, view and prompt (what an
    index reads); an entry counts once an import recorded itself there (after its commit: a killed import's entry
    does not)."""
    base = cache_root() / "embeddings"
    found = {}
    for meta_file in sorted((base / model.id).glob("*/meta.json")):
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # an unreadable entry is reported when its own key opens it
        if meta.get("versions") == IMPORTED:
            key = cache_key(model, "document", view, variant, prompt=prompt, precision=meta["precision"],
                            versions=IMPORTED, corpus=corpus)
            if key.meta() == meta and import_records(entry := EmbeddingCache(key, root=base)):
                found[meta["precision"]] = entry
    return found


def imported_for_index(model, units: dict[str, tuple[str, str]], variant: str | None,
                       manifest: dict | None, corpus: str) -> ImportedVectors | None:
    """Whether an index's vectors come from entries imported for its corpus, and at which precision. `units`:
    {field unit: (view, prompt)} the load fills. A new index uses imports where every unit has one (some but not all is
    refused: one index, one source of vectors); an existing index keeps what its manifest says."""
    if manifest and manifest.get("encoding_versions") != IMPORTED:
        return None
    found = {u: imported_entries(model, v, variant, p, corpus) for u, (v, p) in units.items()}
    if manifest:
        precision = manifest["precision"]
        if lost := [u for u, e in found.items() if precision not in e]:
            raise VectorsImportError(
                f"the index was built from vectors imported at {precision}, but the embedding cache holds none now "
                f"for {', '.join(lost)} of model {model.id}: import them again, or delete the index to encode it here")
    else:
        if not any(found.values()):
            return None
        if lacking := [u for u, e in found.items() if not e]:
            raise VectorsImportError(
                f"model {model.id}: imported vectors cover {', '.join(u for u in found if found[u])} but not "
                f"{', '.join(lacking)} (a task field needs vectors under the task's prompt: --task): import those too, "
                f"or index only the imported views (--view; --vectors document for no task fields)")
        precisions = set.intersection(*(set(e) for e in found.values()))
        if len(precisions) != 1:
            have = {u: sorted(e) for u, e in found.items()}
            raise VectorsImportError(f"model {model.id}: imported vectors at precisions {have}, an index needs one: "
                                     "delete the entries of the others (evalctl prints their folders on import)")
        precision = precisions.pop()
    return ImportedVectors(precision, {u: import_records(e[precision]) for u, e in found.items() if precision in e})


def require_covered(model, corpus, views, imported: ImportedVectors, variant: str | None) -> None:
    """Where the model's weights are missing, every text the index needs must have an imported vector."""
    try:
        require_weights(model)
        return
    except ModelLoadError as e:
        reason = str(e)
    prompt = model.prompt_for("document", task_type="retrieval", variant=variant)
    for view in views:
        cache = imported_entries(model, view.name, variant, prompt, corpus.name)[imported.precision]  # imported_for_index checked
        texts = {r.id: t for r in corpus.records(view.columns) if (t := view.render(r))}
        missing = sorted(i for i, t in texts.items() if text_hash(t) not in cache)
        if missing:
            raise VectorsImportError(
                f"imported vectors cover {len(texts) - len(missing)} of {len(texts)} records of view {view.name} "
                f"(missing e.g. {', '.join(missing[:3])}) and the rest cannot be encoded here: {reason}")


def query_encoding(manifest: dict) -> dict:
    """encode_texts options for the queries of an index built from imported vectors: the same precision and
    the corpus's imported entries (a query that is a corpus text of the view finds its vector there)."""
    if manifest.get("encoding_versions") != IMPORTED:
        return {}
    return {"runtime": Runtime(precision=manifest["precision"]), "versions": IMPORTED, "corpus": manifest["corpus"]}
