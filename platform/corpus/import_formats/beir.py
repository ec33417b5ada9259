"""BEIR layout: corpus.jsonl ({_id, title, text}), queries.jsonl ({_id, text}), qrels/<split>.tsv.

Ids are kept verbatim (they are the dataset's own); `text` becomes the abstract; `metadata` is ignored.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path

from evalctl.corpus.import_formats.fields import RowReader
from evalctl.corpus.import_formats.native import read_jsonl
from evalctl.corpus.import_formats.problems import CorpusImportError, ProblemLog, Where
from evalctl.corpus.import_formats.source import GivenPair, RecordStream, Source, require_file
from evalctl.corpus.patent_record import PatentRecord

_INTEGER = re.compile(r"-?[0-9]+")


def _beir_record(r: RowReader) -> PatentRecord | None:
    rid = r.text("_id")
    if rid is None:
        r.log.add("missing_field", r.where, "_id", "no _id; line skipped")
        return None
    return PatentRecord(id=rid, title=r.text("title"), abstract=r.text("text"))


def _records(path: Path, log: ProblemLog) -> RecordStream:
    for where, obj in read_jsonl(path, log):
        yield where, _beir_record(RowReader(obj, where, log))


def _qrels(files: list[Path], log: ProblemLog) -> Iterator[GivenPair]:
    for path in files:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:  # -sig: a BOM is no query id
            for line_no, row in enumerate(csv.reader(f, delimiter="\t"), 1):
                where = Where(f"qrels/{path.name}", line_no)
                if line_no == 1 and row and row[0] == "query-id":
                    continue
                if len(row) != 3 or not _INTEGER.fullmatch(row[2].strip()):  # not str.isdigit: "²" is a digit
                    log.add("malformed_row", where, None, "expected query-id<TAB>corpus-id<TAB>integer score; skipped")
                    continue
                if int(row[2]) > 0:  # BEIR: 0 means judged not relevant
                    yield GivenPair(row[0].strip(), row[1].strip(), int(row[2]), None, path.stem, where)


def open_beir(paths: list[Path], log: ProblemLog) -> Source:
    if len(paths) != 1 or not paths[0].is_dir():
        raise CorpusImportError("--format beir takes one folder holding corpus.jsonl, queries.jsonl and qrels/*.tsv")
    root = paths[0]
    corpus = require_file(root / "corpus.jsonl", "BEIR corpus")
    queries = require_file(root / "queries.jsonl", "BEIR queries")
    qrels = sorted((root / "qrels").glob("*.tsv"))
    if not qrels:
        raise CorpusImportError(f"{root / 'qrels'}: no *.tsv qrels files")
    return Source(files=[corpus, queries, *qrels], records=lambda: _records(corpus, log),
                  queries=lambda: _records(queries, log), qrels=lambda: _qrels(qrels, log))
