"""Reading a CSV export row by row without letting one bad quote cost other rows.

Python's csv module (in its lenient mode, which real exports need) silently accepts an unclosed quote:
the quoted field then runs on over the following lines, swallowing the rows there (or the rest of the
file), and a file cut inside its last quoted field reads as a shorter value. Here each row keeps the
physical lines it was read from; a row spanning several lines that ends inside quotes at the end of
the file, has the wrong number of columns, or whose quoted field closes irregularly (a quote followed
by text) is reported and skipped, and its later lines are read again as rows of their own.
"""

from __future__ import annotations

import codecs
import csv
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from evalctl.corpus.import_formats.problems import CorpusImportError, ProblemLog, Where

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class _Lines:
    """Physical lines (with their ends) and their numbers; lines can be pushed back to be read again."""

    def __init__(self, f):
        self._f = f
        self._back: deque[tuple[int, str]] = deque()
        self._next_no = 1
        self.taken: list[tuple[int, str]] = []  # lines handed out since the last `cut`
        self.eof = False

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self._back:
            item = self._back.popleft()
        else:
            line = self._f.readline()
            if not line:
                self.eof = True
                raise StopIteration
            item = (self._next_no, line)
            self._next_no += 1
        self.taken.append(item)
        return item[1]

    def cut(self) -> list[tuple[int, str]]:
        taken, self.taken = self.taken, []
        return taken

    def push_back(self, lines: list[tuple[int, str]]) -> None:
        self._back.extendleft(reversed(lines))

    @property
    def exhausted(self) -> bool:
        return self.eof and not self._back


def _quote_state(text: str, delimiter: str) -> tuple[bool, bool]:
    """(still inside quotes at the end, a quoted field closed irregularly), following the csv module's
    lenient state machine over the raw text of one row."""
    START, FIELD, QUOTED, QUOTE_IN_QUOTED = range(4)
    state, irregular = START, False
    for ch in text:
        if state == START:
            state = QUOTED if ch == '"' else START if ch in (delimiter, "\r", "\n") else FIELD
        elif state == FIELD:
            if ch in (delimiter, "\r", "\n"):
                state = START
        elif state == QUOTED:
            if ch == '"':
                state = QUOTE_IN_QUOTED
        else:  # just after a quote inside a quoted field
            if ch == '"':
                state = QUOTED  # an escaped quote
            elif ch in (delimiter, "\r", "\n"):
                state = START
            else:
                irregular, state = True, FIELD
    return state == QUOTED, irregular


def _open_text(path: Path):
    with open(path, "rb") as raw:
        head = raw.read(4)
    if head.startswith(_UTF16_BOMS):
        return open(path, encoding="utf-16", errors="surrogateescape", newline="")
    # -sig: a UTF-8 BOM (Excel writes one) is not part of the first header name; the utf-16 codec drops its own
    return open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")


def _check_header(path: Path, header: list[str], required: tuple[str, ...], delimiter: str) -> None:
    missing = [c for c in required if c not in header]
    if not missing:
        return
    found = ", ".join(repr(h) for h in header[:12]) + (f" ... ({len(header)} columns)" if len(header) > 12 else "")
    hints = []
    if any("\x00" in h for h in header):
        hints.append("the file looks like UTF-16 without a byte-order mark: save it as UTF-8")
    elif len(header) == 1 and any(d in header[0] for d in (";", "\t", "|") if d != delimiter):
        hints.append(f"the header has one column: the file seems to use another delimiter than {delimiter!r}")
    raise CorpusImportError(
        f"{path}: header lacks column(s) {', '.join(map(repr, missing))}; found {found}"
        + (f"; {hints[0]}" if hints else "; is this the right --format, and the export's original header?"))


def read_csv(path: Path, log: ProblemLog, delimiter: str = ",",
             required: tuple[str, ...] = ()) -> Iterator[tuple[Where, dict[str, str]]]:
    """Rows of a CSV file as {header: value}, streaming.

    Undecodable bytes survive as surrogates (checked per field by RowReader); UTF-16 files with a BOM
    are read as such. A header without the `required` columns is one error naming the columns found.
    CR, LF and CRLF line ends are all accepted (the Lens and Espacenet samples use bare CR). Of
    duplicated header names the first column wins.
    """
    csv.field_size_limit(sys.maxsize)
    with _open_text(path) as f:
        lines = _Lines(f)
        reader = csv.reader(lines, delimiter=delimiter)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise CorpusImportError(f"{path}: empty file, expected a header row") from None
        _check_header(path, header, required, delimiter)
        lines.cut()
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
                taken = lines.cut()
                row_no += 1
                log.add("malformed_row", Where(path.name, taken[0][0] if taken else None, row_no), None,
                        f"unreadable CSV: {e}")
                continue
            taken = lines.cut()
            if not any(cell.strip() for cell in row):
                continue  # blank line
            row_no += 1
            first, last = taken[0][0], taken[-1][0]
            where = Where(path.name, last, row_no)
            open_at_end, irregular = _quote_state("".join(t for _, t in taken), delimiter)
            open_at_end = open_at_end and lines.exhausted
            wrong_width = len(row) != len(header)
            if len(taken) > 1 and (open_at_end or wrong_width or irregular):
                why = ("its quoted field is never closed (it ran to the end of the file)" if open_at_end else
                       f"it has {len(row)} columns, the header {len(header)}" if wrong_width else
                       "a quoted field in it closes with text after the quote")
                log.add("malformed_row", Where(path.name, first, row_no), None,
                        f"unbalanced quote: the row starting on line {first} ran on to line {last} and {why}; "
                        f"row skipped, lines {first + 1}-{last} read again as rows")
                lines.push_back(taken[1:])
                reader = csv.reader(lines, delimiter=delimiter)
                continue
            if open_at_end:
                log.add("malformed_row", where, None, "the file ends inside this row's quoted field (a truncated "
                        "file or an unclosed quote); row skipped")
                continue
            if wrong_width:
                log.add("malformed_row", where, None, f"{len(row)} columns, the header has {len(header)}; row skipped")
                continue
            if irregular:
                log.add("bad_value", where, None, "a quoted field closes with text after its quote (a stray quote?); "
                        "row kept as read: check its values")
            yield where, {h: row[i] for h, i in positions.items()}
