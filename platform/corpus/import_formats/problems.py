"""Problems found while importing: each names file, line/row and field; counted per kind.

Good records continue; with `strict` the first problem aborts the import instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Literal

from evalctl.errors import BadInput

ProblemKind = Literal[
    "malformed_row",  # unparsable line: wrong column count, invalid JSON, unreadable file
    "missing_field",  # a required field (id, some text) is empty: the record is dropped
    "duplicate_id",  # a second record with an id already imported: the later one is dropped
    "bad_encoding",  # bytes that are not UTF-8: replaced by U+FFFD, the record is kept
    "bad_code",  # an unparsable CPC/IPC code: the code is dropped, the record is kept
    "bad_pubnum",  # an unparsable publication number in a citation or alias: that entry is dropped
    "bad_date",  # an unparsable date: left empty, the record is kept
    "bad_value",  # any other unusable value (wrong type, unknown citation type ...)
]
PROBLEM_KINDS: tuple[str, ...] = ProblemKind.__args__


class CorpusImportError(BadInput, ValueError):
    """The import cannot go on (strict mode, unreadable source, or nothing valid); says why."""


@dataclass(frozen=True)
class Where:
    file: str
    line: int | None = None  # physical line (CSV: the line the row ends on; JSONL: the line)
    row: int | None = None  # 1-based data row (Parquet, CSV)

    def __str__(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    where: Where
    field: str | None
    message: str

    def __str__(self) -> str:
        at = f"{self.where}" + (f", field {self.field!r}" if self.field else "")
        return f"{at}: {self.kind}: {self.message}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self.where), "field": self.field, "message": self.message}


@dataclass
class ProblemLog:
    strict: bool = False
    problems: list[Problem] = field(default_factory=list)

    def add(self, kind: ProblemKind, where: Where, field: str | None, message: str) -> None:
        p = Problem(kind, where, field, message)
        if self.strict:
            raise CorpusImportError(f"{p} (--strict: any problem is fatal)")
        self.problems.append(p)

    def counts(self) -> dict[str, int]:
        c = Counter(p.kind for p in self.problems)
        return {k: c[k] for k in PROBLEM_KINDS if c[k]}
