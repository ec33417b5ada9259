"""TREC files made by other systems: a run (`qid Q0 docid rank score tag`) and qrels (`qid iteration docid rel`).

The `trec` entry of the run and qrels import formats (`evalctl runs import`, `evalctl qrels import`). Columns are
split on any whitespace, as trec_eval reads them; blank lines are skipped. A line that cannot be read (a wrong
column count, a score that is not a finite number, a rank or relevance that is not an integer, a pair given twice)
refuses the whole file, naming its line: a run or qrels set kept without some of its lines would score other
numbers than the file gives elsewhere, and nothing would say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evalctl.errors import BadInput


class TrecFileError(BadInput, ValueError):
    """A line of a TREC file cannot be read: the file is refused, nothing is imported."""


@dataclass(frozen=True, slots=True)
class RunRow:
    query_id: str
    doc_id: str
    rank: int  # the file's own rank column: read, compared with the score order, never used to order
    score: float
    line: int


@dataclass(frozen=True, slots=True)
class Judgment:
    query_id: str
    doc_id: str
    relevance: int
    line: int


def _columns(path: Path, n: int, layout: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, its n columns) of each non-blank line; TrecFileError at the first with another count."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:  # -sig: a BOM is no query id
        for no, line in enumerate(f, 1):
            cols = line.split()
            if not cols:
                continue
            if len(cols) != n:
                raise TrecFileError(f"{path.name}, line {no}: expected {n} columns ({layout}), found {len(cols)}: "
                                    f"{line.strip()[:80]!r}; nothing was imported")
            yield no, cols


def _number(path: Path, no: int, what: str, value: str, kind: type[int] | type[float]) -> int | float:
    try:
        out = kind(value)
    except ValueError:
        out = None
    if out is None or not math.isfinite(out):
        expected = "an integer" if kind is int else "a finite number"
        raise TrecFileError(f"{path.name}, line {no}: {what} {value!r} is not {expected}; nothing was imported")
    return out


def _once(path: Path, seen: dict[tuple[str, str], int], no: int, query: str, doc: str, twice: str) -> None:
    """Refuse a (query, document) pair given on a second line: which of the two counts is not the file's to say."""
    first = seen.setdefault((query, doc), no)
    if first != no:
        raise TrecFileError(f"{path.name}, line {no}: document {doc!r} is {twice} twice for query {query!r} "
                            f"(first on line {first}); nothing was imported")


def read_run(path: Path) -> list[RunRow]:
    """The rows of a TREC run file, in file order."""
    rows, seen = [], {}
    for no, (q, _, d, rank, score, _) in _columns(path, 6, "qid Q0 docid rank score tag"):
        _once(path, seen, no, q, d, "ranked")
        rows.append(RunRow(q, d, _number(path, no, "rank", rank, int), _number(path, no, "score", score, float), no))
    return rows


def read_qrels(path: Path) -> list[Judgment]:
    """The judgments of a TREC qrels file, in file order (the iteration column is not used, as in trec_eval)."""
    rows, seen = [], {}
    for no, (q, _, d, rel) in _columns(path, 4, "qid iteration docid relevance"):
        _once(path, seen, no, q, d, "judged")
        rows.append(Judgment(q, d, _number(path, no, "relevance", rel, int), no))
    return rows
