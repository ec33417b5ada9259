"""EPO Open Patent Services (OPS) bibliographic JSON, as OPS returns it.

Two response shapes: biblio-search (`ops:world-patent-data` > `ops:biblio-search` > `ops:search-result`
> `exchange-documents`) and published-data biblio (`ops:world-patent-data` > `exchange-documents`).
Sources: files or folders of `.json` / `.json.gz` pages. OPS's JSON is XML turned inside out: `$` is an
element's text, `@name` an attribute, one child is an object and several an array, and an empty element
is `{}`; `_items` and `_text` read any of those shapes.

A record is one publication: id and aliases from the DOCDB and epodoc numbers, `@family-id` as the
family, English title and abstract where OPS has them (else the first language given, recorded in
`title_lang` / `abstract_lang`), IPCR texts and CPC parts as codes, patent citations by their DOCDB
number with the type taken from `@cited-phase` (and `@cited-by` when the phase is undefined), priority
date, applicants. A page that cannot be read is reported and skipped; the other pages go on.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from evalctl.corpus.import_formats.fields import RowReader, parse_date
from evalctl.corpus.import_formats.problems import CorpusImportError, ProblemLog, Where
from evalctl.corpus.import_formats.source import RecordStream, Source
from evalctl.corpus.patent_record import Citation, PatentRecord
from evalctl.corpus.pubnum import parse_pubnum

SUFFIXES = (".json", ".json.gz")
# OPS `@cited-phase` (DOCDB citation origin) -> CitationType. "undefined" and unknown phases fall back
# to `@cited-by` (applicant) or "other".
PHASES = {
    "search": "search_report", "national-search-report": "search_report", "search-report": "search_report",
    "supplementary-search-report": "search_report",
    "international-search-report": "international_search", "isr": "international_search",
    "examination": "examination", "national-examination": "examination",
    "opposition": "opposition", "applicant": "applicant",
}
KNOWN_UNMAPPED_PHASES = {"undefined", "other", "third-party", "pre-grant-pre-search", "appeal"}


def _items(v: Any) -> list:
    """An element that may be absent, empty `{}`, one object or an array, as a list."""
    if v is None or v == {} or v == "":
        return []
    return v if isinstance(v, list) else [v]


def _text(v: Any) -> str | None:
    """An element's text: `{"$": ...}`, a bare string, or the `$` of each `p` paragraph joined."""
    if isinstance(v, str):
        return v
    if not isinstance(v, dict):
        return None
    if "$" in v:
        return v["$"] if isinstance(v["$"], str) else None
    parts = [t for p in _items(v.get("p")) if (t := _text(p))]
    return "\n".join(parts) or None


def ops_files(paths: list[Path]) -> list[Path]:
    """The pages named: files as given, folders expanded to their .json / .json.gz files, sorted."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SUFFIXES))
            if not found:
                raise CorpusImportError(f"{p}: no .json or .json.gz files (OPS pages) in this folder")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise CorpusImportError(f"{p}: not found (OPS JSON page)")
    return files


# An OPS page is about 1.5 MB of JSON (100 documents); past these a file is no page, and reading it whole could
# take the machine's memory (a few kilobytes of gzip can hold gigabytes of whitespace).
MAX_PAGE_BYTES = 64 << 20
MAX_GZIP_RATIO = 100  # OPS's pretty-printed JSON compresses about 18 times


class _TooLarge(Exception):
    pass


def _page_bytes(path: Path) -> bytes:
    """The page's bytes, decompressed a megabyte at a time and given up past MAX_PAGE_BYTES or MAX_GZIP_RATIO."""
    if not path.name.endswith(".gz"):
        if (size := path.stat().st_size) > MAX_PAGE_BYTES:
            raise _TooLarge(f"{size:,} bytes, over the {MAX_PAGE_BYTES:,} an OPS page can be")
        return path.read_bytes()
    out = bytearray()
    with gzip.open(path, "rb") as f:
        while block := f.read(1 << 20):
            out += block
            read = max(1, f.fileobj.tell())
            if len(out) > MAX_PAGE_BYTES or (len(out) > 8 << 20 and len(out) > MAX_GZIP_RATIO * read):
                raise _TooLarge(f"{len(out):,} bytes from the first {read:,} of the gzip file (over "
                                f"{MAX_PAGE_BYTES:,} bytes, or {MAX_GZIP_RATIO} times its size): not an OPS page")
    return bytes(out)


def read_page(path: Path, log: ProblemLog) -> list[dict] | None:
    """The exchange documents of one page; None (problem logged) when the page is unreadable."""
    try:  # utf-8-sig: json.loads refuses a byte-order mark
        page = json.loads(_page_bytes(path).decode("utf-8-sig", errors="surrogateescape"))
    except _TooLarge as e:
        log.add("malformed_row", Where(path.name), None, f"decompresses to {e}; page skipped")
        return None
    except json.JSONDecodeError as e:
        log.add("malformed_row", Where(path.name, e.lineno), None, f"not valid JSON ({e.msg}); page skipped")
        return None
    except (OSError, EOFError, zlib.error) as e:  # truncated or damaged gzip
        log.add("malformed_row", Where(path.name), None, f"unreadable page ({e}); page skipped")
        return None
    root = page.get("ops:world-patent-data") if isinstance(page, dict) else None
    if not isinstance(root, dict):
        log.add("malformed_row", Where(path.name), None, "no ops:world-patent-data object: not an OPS response; page skipped")
        return None
    search = root.get("ops:biblio-search")
    holder = search.get("ops:search-result", {}) if isinstance(search, dict) else root
    docs = []
    for group in _items(holder.get("exchange-documents") if isinstance(holder, dict) else None):
        docs += _items(group.get("exchange-document")) if isinstance(group, dict) else [group]
    return docs


def _docdb(ids: Any) -> dict | None:
    return next((d for d in _items(ids) if isinstance(d, dict) and d.get("@document-id-type") == "docdb"), None)


def _pick_lang(entries: list) -> tuple[str | None, str | None]:
    """(text, language) of the English entry, else of the first entry with text ("und": no @lang)."""
    found = [(t, e.get("@lang") or "und") for e in entries if isinstance(e, dict) if (t := _text(e))]
    return next((f for f in found if f[1] == "en"), found[0] if found else (None, None))


class _Doc:
    """Reads one exchange-document into a PatentRecord, logging each unusable value."""

    def __init__(self, doc: dict, where: Where, log: ProblemLog):
        self.doc, self.where, self.log = doc, where, log
        self.biblio = doc.get("bibliographic-data") if isinstance(doc.get("bibliographic-data"), dict) else {}

    def _reader(self, values: dict) -> RowReader:
        return RowReader(values, self.where, self.log)

    def record(self) -> PatentRecord | None:
        d = self.doc
        raw = "".join(str(d.get(k) or "") for k in ("@country", "@doc-number"))
        pub = parse_pubnum(raw + (f" {d['@kind']}" if d.get("@kind") else "")) if d.get("@doc-number") else None
        if pub is None:
            self.log.add("missing_field", self.where, "@country/@doc-number",
                         f"no usable publication number ({raw!r}); document skipped")
            return None
        title, title_lang = _pick_lang(_items(self.biblio.get("invention-title")))
        abstract, abstract_lang = _pick_lang(_items(d.get("abstract")))
        r = self._reader({"title": title, "abstract": abstract, "family": d.get("@family-id"),
                          "ipcr": "; ".join(self._ipcr()), "cpc": "; ".join(self._cpc())})
        title, abstract = r.text("title"), r.text("abstract")
        return PatentRecord(
            id=pub.key, jurisdiction=pub.country, kind=pub.kind, family_id=r.text("family"),
            publication_date=self._pub_date(), priority_date=self._priority_date(),
            title=title, abstract=abstract,
            title_lang=title_lang if title else None, abstract_lang=abstract_lang if abstract else None,
            ipc=r.codes("ipcr"), cpc=r.codes("cpc"), citations=self._citations(),
            aliases=self._aliases(pub.key), applicants=self._applicants(),
        )

    def _pub_date(self):
        ref = _docdb((self.biblio.get("publication-reference") or {}).get("document-id"))
        return self._reader({"publication-reference date": _text((ref or {}).get("date"))}).date(
            "publication-reference date", ("%Y%m%d",))

    def _priority_date(self):
        dates = [parse_date(t, ("%Y%m%d",)) for c in _items((self.biblio.get("priority-claims") or {}).get("priority-claim"))
                 if isinstance(c, dict) for i in _items(c.get("document-id")) if isinstance(i, dict)
                 if (t := _text(i.get("date")))]
        dates = [x for x in dates if x]
        return min(dates) if dates else None

    def _aliases(self, key: str) -> tuple[str, ...]:
        ids = _items((self.biblio.get("publication-reference") or {}).get("document-id"))
        keys = (parse_pubnum(t) for i in ids if isinstance(i, dict) and i.get("@document-id-type") == "epodoc"
                if (t := _text(i.get("doc-number"))))
        return tuple(dict.fromkeys(p.key for p in keys if p and p.key != key))

    def _ipcr(self) -> list[str]:
        entries = _items((self.biblio.get("classifications-ipcr") or {}).get("classification-ipcr"))
        return [t for e in entries if isinstance(e, dict) if (t := _text(e.get("text")))]

    def _cpc(self) -> list[str]:
        out = []
        for c in _items((self.biblio.get("patent-classifications") or {}).get("patent-classification")):
            if not isinstance(c, dict) or (c.get("classification-scheme") or {}).get("@scheme") != "CPC":
                continue  # US, FI and F-term classes are not CPC
            parts = [_text(c.get(k)) or "" for k in ("section", "class", "subclass", "main-group", "subgroup")]
            out.append("".join(parts[:3]) + (f"{parts[3]}/{parts[4]}" if parts[3] else ""))
        return out

    def _citations(self) -> tuple[Citation, ...]:
        out: dict[Citation, None] = {}  # one per (target, type): kinds of one number are one document
        for c in _items((self.biblio.get("references-cited") or {}).get("citation")):
            patcit = c.get("patcit") if isinstance(c, dict) else None
            if not isinstance(patcit, dict):
                continue  # a non-patent citation
            if patcit.get("@dnum-type", "publication number") != "publication number":
                continue  # cited by application number: no publication to resolve to
            ref = _docdb(patcit.get("document-id"))
            raw = "".join(_text((ref or {}).get(k)) or "" for k in ("country", "doc-number"))
            target = parse_pubnum(raw) if raw else None
            if target is None:
                self.log.add("bad_pubnum", self.where, "patcit", f"cited DOCDB number {raw!r} unusable; citation dropped")
                continue
            out.setdefault(Citation(target.key, self._citation_type(c)))
        return tuple(out)

    def _citation_type(self, c: dict) -> str:
        phase = str(c.get("@cited-phase") or "undefined").lower()
        if phase in PHASES:
            return PHASES[phase]
        if phase not in KNOWN_UNMAPPED_PHASES:
            self.log.add("bad_value", self.where, "@cited-phase", f"unknown citation phase {phase!r}; typed by @cited-by")
        return "applicant" if c.get("@cited-by") == "applicant" else "other"

    def _applicants(self) -> tuple[str, ...]:
        entries = [a for a in _items(((self.biblio.get("parties") or {}).get("applicants") or {}).get("applicant"))
                   if isinstance(a, dict)]
        # epodoc names are normalised (upper case, "[CC]" tag); the original form only when OPS gave no epodoc one.
        chosen = [a for a in entries if a.get("@data-format") == "epodoc"] or entries
        names = (self._reader({"n": _text((a.get("applicant-name") or {}).get("name"))}).text("n") for a in chosen)
        return tuple(dict.fromkeys(n for n in names if n))


def _records(files: list[Path], log: ProblemLog) -> RecordStream:
    for path in files:
        docs = read_page(path, log)
        for n, doc in enumerate(docs or (), 1):
            where = Where(path.name, row=n)
            if not isinstance(doc, dict):
                log.add("malformed_row", where, None, f"exchange-document is a {type(doc).__name__}, not an object; skipped")
                yield where, None
                continue
            try:
                yield where, _Doc(doc, where, log).record()
            except (AttributeError, TypeError) as e:  # an element of an unexpected shape (a list where OPS sends an object ...)
                log.add("malformed_row", where, None, f"exchange-document of an unexpected shape ({e}); skipped")
                yield where, None


def open_ops(paths: list[Path], log: ProblemLog) -> Source:
    files = ops_files(paths)
    return Source(files=files, records=lambda: _records(files, log))
