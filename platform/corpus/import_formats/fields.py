"""Reading one source row field by field, reporting each unusable value where it was found.

Every importer maps its columns through a `RowReader`, so encoding, code, date and publication-number
problems are detected and worded the same way for every format.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import math
import re
from dataclasses import dataclass
from typing import Any

from evalctl.corpus.class_codes import ClassCode, parse_code, split_codes
from evalctl.corpus.import_formats.problems import ProblemLog, Where
from evalctl.corpus.patent_record import Citation, Claim
from evalctl.corpus.pubnum import PubNum, parse_pubnum, split_pubnums

# Sources are read as UTF-8 with errors="surrogateescape": an undecodable byte becomes a lone surrogate,
# which we detect here per field instead of failing the whole file.
_SURROGATE = re.compile("[\udc80-\udcff]+")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]+")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")  # not tab, LF, CR (whitespace, collapsed)
_DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%Y%m%d", "%d.%m.%Y", "%Y/%m/%d")


@dataclass
class RowReader:
    values: dict[str, Any]
    where: Where
    log: ProblemLog

    def raw(self, name: str) -> Any:
        return self.values.get(name)

    def text(self, name: str) -> str | None:
        """A cleaned string (HTML entities decoded, whitespace collapsed), None when empty."""
        v = self.values.get(name)
        if v is None:
            return None
        if not isinstance(v, str):
            if isinstance(v, float) and not math.isfinite(v):  # JSON's NaN/Infinity, pandas' NaN: no text
                self.log.add("bad_value", self.where, name, f"{v} is not a text; left empty")
                return None
            if isinstance(v, (bool, dict, list, tuple)):  # never a text: its repr would be stored
                self.log.add("bad_value", self.where, name, f"expected text, got {type(v).__name__}; ignored")
                return None
            v = str(v)
        if _SURROGATE.search(v):
            self.log.add("bad_encoding", self.where, name,
                         f"bytes that are not UTF-8 ({_bad_bytes(v)}) replaced by U+FFFD (one per run)")
            v = _SURROGATE.sub("\ufffd", v)
        if _LONE_SURROGATE.search(v):  # e.g. "\ud800" in JSON: not encodable, so never storable
            self.log.add("bad_encoding", self.where, name, "lone UTF-16 surrogate(s) replaced by U+FFFD")
            v = _LONE_SURROGATE.sub("\ufffd", v)
        if _CONTROL.search(v):
            self.log.add("bad_value", self.where, name, "NUL or other control characters removed")
            v = _CONTROL.sub(" ", v)
        v = " ".join(html.unescape(v).split())
        return v or None

    def pubnum(self, name: str, raw: str | None = None) -> PubNum | None:
        raw = self.text(name) if raw is None else raw
        if raw is None:
            return None
        p = parse_pubnum(raw)
        if p is None:
            self.log.add("bad_pubnum", self.where, name, f"{raw!r} is not a publication number")
        return p

    def pubnums(self, name: str) -> list[PubNum]:
        raw = self.text(name)
        found = (self.pubnum(name, part) for part in split_pubnums(raw)) if raw else ()
        return [p for p in found if p]

    def codes(self, name: str) -> tuple[ClassCode, ...]:
        raw = self.text(name)
        if raw is None:
            return ()
        out: dict[str, ClassCode] = {}
        for part in split_codes(raw):
            c = parse_code(part)
            if c is None:
                self.log.add("bad_code", self.where, name, f"{part!r} is not a CPC/IPC code; dropped")
            else:
                out.setdefault(c.code, c)
        return tuple(out.values())

    def date(self, name: str, formats: tuple[str, ...] = _DATE_FORMATS) -> dt.date | None:
        raw = self.text(name)
        if raw is None:
            return None
        d = parse_date(raw, formats)
        if d is None:
            self.log.add("bad_date", self.where, name, f"{raw!r} is not a date; left empty")
        return d

    def citations(self, name: str, type_: str, direction: str = "cited") -> list[Citation]:
        return [Citation(p.key, type_, direction) for p in self.pubnums(name)]


def parse_date(raw: str, formats: tuple[str, ...] = _DATE_FORMATS) -> dt.date | None:
    s = raw.strip()[:10] if "T" in raw else raw.strip()
    for f in formats:
        try:
            return dt.datetime.strptime(s, f).date()
        except ValueError:
            continue
    return None


def earliest_date(cell: str | None) -> dt.date | None:
    """The earliest YYYYMMDD found in a priority cell ("US 201161550506 P 20111024;;...")."""
    found = [parse_date(m) for m in re.findall(r"(?<!\d)((?:19|20)\d{6})(?!\d)", cell or "")]
    found = [d for d in found if d]
    return min(found) if found else None


def priority_family(cell: str | None) -> str | None:
    """A family id for sources that give none: records with the same set of priority applications
    form one family (the DOCDB "simple family" definition). Dates are stripped before comparing."""
    parts = {" ".join(re.sub(r"(?<!\d)(?:19|20)\d{6}(?!\d)", "", p).split()) for p in split_pubnums(cell or "")}
    parts.discard("")
    if not parts:
        return None
    return "prio:" + hashlib.sha1(";".join(sorted(parts)).encode()).hexdigest()[:12]


def split_claims(text: str) -> list[Claim]:
    """Numbered claims in one string ("1. A method ... 2. The method of claim 1 ...") as a list.

    Boundaries are found in order (1., 2., 3., ...), so numbers inside a claim ("5.0", "step 2)")
    do not split it. Text without numbering stays one claim.
    """
    starts: list[tuple[int, int]] = []  # (start of the number, start of the claim text)
    pos, n = 0, 1
    while m := re.compile(rf"(?:^|[\s,;\[]){n}\s?\.\s").search(text, pos):
        starts.append((m.start(), m.end()))
        pos, n = m.end(), n + 1
    if len(starts) < 2:
        return [Claim.from_text(text.strip(" [],;"))] if text.strip(" [],;") else []
    bounds = [s for s, _ in starts[1:]] + [len(text)]
    claims = (text[body:end].strip(" [],;") for (_, body), end in zip(starts, bounds))
    return [Claim.from_text(c) for c in claims if c]


def _bad_bytes(v: str) -> str:
    raw = "".join(_SURROGATE.findall(v)).encode("utf-8", "surrogateescape")
    return " ".join(f"0x{b:02X}" for b in raw[:6]) + (" ..." if len(raw) > 6 else "")
