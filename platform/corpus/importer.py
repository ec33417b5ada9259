"""`evalctl corpus import`: source files -> validated records -> a corpus folder with a manifest.

Written to a temporary folder and renamed into place, so a failed import leaves nothing half-made.
Re-importing a source whose records hash the same is a no-op; a different corpus under the same name
is an error unless `overwrite`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from evalctl.atomic import publish_dir, replace_dir, staging_dir
from evalctl.corpus.store import (CORPUS_FILE, FORMAT_VERSION, MANIFEST_FILE, PROBLEMS_FILE, QUERIES_FILE, Corpus,
                                  RecordWriter, corpora_root, load_corpus, write_json)
from evalctl.corpus.family_records import DOCUMENT_LEVELS, family_records
from evalctl.corpus.import_formats.registry import IMPORT_FORMATS
from evalctl.corpus.import_formats.problems import CorpusImportError, Problem, ProblemLog, Where
from evalctl.corpus.import_formats.source import RecordStream
from evalctl.corpus.patent_record import MAX_INDEXED_CHARS
from evalctl.names import check_name
from evalctl.provenance import file_sha256
from evalctl.corpus.qrels import QrelsSpec, build_given_qrels

COUNTED_FIELDS = ("title", "abstract", "claims", "description", "cpc", "ipc", "citations", "family_id",
                  "publication_date", "priority_date", "labels", "aliases", "applicants")


@dataclass(frozen=True)
class ImportResult:
    corpus: Corpus
    problems: tuple[Problem, ...]
    rows_read: int
    unchanged: bool  # the same corpus was already there; nothing was written

    @property
    def problem_counts(self) -> dict[str, int]:
        return self.corpus.manifest["problems"]


@dataclass
class _Written:
    count: int
    content_hash: str
    rows_read: int
    fields: Counter
    languages: Counter  # "title:en", "abstract:fr" ... where the source records the language


def _write(stream: RecordStream, path: Path, log: ProblemLog, labels: tuple[str, ...]) -> _Written:
    writer = RecordWriter(path)
    seen: dict[str, Where] = {}
    rows, fields, languages = 0, Counter(), Counter()
    try:
        for where, rec in stream:
            rows += 1
            if rec is None:
                continue
            if not rec.has_text():
                log.add("missing_field", where, "title/abstract/claims/description", f"{rec.id}: no text at all; skipped")
                continue
            if (chars := rec.text_chars()) > MAX_INDEXED_CHARS:
                log.add("malformed_row", where, "title/abstract/claims/description",
                        f"{rec.id}: its text is {chars:,} characters, over the {MAX_INDEXED_CHARS:,} OpenSearch accepts in "
                        "one string (a view joining its fields could never be indexed); record skipped")
                continue
            if rec.id in seen:
                log.add("duplicate_id", where, "id", f"{rec.id} already imported from {seen[rec.id]}; this one skipped")
                continue
            seen[rec.id] = where
            if labels:
                rec = replace(rec, labels=tuple(dict.fromkeys(rec.labels + labels)))
            fields.update(f for f in COUNTED_FIELDS if getattr(rec, f))
            langs = [f"{f}:{lang}" for f in ("title", "abstract") if (lang := getattr(rec, f"{f}_lang"))]
            languages.update(langs + (["no English text"] if langs and not rec.english_text("title") and
                                      not rec.english_text("abstract") else []))
            writer.add(rec)
    finally:
        content_hash = writer.close()
    return _Written(writer.count, content_hash, rows, fields, languages)


def _opener(fmt: str):
    if fmt not in IMPORT_FORMATS:
        raise CorpusImportError(f"unknown format {fmt!r}; known: {', '.join(IMPORT_FORMATS)}")
    return IMPORT_FORMATS.get(fmt)


def source_files(fmt: str, sources: list[Path]) -> list[Path]:
    """The files an import of `sources` reads (folders expanded as the format does), without reading them."""
    return _opener(fmt)([Path(s) for s in sources], ProblemLog()).files


def import_corpus(fmt: str, sources: list[Path], name: str | None = None, out: Path | None = None, *,
                  strict: bool = False, labels: tuple[str, ...] = (), overwrite: bool = False,
                  documents: str = "publication", dataset: dict | None = None) -> ImportResult:
    """`documents`: "publication" keeps each source record; "family" merges each family into one
    record (platform/corpus/family_records.py). `dataset`: the catalogue's account of where the sources were
    published (datasets/fetch.py, Fetched.provenance), kept in the manifest."""
    open_source = _opener(fmt)
    if documents not in DOCUMENT_LEVELS:
        raise CorpusImportError(f"unknown document level {documents!r}; known: {', '.join(DOCUMENT_LEVELS)}")
    if not sources:
        raise CorpusImportError("no source given")
    if not name and not out:
        raise CorpusImportError("give the corpus a --name (or an --out folder)")
    dest = Path(out) if out else corpora_root() / check_name(name, "--name")
    name = check_name(name or dest.name, "--name" if name else "--out folder name (give a --name instead)")
    if dest.exists() and not _is_corpus(dest) and not _is_empty_dir(dest):
        raise CorpusImportError(f"{dest} exists and is not an evalctl corpus (no {MANIFEST_FILE} of ours); "
                                "nothing was changed: choose another --name or --out")
    log = ProblemLog(strict=strict)
    source = open_source([Path(s) for s in sources], log)
    with staging_dir(dest) as tmp:
        records = source.records() if documents == "publication" else family_records(source.records())
        written = _write(records, tmp / CORPUS_FILE, log, labels)
        if written.count == 0:
            raise CorpusImportError(f"no valid records in {', '.join(map(str, sources))}; "
                                    f"problems: {log.counts() or 'none'}" + _first_problems(log))
        queries = _write(source.queries(), tmp / QUERIES_FILE, log, ()) if source.queries else None
        manifest = {
            "format_version": FORMAT_VERSION, "name": name, "content_hash": written.content_hash,
            "record_count": written.count, "rows_read": written.rows_read,
            "fields": dict(sorted(written.fields.items())),
            "queries_count": queries.count if queries else 0,
            "queries_hash": queries.content_hash if queries else None,
            "source": {"format": fmt, "files": [{"path": str(p.resolve()), "bytes": p.stat().st_size,
                                                   "sha256": file_sha256(p)} for p in source.files]},
            **({"dataset": dataset} if dataset else {}),
            "labels": list(labels), "strict": strict, "documents": documents,
            "languages": dict(sorted(written.languages.items())),
        }
        corpus = Corpus(name, tmp, manifest)
        if source.qrels:
            build_given_qrels(corpus, source.qrels(), log, QrelsSpec(name="given"))
        manifest["problems"] = log.counts()
        with open(tmp / PROBLEMS_FILE, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in log.problems)
        write_json(tmp / MANIFEST_FILE, manifest)
        if not publish_dir(tmp, dest):  # taken, perhaps by an identical import running at the same time
            if _same(dest, manifest):
                return ImportResult(load_corpus(dest), tuple(log.problems), written.rows_read, unchanged=True)
            if not overwrite:
                raise CorpusImportError(_clash(dest, manifest))
            replace_dir(tmp, dest)
    return ImportResult(load_corpus(dest), tuple(log.problems), written.rows_read, unchanged=False)


def _is_corpus(path: Path) -> bool:
    """Whether `path` is a folder an import made: the only kind --overwrite may replace."""
    try:
        m = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("format_version") == FORMAT_VERSION and "content_hash" in m


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _identity(m: dict) -> tuple:
    return m.get("content_hash"), m.get("queries_hash"), [f["sha256"] for f in m.get("source", {}).get("files", [])]


def _same(dest: Path, manifest: dict) -> bool:
    try:
        return _identity(json.loads((dest / MANIFEST_FILE).read_text())) == _identity(manifest)
    except (OSError, json.JSONDecodeError):
        return False


def _clash(dest: Path, manifest: dict) -> str:
    try:
        old = json.loads((dest / MANIFEST_FILE).read_text()).get("content_hash")
    except (OSError, json.JSONDecodeError):
        old = "unreadable manifest"
    return (f"{dest} already holds a different corpus ({old}); this import gives {manifest['content_hash']}. "
            "Use another --name, or --overwrite to replace it.")


def _first_problems(log: ProblemLog, n: int = 5) -> str:
    return "".join(f"\n  {p}" for p in log.problems[:n])
