"""What an importer hands to the corpus import: streams of records, optional queries and given qrels.

Each format module (import_csv, import_beir, import_dapfam, import_native) turns source files into a
`Source`; `corpus_import` validates, stores and hashes whatever comes out of it.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evalctl.import_problems import CorpusImportError, ProblemLog, Where
from evalctl.patent_record import PatentRecord

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


def read_csv(path: Path, log: ProblemLog, delimiter: str = ",") -> Iterator[tuple[Where, dict[str, str]]]:
    """Rows of a CSV file as {header: value}, streaming.

    Undecodable bytes survive as surrogates (checked per field by RowReader); a row with the wrong
    number of columns is reported and skipped. CR, LF and CRLF line ends are all accepted (the Lens
    and Espacenet samples use bare CR). Of duplicated header names the first column wins.
    """
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        try:
            header = [h.strip().lstrip("\ufeff") for h in next(reader)]
        except StopIteration:
            raise CorpusImportError(f"{path}: empty file, expected a header row") from None
        positions: dict[str, int] = {}
        for i, h in enumerate(header):
            positions.setdefault(h, i)
        row_no = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                row_no += 1
                log.add("malformed_row", Where(path.name, reader.line_num, row_no), None, f"unreadable CSV: {e}")
                continue
            if not any(cell.strip() for cell in row):
                continue  # blank line
            row_no += 1
            where = Where(path.name, reader.line_num, row_no)
            if len(row) != len(header):
                log.add("malformed_row", where, None, f"{len(row)} columns, the header has {len(header)}; row skipped")
                continue
            yield where, {h: row[i] for h, i in positions.items()}
