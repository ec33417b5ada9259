"""Family-level documents: one record per family, its other publications as aliases.

A family's publications (a US A1 and its B2, an EP and its WO) are one invention; counting each as a
document makes same-family hits trivial and weights big families. The family record keeps the text,
id, jurisdiction, kind and dates of its best-described member (English title and abstract first,
then the most text, then the earliest publication) and takes the union of all members' codes,
citations, applicants and labels; every other member's number becomes an alias, so citations to any
member resolve to the family record. The whole stream is held in memory to group it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from evalctl.corpus.import_formats.problems import Where
from evalctl.corpus.import_formats.source import RecordStream
from evalctl.corpus.patent_record import PatentRecord

DOCUMENT_LEVELS = ("publication", "family")


def _rank(indexed: tuple[int, PatentRecord]) -> tuple:
    i, r = indexed
    return (not r.english_text("title", "abstract"), not r.english_text("abstract"), not r.english_text("title"),
            not r.abstract, not r.title, r.publication_date or dt.date.max, i)


def _union(values) -> tuple:
    return tuple(dict.fromkeys(v for vs in values for v in vs))


def merge_family(members: list[PatentRecord]) -> PatentRecord:
    rep = min(enumerate(members), key=_rank)[1]
    ordered = [rep] + [m for m in members if m is not rep]
    aliases = _union([m.id, *m.aliases] for m in ordered)
    priorities = [m.priority_date for m in members if m.priority_date]
    return replace(rep, family_id=rep.family, aliases=tuple(a for a in aliases if a != rep.id),
                   ipc=_union(m.ipc for m in ordered), cpc=_union(m.cpc for m in ordered),
                   citations=_union(m.citations for m in ordered), applicants=_union(m.applicants for m in ordered),
                   labels=_union(m.labels for m in ordered), priority_date=min(priorities) if priorities else None)


def family_records(stream: RecordStream) -> RecordStream:
    """The stream's records merged per family, in order of each family's first member. Absorbed
    members come out as (where, None), so the import still counts every source row it read."""
    families: dict[str, list[tuple[Where, PatentRecord]]] = {}
    for where, rec in stream:
        if rec is None:
            yield where, None
        else:
            families.setdefault(rec.family, []).append((where, rec))
    for members in families.values():
        merged = merge_family([r for _, r in members])
        for where, r in members:
            yield where, (merged if r.id == merged.id else None)
