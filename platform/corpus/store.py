"""The corpus store: `<cache_root>/corpora/<name>/` with corpus.parquet, manifest.json, problems.jsonl.

Records are written and read in batches, so a 200k-record corpus never has to be in memory as
objects. The content hash is computed from the records' canonical JSON (not from Parquet bytes, which
depend on the writer version), so importing the same source twice gives the same hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evalctl.atomic import write_text
from evalctl.errors import BadInput
from evalctl import paths
from evalctl.corpus.patent_record import PatentRecord

FORMAT_VERSION = 1
CORPUS_FILE = "corpus.parquet"
QUERIES_FILE = "queries.parquet"  # query records shipped with a source (BEIR, DAPFAM)
MANIFEST_FILE = "manifest.json"
PROBLEMS_FILE = "problems.jsonl"


@functools.cache
def schema():
    """The corpus table's Parquet schema (pyarrow imported on first use: `evalctl report` and reruns never need it)."""
    import pyarrow as pa  # deferred: pyarrow

    codes = pa.list_(pa.string())
    return pa.schema([
        ("id", pa.string()), ("jurisdiction", pa.string()), ("kind", pa.string()), ("family_id", pa.string()),
        ("publication_date", pa.string()), ("priority_date", pa.string()),
        ("title", pa.string()), ("abstract", pa.string()),
        ("claims", pa.list_(pa.struct([("text", pa.string()), ("independent", pa.bool_())]))),
        ("description", pa.string()), ("cpc", codes), ("ipc", codes),
        ("citations", pa.list_(pa.struct([("target", pa.string()), ("type", pa.string()), ("direction", pa.string())]))),
        ("labels", codes), ("aliases", codes),
        ("title_lang", pa.string()), ("abstract_lang", pa.string()), ("applicants", codes),
    ])


def corpora_root() -> Path:
    return paths.cache_root() / "corpora"


def canonical_json(record: PatentRecord) -> bytes:
    return json.dumps(record.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


class RecordWriter:
    """Streams records into one Parquet file and hashes them in the order written."""

    def __init__(self, path: Path, batch_size: int = 2000):
        self.path = path
        self.count = 0
        self._hash = hashlib.sha256()
        self._batch: list[dict] = []
        self._batch_size = batch_size
        import pyarrow.parquet as pq  # deferred: pyarrow

        self._writer = pq.ParquetWriter(path, schema(), compression="zstd")

    def add(self, record: PatentRecord) -> None:
        self._hash.update(canonical_json(record) + b"\n")
        self._batch.append(record.to_dict())
        self.count += 1
        if len(self._batch) >= self._batch_size:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            import pyarrow as pa  # deferred: pyarrow

            self._writer.write_table(pa.Table.from_pylist(self._batch, schema=schema()))
            self._batch = []

    def close(self) -> str:
        """Finish the file; returns the content hash ("sha256:<hex>")."""
        self._flush()
        self._writer.close()
        return "sha256:" + self._hash.hexdigest()


def iter_records(path: Path, batch_size: int = 2000, columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
    """Records of a corpus file; with `columns`, only those (and the id) are read, the other fields left
    empty: a pass that needs a view's text and the codes skips claims, descriptions and citations."""
    import pyarrow.parquet as pq  # deferred: pyarrow

    yield from _from_batches(pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=_with_id(columns)))


def _with_id(columns: Iterable[str] | None) -> list[str] | None:
    return None if columns is None else list(dict.fromkeys(("id", *columns)))


def _from_batches(batches) -> Iterator[PatentRecord]:
    for batch in batches:
        for d in batch.to_pylist():
            yield PatentRecord.from_dict(d)


def records_with_ids(path: Path, ids: Iterable[str], columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
    """Only the records with these ids, in file order: Parquet filters on the id column, so a query set
    of a few thousand never turns the other records into objects (113k records: the whole pass took 9-10 s)."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path).read(columns=_with_id(columns))  # not read_table: its dataset layer costs imports
    table = table.filter(pc.is_in(table["id"], value_set=pa.array(list(ids), pa.string())))
    yield from _from_batches(table.to_batches(max_chunksize=2000))


def spread_records(path: Path, n: int, columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
    """Every record when the file holds at most `n`, else those of evenly spaced row groups holding about
    `n` records, so a sample spans the whole file (imports write it in source order: dates, offices)."""
    import pyarrow.parquet as pq  # deferred: pyarrow

    f = pq.ParquetFile(path)
    groups = f.metadata.num_row_groups
    if f.metadata.num_rows <= n or groups <= 1:
        yield from iter_records(path, columns=columns)
        return
    k = max(1, round(n * groups / f.metadata.num_rows))  # row groups to read
    picked = sorted({i * groups // k for i in range(k)})
    yield from _from_batches(f.iter_batches(batch_size=2000, row_groups=picked, columns=_with_id(columns)))


@dataclass(frozen=True)
class Corpus:
    name: str
    path: Path
    manifest: dict

    def records(self, columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
        return iter_records(self.path / CORPUS_FILE, columns=columns)

    def spread_records(self, n: int, columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
        return spread_records(self.path / CORPUS_FILE, n, columns)

    def records_with_ids(self, ids: Iterable[str], columns: Iterable[str] | None = None) -> Iterator[PatentRecord]:
        return records_with_ids(self.path / CORPUS_FILE, ids, columns)

    def queries(self) -> Iterator[PatentRecord]:
        """Query records shipped with the source (BEIR, DAPFAM); none for citation corpora."""
        q = self.path / QUERIES_FILE
        return iter_records(q) if q.exists() else iter(())

    def __len__(self) -> int:
        return int(self.manifest["record_count"])

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]


class CorpusNotFound(BadInput, FileNotFoundError):
    pass


def corpus_dir(name_or_path: str | Path) -> Path:
    """A path to an existing folder is taken as is; anything else is a name under corpora_root()."""
    p = Path(name_or_path)
    return p if p.is_dir() or p.is_absolute() or len(p.parts) > 1 else corpora_root() / str(name_or_path)


def imported_corpora() -> list[str]:
    """Names of the corpora in the store, sorted."""
    return sorted(p.name for p in corpora_root().glob("*") if (p / MANIFEST_FILE).is_file())


def load_corpus(name_or_path: str | Path) -> Corpus:
    d = corpus_dir(name_or_path)
    manifest_path = d / MANIFEST_FILE
    if not manifest_path.is_file():
        known = imported_corpora()
        raise CorpusNotFound(
            f"no corpus at {d} (no {MANIFEST_FILE}); import one with `evalctl corpus import`"
            + (f"; known corpora: {', '.join(known)}" if known else "")
        )
    manifest = json.loads(manifest_path.read_text())
    return Corpus(name=manifest.get("name", d.name), path=d, manifest=manifest)


def write_json(path: Path, data) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
