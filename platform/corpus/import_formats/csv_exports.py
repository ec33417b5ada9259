"""CSV exports: Lens, Espacenet, a USPTO grant table and the WIPO landscape table.

Each mapper reads one row through a RowReader; column names are those of the real exports the catalogue declares
(configs/datasets/: lens-pizza-1000, espacenet-pizza-2013-2014, uspto-grants-2019, wipo-ritonavir). Optional
columns that richer exports add (Abstract, Claims) are read when present.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from evalctl.corpus.import_formats.fields import RowReader, earliest_date, priority_family, split_claims
from evalctl.corpus.import_formats.problems import ProblemLog
from evalctl.corpus.import_formats.csv_reader import read_csv
from evalctl.corpus.import_formats.source import RecordStream, Source, require_file
from evalctl.corpus.patent_record import Citation, PatentRecord

RowMapper = Callable[[RowReader], PatentRecord | None]


def _id_or_report(r: RowReader, column: str):
    """The record's own publication number; a row without a usable one is dropped."""
    raw = r.text(column)
    if raw is None:
        r.log.add("missing_field", r.where, column, "no publication number; row skipped")
        return None
    return r.pubnum(column, raw)


def _claims(r: RowReader, column: str):
    text = r.text(column)
    return tuple(split_claims(text)) if text else ()


# --------------------------------------------------------------------------- Lens


def lens_row(r: RowReader) -> PatentRecord | None:
    p = _id_or_report(r, "Publication Number")
    if p is None:
        return None
    return PatentRecord(
        id=p.key, jurisdiction=r.text("Jurisdiction") or p.country, kind=r.text("Kind") or p.kind,
        family_id=priority_family(r.text("Priority Numbers")),
        publication_date=_lens_date(r), priority_date=earliest_date(r.text("Priority Numbers")),
        title=r.text("Title"), abstract=r.text("Abstract"), claims=_claims(r, "Claims"),
        cpc=r.codes("CPC Classifications"), ipc=r.codes("IPCR Classifications"),
    )


def _lens_date(r: RowReader) -> dt.date | None:
    # Lens writes dd/mm/yy; the separate "Publication Year" column gives the century.
    d = r.date("Publication Date", ("%d/%m/%y", "%d/%m/%Y", "%Y-%m-%d"))
    year = r.text("Publication Year")
    if d and year and year.isdigit():
        try:
            return d.replace(year=int(year))
        except ValueError:  # 29 February moved to a non-leap year: the column disagrees with itself
            r.log.add("bad_date", r.where, "Publication Date", f"day does not exist in {year}; left empty")
            return None
    return d


# --------------------------------------------------------------------------- Espacenet

_ESPACENET_CITATIONS = {
    "Patents cited in the search report": "search_report",
    "Patents cited during examination": "examination",
    "Patents cited by the applicant": "applicant",
    "International search citation": "international_search",
    "Supplementary international search citation": "international_search",
    "Patents used in opposition": "opposition",
    "Other patent citations": "other",
}


def espacenet_row(r: RowReader) -> PatentRecord | None:
    # "KR20140005697 (U); KR200476323 (Y1)": several publications of one application; the first is
    # the record, the others become aliases so citations to them still resolve.
    raw = r.text("Publication number")
    if raw is None:
        r.log.add("missing_field", r.where, "Publication number", "no publication number; row skipped")
        return None
    nums = r.pubnums("Publication number")
    if not nums:
        return None
    citations: dict[tuple[str, str], Citation] = {}
    for column, type_ in _ESPACENET_CITATIONS.items():
        for c in r.citations(column, type_):
            citations.setdefault((c.target, c.type), c)
    return PatentRecord(
        id=nums[0].key, jurisdiction=nums[0].country, kind=nums[0].kind,
        family_id=priority_family(r.text("Priority number(s)")),
        publication_date=r.date("Publication date"), priority_date=earliest_date(r.text("Priority number(s)")),
        title=r.text("Title"), abstract=r.text("Abstract"),
        cpc=r.codes("Cooperative Patent Classification"), ipc=r.codes("International classification"),
        citations=tuple(citations.values()),
        aliases=tuple(dict.fromkeys(p.key for p in nums[1:] if p.key != nums[0].key)),
    )


# --------------------------------------------------------------------------- USPTO grant table

_USPTO_KINDS = {  # the table spells the kind out; these are the WIPO ST.16 codes it stands for
    "Utility Patent Grant (with a published application)": "B2",
    "Utility Patent Grant (no published application)": "B1",
    "Design Patent": "S1",
    "Reissue Patent": "E",
    "Plant Patent": "P2",
}


def uspto_row(r: RowReader) -> PatentRecord | None:
    p = _id_or_report(r, "grant_id")
    if p is None:
        return None
    kind_text = r.text("kind") or ""
    kind = next((code for prefix, code in _USPTO_KINDS.items() if kind_text.startswith(prefix)), p.kind)
    return PatentRecord(
        id=p.key, jurisdiction=p.country, kind=kind,
        title=r.text("patent_title"), abstract=r.text("abstract"), claims=_claims(r, "claims_text"),
    )


# --------------------------------------------------------------------------- WIPO landscape table


def wipo_row(r: RowReader) -> PatentRecord | None:
    p = _id_or_report(r, "publication number")
    if p is None:
        return None
    # The WIPO table writes the word "None" for an empty family-members cell.
    members = [] if r.text("family members") == "None" else r.pubnums("family members")
    members = [m for m in members if m.key != p.key]
    return PatentRecord(
        id=p.key, jurisdiction=p.country, kind=r.text("kind code") or p.kind,
        family_id=priority_family(r.text("priority document")),
        publication_date=r.date("publication date"), priority_date=r.date("earliest priority date"),
        title=r.text("title"), ipc=r.codes("ipc classes"),
        aliases=tuple(dict.fromkeys(m.key for m in members)),
    )


def _csv_source(mapper: RowMapper, paths: list[Path], log: ProblemLog, id_column: str) -> Source:
    files = [require_file(p, "a CSV export") for p in paths]

    def records() -> RecordStream:
        for path in files:
            for where, values in read_csv(path, log, required=(id_column,)):
                yield where, mapper(RowReader(values, where, log))

    return Source(files=files, records=records)


def open_lens(paths: list[Path], log: ProblemLog) -> Source:
    return _csv_source(lens_row, paths, log, "Publication Number")


def open_espacenet(paths: list[Path], log: ProblemLog) -> Source:
    return _csv_source(espacenet_row, paths, log, "Publication number")


def open_uspto(paths: list[Path], log: ProblemLog) -> Source:
    return _csv_source(uspto_row, paths, log, "grant_id")


def open_wipo(paths: list[Path], log: ProblemLog) -> Source:
    return _csv_source(wipo_row, paths, log, "publication number")
