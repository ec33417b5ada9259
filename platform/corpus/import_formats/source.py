"""What an importer hands to the corpus import: streams of records, optional queries and given qrels.

Each format module (csv_exports, beir, dapfam, native, ops) turns source files into a
`Source`; `importer` validates, stores and hashes whatever comes out of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evalctl.corpus.import_formats.problems import CorpusImportError, Where
from evalctl.corpus.patent_record import PatentRecord

RecordStream = Iterator[tuple[Where, PatentRecord | None]]  # None: row rejected, problem already logged


@dataclass(frozen=True)
class GivenPair:
    """A relevance pair shipped with the source (BEIR qrels, DAPFAM qrels_all)."""

    query_id: str
    doc_id: str
    score: int
    domain: str | None  # IN / OUT as the source labels it, None when it has no label
    split: str | None  # the source's own split (BEIR qrels/<split>.tsv), None when it has none
    where: Where


@dataclass
class Source:
    files: list[Path]  # every file read, for the manifest
    records: Callable[[], RecordStream]
    queries: Callable[[], RecordStream] | None = None
    qrels: Callable[[], Iterator[GivenPair]] | None = None


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise CorpusImportError(f"{path}: not found ({what})")
    return path
