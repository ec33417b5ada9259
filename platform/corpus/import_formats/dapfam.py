"""DAPFAM's published layout (datalyes/DAPFAM_patent), read from a local folder.

corpus.parquet (id column `relevant_id`), queries.parquet (`query_id`), each with title_en,
abstract_en, claims_text, description_en; qrels_all.parquet with query_id, relevant_id,
relevance_score (> 0 is relevant) and domain_rel (IN / OUT; null: unlabelled). Ids are family ids, so each record's
family is itself. DAPFAM's qrels and domain labels are taken as given.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from evalctl.corpus.import_formats.fields import RowReader, split_claims
from evalctl.corpus.import_formats.problems import CorpusImportError, ProblemLog, Where
from evalctl.corpus.import_formats.source import GivenPair, RecordStream, Source, require_file
from evalctl.corpus.patent_record import Claim, PatentRecord

QRELS_COLUMNS = ("query_id", "relevant_id", "relevance_score", "domain_rel")


def read_parquet(path: Path, required: tuple[str, ...]) -> Iterator[tuple[Where, dict]]:
    """Rows as dicts, a few thousand at a time, so a large file never sits in memory whole."""
    try:
        f = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged or foreign file
        raise CorpusImportError(f"{path}: not a readable Parquet file ({e})") from None
    missing = [c for c in required if c not in f.schema_arrow.names]
    if missing:
        raise CorpusImportError(f"{path}: missing column(s) {', '.join(missing)}; has {', '.join(f.schema_arrow.names)}")
    row = 0
    for batch in f.iter_batches(batch_size=2048):
        for values in batch.to_pylist():
            row += 1
            yield Where(path.name, row=row), values


def _record(r: RowReader, id_column: str) -> PatentRecord | None:
    rid = r.text(id_column)
    if rid is None:
        r.log.add("missing_field", r.where, id_column, "no id; row skipped")
        return None
    return PatentRecord(id=rid, family_id=rid, title=r.text("title_en"), abstract=r.text("abstract_en"),
                        claims=_claims(r), description=r.text("description_en"))


def _claims(r: RowReader) -> tuple[Claim, ...]:
    v = r.raw("claims_text")
    if isinstance(v, list):  # a list of claims, if a revision ships them split
        texts = (RowReader({"c": c}, r.where, r.log).text("c") for c in v)
        return tuple(Claim.from_text(t) for t in texts if t)
    text = r.text("claims_text")
    return tuple(split_claims(text)) if text else ()


def _records(path: Path, id_column: str, log: ProblemLog) -> RecordStream:
    for where, values in read_parquet(path, (id_column,)):
        yield where, _record(RowReader(values, where, log), id_column)


def _qrels(path: Path, log: ProblemLog) -> Iterator[GivenPair]:
    for where, v in read_parquet(path, QRELS_COLUMNS):
        score, domain = v["relevance_score"], v["domain_rel"]
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            log.add("bad_value", where, "relevance_score", f"{score!r} is not a finite number; pair skipped")
            continue
        if domain not in ("IN", "OUT", None):  # null: no IN/OUT label (e.g. an evalctl export without codes)
            log.add("bad_value", where, "domain_rel", f"{domain!r} is not IN, OUT or empty; pair skipped")
            continue
        if v["query_id"] is None or v["relevant_id"] is None:
            log.add("missing_field", where, "query_id/relevant_id", "empty id; pair skipped")
            continue
        if score > 0:
            yield GivenPair(str(v["query_id"]), str(v["relevant_id"]), max(1, round(score)), domain, None, where)


FILES = ("corpus.parquet", "queries.parquet", "qrels_all.parquet")


def open_dapfam(paths: list[Path], log: ProblemLog) -> Source:
    if len(paths) == 1 and paths[0].is_dir():
        root = paths[0]
    elif sorted(p.name for p in paths) == sorted(FILES) and len({p.parent for p in paths}) == 1:
        root = paths[0].parent  # the three files named (as a fetched dataset gives them)
    else:
        raise CorpusImportError(f"--format dapfam takes one folder holding {', '.join(FILES)} (or those three files)")
    corpus = require_file(root / "corpus.parquet", "DAPFAM corpus")
    queries = require_file(root / "queries.parquet", "DAPFAM queries")
    qrels = require_file(root / "qrels_all.parquet", "DAPFAM relations")
    return Source(files=[corpus, queries, qrels], records=lambda: _records(corpus, "relevant_id", log),
                  queries=lambda: _records(queries, "query_id", log), qrels=lambda: _qrels(qrels, log))
