"""The typed patent record every importer produces and every consumer reads.

`to_dict` / `from_dict` define the plain form used by the Parquet store, the native JSONL format and
the content hash (docs/corpus-format.md).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Literal

from evalctl.corpus.class_codes import ClassCode

CitationType = Literal["search_report", "examination", "applicant", "international_search", "opposition", "other"]
CITATION_TYPES: tuple[str, ...] = CitationType.__args__
# "cited": this record cites the target (backward); "citing": the target cites this record (forward).
Direction = Literal["cited", "citing"]
DIRECTIONS: tuple[str, ...] = Direction.__args__

# OpenSearch refuses a JSON string longer than this (its default opensearch.xcontent.string.length.max), so
# a record whose text fields joined (as the full-text view TACD joins them) would be longer can never be indexed.
MAX_INDEXED_CHARS = 50_000_000

_REFERS_TO_CLAIM = re.compile(r"\bclaims?\s+\d+", re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    text: str
    independent: bool

    @classmethod
    def from_text(cls, text: str) -> "Claim":
        """A claim that refers to another claim ("of claim 1") is dependent."""
        return cls(text, not _REFERS_TO_CLAIM.search(text))


@dataclass(frozen=True)
class Citation:
    target: str  # publication-number key (pubnum.PubNum.key), kind dropped
    type: CitationType
    direction: Direction = "cited"


@dataclass(frozen=True)
class PatentRecord:
    id: str  # normalised publication number key, or the source's own id (BEIR, DAPFAM families)
    jurisdiction: str | None = None  # publication authority, e.g. US, EP, WO
    kind: str | None = None
    family_id: str | None = None
    publication_date: dt.date | None = None
    priority_date: dt.date | None = None
    title: str | None = None
    abstract: str | None = None
    claims: tuple[Claim, ...] = ()
    description: str | None = None
    cpc: tuple[ClassCode, ...] = ()
    ipc: tuple[ClassCode, ...] = ()
    citations: tuple[Citation, ...] = ()
    labels: tuple[str, ...] = ()  # free landscape labels
    aliases: tuple[str, ...] = field(default=())  # other publication-number keys of the same document
    # Language of the stored title / abstract ("en", "fr", "ol" = original language, "und" = not
    # stated) where the source says; None: not recorded (every format but OPS).
    title_lang: str | None = None
    abstract_lang: str | None = None
    applicants: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The family this record belongs to; a record without a known family is its own."""
        return self.family_id or self.id

    def has_text(self) -> bool:
        return bool(self.title or self.abstract or self.claims or self.description)

    def text_chars(self) -> int:
        """Characters of all its text fields joined by one-character separators: the longest string a view
        of them renders (views.yaml joins with "\\n")."""
        parts = [self.title, self.abstract, self.description, *(c.text for c in self.claims)]
        present = [len(p) for p in parts if p]
        return sum(present) + max(len(present) - 1, 0)

    def english_text(self, *fields: str) -> bool:
        """The fields are all present and, where the language is recorded, English."""
        return all(getattr(self, f) and getattr(self, f"{f}_lang", None) in (None, "en") for f in fields)

    def to_dict(self) -> dict:
        d = {
            "id": self.id, "jurisdiction": self.jurisdiction, "kind": self.kind, "family_id": self.family_id,
            "publication_date": _iso(self.publication_date), "priority_date": _iso(self.priority_date),
            "title": self.title, "abstract": self.abstract,
            "claims": [{"text": c.text, "independent": c.independent} for c in self.claims],
            "description": self.description,
            "cpc": [c.code for c in self.cpc], "ipc": [c.code for c in self.ipc],
            "citations": [{"target": c.target, "type": c.type, "direction": c.direction} for c in self.citations],
            "labels": list(self.labels), "aliases": list(self.aliases),
        }
        # Fields added after format 1 are left out when empty, so corpora imported before them keep
        # their content hash (and their encoded and indexed vectors).
        d.update({k: v for k, v in (("title_lang", self.title_lang), ("abstract_lang", self.abstract_lang),
                                    ("applicants", list(self.applicants))) if v})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PatentRecord":
        """From the stored (already validated) form; importers validate raw input themselves."""
        return cls(
            id=d["id"], jurisdiction=d.get("jurisdiction"), kind=d.get("kind"), family_id=d.get("family_id"),
            publication_date=_date(d.get("publication_date")), priority_date=_date(d.get("priority_date")),
            title=d.get("title"), abstract=d.get("abstract"),
            claims=tuple(Claim(c["text"], c["independent"]) for c in d.get("claims") or ()),
            description=d.get("description"),
            cpc=tuple(ClassCode(c) for c in d.get("cpc") or ()), ipc=tuple(ClassCode(c) for c in d.get("ipc") or ()),
            citations=tuple(Citation(c["target"], c["type"], c["direction"]) for c in d.get("citations") or ()),
            labels=tuple(d.get("labels") or ()), aliases=tuple(d.get("aliases") or ()),
            title_lang=d.get("title_lang"), abstract_lang=d.get("abstract_lang"),
            applicants=tuple(d.get("applicants") or ()),
        )


def _iso(d: dt.date | None) -> str | None:
    return d.isoformat() if d else None


def _date(s: str | None) -> dt.date | None:
    return dt.date.fromisoformat(s) if s else None
