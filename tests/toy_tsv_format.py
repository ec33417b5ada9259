"""A toy import format (docs/extending.md, tests/project/test_extending.py): one `id<TAB>title<TAB>abstract` line
per patent."""

from __future__ import annotations

from pathlib import Path

from evalctl.corpus.import_formats.problems import ProblemLog, Where
from evalctl.corpus.import_formats.source import RecordStream, Source
from evalctl.corpus.patent_record import PatentRecord


def _records(paths: list[Path], log: ProblemLog) -> RecordStream:
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                where, cells = Where(path.name, line_no), line.rstrip("\n").split("\t")
                if len(cells) != 3 or not cells[0]:
                    log.add("malformed_row", where, None, "expected id<TAB>title<TAB>abstract; skipped")
                    yield where, None
                    continue
                yield where, PatentRecord(id=cells[0], title=cells[1] or None, abstract=cells[2] or None)


def open_tsv(paths: list[Path], log: ProblemLog) -> Source:
    return Source(files=list(paths), records=lambda: _records(paths, log))
