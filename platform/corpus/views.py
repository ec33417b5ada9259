"""Text views: which record fields, in which order, make the text a model embeds (configs/views.yaml).

A view renders None when a required field is missing, so a corpus without abstracts is reported as
not covering view "A" instead of silently indexing empty strings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from evalctl.corpus.patent_record import PatentRecord
from evalctl.config_files import SpecError, build, load_yaml

FieldName = Literal["title", "abstract", "claims", "independent_claims", "first_claim", "description"]


PLAIN_FIELDS = ("title", "abstract", "description")  # a record column each; the other fields read claims


def field_text(record: PatentRecord, name: str) -> str | None:
    if name in PLAIN_FIELDS:
        return getattr(record, name)
    if name == "claims":
        claims = [c.text for c in record.claims]
    elif name == "independent_claims":
        claims = [c.text for c in record.claims if c.independent]
    else:  # first_claim: the first independent claim
        claims = [c.text for c in record.claims if c.independent][:1]
    return "\n".join(claims) or None


@dataclass(frozen=True)
class ViewSpec:
    name: str
    fields: tuple[FieldName, ...]
    separator: str = "\n"  # between fields (MTEB's DAPFAM task joins with "\n" too)
    optional: tuple[FieldName, ...] = ()  # fields that may be missing; all others are required
    description: str = ""

    def __post_init__(self):
        if not self.fields:
            raise ValueError(f"view {self.name!r} has no fields")
        stray = set(self.optional) - set(self.fields)
        if stray:
            raise ValueError(f"view {self.name!r}: optional field(s) {sorted(stray)} are not among its fields")

    @property
    def columns(self) -> tuple[str, ...]:
        """The stored record columns the view reads (Corpus.records(columns=...))."""
        return tuple(dict.fromkeys(f if f in PLAIN_FIELDS else "claims" for f in self.fields))

    def missing(self, record: PatentRecord) -> tuple[str, ...]:
        """The required fields this record lacks (empty when the view renders)."""
        return tuple(f for f in self.fields if f not in self.optional and not field_text(record, f))

    def render(self, record: PatentRecord) -> str | None:
        if self.missing(record):
            return None
        parts = (field_text(record, f) for f in self.fields)
        return self.separator.join(p for p in parts if p)


def load_views(path: str = "views.yaml") -> dict[str, ViewSpec]:
    doc = load_yaml(path)
    where = f"configs/{path}"
    if not isinstance(doc, dict) or not isinstance(doc.get("views"), dict) or set(doc) != {"views"}:
        raise SpecError(f"{where}: expected exactly one top-level key 'views' mapping names to views")
    out = {}
    for name, body in doc["views"].items():
        if not isinstance(body, dict):
            raise SpecError(f"{where}: views.{name}: expected a mapping")
        if "name" in body:
            raise SpecError(f"{where}: views.{name}: the key is the name; remove 'name'")
        out[name] = build(ViewSpec, {"name": str(name), **body}, f"{where}: views.{name}")
    return out


@dataclass
class ViewCoverage:
    rendered: int = 0
    missing: Counter = field(default_factory=Counter)  # field -> records lacking it
    examples: list[str] = field(default_factory=list)  # a few ids that do not render


def view_coverage(records: Iterable[PatentRecord], views: dict[str, ViewSpec], examples: int = 3) -> dict[str, ViewCoverage]:
    cov = {name: ViewCoverage() for name in views}
    for r in records:
        for name, v in views.items():
            lacking = v.missing(r)
            c = cov[name]
            if lacking:
                c.missing.update(lacking)
                if len(c.examples) < examples:
                    c.examples.append(r.id)
            else:
                c.rendered += 1
    return cov
