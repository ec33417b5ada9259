"""The native format: JSON Lines, one `PatentRecord.to_dict()` object per line (docs/corpus-format.md).

Values are re-validated as if they came from elsewhere, so a hand-written or foreign file gets the
same checks (codes, dates, citation types) as a CSV export.
"""

from __future__ import annotations

import json
from pathlib import Path

from evalctl.corpus.import_formats.fields import RowReader, split_claims
from evalctl.corpus.import_formats.problems import ProblemLog, Where
from evalctl.corpus.import_formats.source import RecordStream, Source, require_file
from evalctl.corpus.patent_record import CITATION_TYPES, DIRECTIONS, Citation, Claim, PatentRecord
from evalctl.corpus.pubnum import parse_pubnum

_FIELDS = set(PatentRecord.__dataclass_fields__)


def read_jsonl(path: Path, log: ProblemLog):
    """(Where, dict) per non-blank line; invalid JSON or a non-object line is reported and skipped. A UTF-8
    byte-order mark (Windows editors write one) is not part of the first line."""
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = Where(path.name, line_no)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                log.add("malformed_row", where, None, f"not valid JSON ({e.msg} at column {e.colno}); line skipped")
                continue
            except RecursionError:
                log.add("malformed_row", where, None, "JSON nested too deeply to read; line skipped")
                continue
            if not isinstance(obj, dict):
                log.add("malformed_row", where, None, f"expected a JSON object, got {type(obj).__name__}; line skipped")
                continue
            yield where, obj


def native_record(r: RowReader) -> PatentRecord | None:
    unknown = sorted(set(r.values) - _FIELDS)
    if unknown:
        r.log.add("bad_value", r.where, ", ".join(unknown), f"unknown field(s) ignored; allowed: {', '.join(sorted(_FIELDS))}")
    rid = _key(r.text("id"))
    if rid is None:
        r.log.add("missing_field", r.where, "id", "no id; record skipped")
        return None
    return PatentRecord(
        id=rid, jurisdiction=r.text("jurisdiction"), kind=r.text("kind"), family_id=r.text("family_id"),
        publication_date=r.date("publication_date", ("%Y-%m-%d",)),
        priority_date=r.date("priority_date", ("%Y-%m-%d",)),
        title=r.text("title"), abstract=r.text("abstract"), claims=_claims(r), description=r.text("description"),
        cpc=r.codes("cpc"), ipc=r.codes("ipc"), citations=_citations(r),
        labels=_strings(r, "labels"), aliases=tuple(dict.fromkeys(_key(a) for a in _strings(r, "aliases"))),
        title_lang=r.text("title_lang"), abstract_lang=r.text("abstract_lang"), applicants=_strings(r, "applicants"),
    )


def _list(r: RowReader, name: str) -> list:
    v = r.raw(name)
    if v is None:
        return []
    if not isinstance(v, list):
        r.log.add("bad_value", r.where, name, f"expected a list, got {type(v).__name__}; ignored")
        return []
    return v


def _strings(r: RowReader, name: str) -> tuple[str, ...]:
    items = (RowReader({name: v}, r.where, r.log).text(name) for v in _list(r, name))
    return tuple(dict.fromkeys(s for s in items if s))


def _claims(r: RowReader) -> tuple[Claim, ...]:
    if isinstance(r.raw("claims"), str):  # one string of numbered claims
        text = r.text("claims")
        return tuple(split_claims(text)) if text else ()
    out = []
    for i, c in enumerate(_list(r, "claims")):
        sub = RowReader(c if isinstance(c, dict) else {"text": c}, r.where, r.log)
        text = sub.text("text")
        if text is None:
            r.log.add("bad_value", r.where, f"claims[{i}]", "empty claim dropped")
        elif isinstance(sub.raw("independent"), bool):
            out.append(Claim(text, sub.raw("independent")))
        else:
            out.append(Claim.from_text(text))
    return tuple(out)


def _citations(r: RowReader) -> tuple[Citation, ...]:
    out = []
    for i, c in enumerate(_list(r, "citations")):
        name = f"citations[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("target"), str):
            r.log.add("bad_value", r.where, name, "expected an object with a 'target' string; dropped")
            continue
        type_, direction = c.get("type", "other"), c.get("direction", "cited")
        if type_ not in CITATION_TYPES or direction not in DIRECTIONS:
            r.log.add("bad_value", r.where, name, f"type {type_!r} / direction {direction!r} not in "
                      f"{CITATION_TYPES} / {DIRECTIONS}; dropped")
            continue
        target = _key(RowReader({name: c["target"]}, r.where, r.log).text(name))
        if target is None:
            r.log.add("bad_value", r.where, name, "empty target; dropped")
            continue
        out.append(Citation(target, type_, direction))
    return tuple(out)


def _key(value: str | None) -> str | None:
    """The one rule for ids, aliases and citation targets (docs/corpus-format.md): a publication number
    becomes its key, anything else (a family or dataset id) is kept as written."""
    if value is None:
        return None
    p = parse_pubnum(value)
    return p.key if p else value


def open_native(paths: list[Path], log: ProblemLog) -> Source:
    files = [require_file(p, "native JSON Lines") for p in paths]

    def records() -> RecordStream:
        for path in files:
            for where, obj in read_jsonl(path, log):
                yield where, native_record(RowReader(_joined_codes(obj), where, log))

    return Source(files=files, records=records)


def _joined_codes(obj: dict) -> dict:
    # Codes may be given as a list or as one "A;B" string; RowReader.codes splits strings.
    return {k: ("; ".join(map(str, v)) if k in ("cpc", "ipc") and isinstance(v, list) else v) for k, v in obj.items()}
