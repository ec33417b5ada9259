"""Export a retrieval landscape (a view's corpus text, a query view's queries, one split's qrels) in the
field's formats, so other tools (MTEB, Pyserini, BEIR scripts) run the very same task.

- beir:   corpus.jsonl {_id, title, text}, queries.jsonl {_id, text}, qrels/<split>.tsv
          (query-id, corpus-id, score). `title` is the record's title when the view starts with it and
          `text` the view's other fields joined by its separator, so title + separator + text is the view.
- dapfam: corpus.parquet (relevant_id), queries.parquet (query_id), each with title_en, abstract_en,
          claims_text ("1. ...\n2. ..."), description_en holding the view's fields only (others null), and qrels_all.parquet
          (query_id, relevant_id, relevance_score, domain_rel IN / OUT, null when unknown), and a README.md
          dataset card with DAPFAM's three configs, so MTEB's own DAPFAM task code loads the folder.

Both also write excluded/<split>.tsv (query-id, corpus-id): the documents evalctl removes from a
query's ranking (the query and its family). Neither format has such a notion; a tool that honours it
(MTEB's `top_ranked`, a post-filter) scores exactly evalctl's task. The corpus holds the records that
render in the view (the ones the index searches); qrels keep pairs to documents outside the view, as
evalctl scores them; a query that does not render in the query view is left out with its pairs
(evalctl scores it 0), both counted in export.json.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from evalctl.corpus.store import Corpus, corpora_root
from evalctl.corpus.patent_record import PatentRecord
from evalctl.corpus.qrels import QrelsSet
from evalctl.corpus.views import ViewSpec, field_text, load_views
from evalctl.output_folder import check_folder, claim_folder, write_into, writing_into

Format = Literal["beir", "dapfam"]
FORMATS: tuple[str, ...] = ("beir", "dapfam")
# evalctl view field -> DAPFAM column (platform/corpus/import_formats/dapfam.py reads the same names)
DAPFAM_COLUMNS = {"title": "title_en", "abstract": "abstract_en", "claims": "claims_text", "description": "description_en"}
EXPORT_FILE = "export.json"
# The dataset card of datalyes/DAPFAM_patent lays out three configs with one `train` split each; the same
# card makes `datasets.load_dataset(folder, "corpus", split="train")` (what MTEB's DAPFAM tasks call) read
# the export offline.
DAPFAM_CARD = """---
configs:
- config_name: corpus
  data_files:
  - split: train
    path: corpus.parquet
- config_name: queries
  data_files:
  - split: train
    path: queries.parquet
- config_name: relations
  data_files:
  - split: train
    path: qrels_all.parquet
---
An evalctl export in DAPFAM's layout (see export.json for the corpus, view, qrels set and split).
"""


class ExportError(ValueError):
    """Bad export request: one message naming the view, split or field."""


@dataclass(frozen=True)
class ExportSummary:
    format: str
    out_dir: str
    corpus: str
    corpus_hash: str
    view: str
    query_view: str
    qrels: str
    split: str
    documents: int
    queries: int
    pairs: int
    pairs_outside_view: int  # relevant documents that do not render in the view (kept: evalctl counts them)
    queries_without_text: int  # queries of the split that do not render in the query view (left out)
    excluded_pairs: int


def _check_dapfam_view(view: ViewSpec) -> None:
    other = [f for f in view.fields if f not in DAPFAM_COLUMNS]
    if other:
        raise ExportError(f"view {view.name}: field(s) {', '.join(other)} have no DAPFAM column "
                          f"(DAPFAM has {', '.join(DAPFAM_COLUMNS)}); export it with --format beir")


def _beir_doc(record: PatentRecord, view: ViewSpec) -> dict:
    parts = [(f, field_text(record, f)) for f in view.fields]
    parts = [(f, t) for f, t in parts if t]
    title = parts[0][1] if parts and parts[0][0] == "title" else ""
    rest = parts[1:] if title else parts
    return {"_id": record.id, "title": title, "text": view.separator.join(t for _, t in rest)}


def _dapfam_row(record: PatentRecord, view: ViewSpec, id_column: str) -> dict:
    row = {id_column: record.id, **{c: None for c in DAPFAM_COLUMNS.values()}}
    for f in view.fields:
        row[DAPFAM_COLUMNS[f]] = field_text(record, f)
    if "claims" in view.fields and record.claims:  # numbered, as DAPFAM ships them: boundaries survive import
        row["claims_text"] = "\n".join(f"{i}. {c.text}" for i, c in enumerate(record.claims, 1))
    return row


def _write_jsonl(out_dir: Path, name: str, rows) -> None:
    with writing_into(out_dir, name) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def _write_tsv(out_dir: Path, name: str, header: list[str], rows) -> None:
    with writing_into(out_dir, name) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def _write_parquet(out_dir: Path, name: str, table: pa.Table) -> None:
    with writing_into(out_dir, name) as tmp:
        pq.write_table(table, tmp)


def check_out_dir(corpus: Corpus, out_dir: Path, force: bool = False) -> None:
    """`out_dir` must be new, empty or an earlier export (output_folder; `force`: any real folder), and never
    in the corpus store, where a DAPFAM export's corpus.parquet would replace the corpus's own."""
    target = out_dir.resolve()
    for store in (corpus.path.resolve(), corpora_root().resolve()):
        if target == store or store in target.parents:
            raise ExportError(f"{out_dir} is inside the corpus store ({store}): export to a folder of your own")
    check_folder(out_dir, "export", (EXPORT_FILE, "corpus_hash"), force=force)


def export_landscape(corpus: Corpus, qset: QrelsSet, fmt: Format, out_dir: Path, *, view: str, split: str,
                     query_view: str | None = None, force: bool = False) -> ExportSummary:
    """Write the landscape (corpus in `view`, `split`'s queries in `query_view`, their qrels) to `out_dir`
    (see check_out_dir)."""
    views = load_views()
    qview_name = query_view or view
    for name in (view, qview_name):
        if name not in views:
            raise ExportError(f"unknown view {name!r}; configs/views.yaml has {', '.join(views)}")
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
    dview, qview = views[view], views[qview_name]
    if fmt == "dapfam":
        _check_dapfam_view(dview)
        _check_dapfam_view(qview)
    wanted = {q.id: q for q in qset.queries if q.split == split}
    if not wanted:
        have = sorted({q.split for q in qset.queries})
        raise ExportError(f"qrels set {qset.name!r} has no {split!r} queries; it has splits: {', '.join(have) or 'none'}")
    check_out_dir(corpus, out_dir, force)

    docs = [r for r in corpus.records() if dview.render(r)]
    doc_ids = {r.id for r in docs}
    query_records: dict[str, PatentRecord] = {}
    for source, records in (("corpus", corpus.records()), ("queries", corpus.queries())):
        for r in records:
            q = wanted.get(r.id)
            if q is not None and q.source == source and qview.render(r):
                query_records[r.id] = r
    qids = sorted(query_records)
    # pairs to documents outside the view stay: evalctl counts them as relevant (never retrievable)
    pairs = [p for p in qset.pairs if p.split == split and p.query_id in query_records]
    excluded = sorted((q, d) for q in qids for d in wanted[q].exclude if d in doc_ids)

    claim_folder(out_dir, "export")
    if fmt == "beir":
        _write_jsonl(out_dir, "corpus.jsonl", (_beir_doc(r, dview) for r in docs))
        _write_jsonl(out_dir, "queries.jsonl", ({"_id": q, "text": qview.render(query_records[q])} for q in qids))
        _write_tsv(out_dir, f"qrels/{split}.tsv", ["query-id", "corpus-id", "score"],
                   ((p.query_id, p.doc_id, p.score) for p in pairs))
    else:
        _write_parquet(out_dir, "corpus.parquet",
                       pa.Table.from_pylist([_dapfam_row(r, dview, "relevant_id") for r in docs]))
        _write_parquet(out_dir, "queries.parquet",
                       pa.Table.from_pylist([_dapfam_row(query_records[q], qview, "query_id") for q in qids]))
        rows = [{"query_id": p.query_id, "relevant_id": p.doc_id, "relevance_score": float(p.score),
                 "domain_rel": p.domain if p.domain in ("IN", "OUT") else None} for p in pairs]
        schema = pa.schema([("query_id", pa.string()), ("relevant_id", pa.string()),
                            ("relevance_score", pa.float64()), ("domain_rel", pa.string())])
        _write_parquet(out_dir, "qrels_all.parquet", pa.Table.from_pylist(rows, schema=schema))
        write_into(out_dir, "README.md", DAPFAM_CARD)
    _write_tsv(out_dir, f"excluded/{split}.tsv", ["query-id", "corpus-id"], excluded)
    summary = ExportSummary(fmt, str(out_dir), corpus.name, corpus.content_hash, view, qview_name, qset.name, split,
                            len(docs), len(qids), len(pairs), sum(p.doc_id not in doc_ids for p in pairs),
                            len(wanted) - len(qids), len(excluded))
    write_into(out_dir, EXPORT_FILE, json.dumps(asdict(summary), indent=2) + "\n")
    return summary


@dataclass(frozen=True)
class ExportedTask:
    """A BEIR export read back: what MTEB and Pyserini are given."""

    corpus: dict[str, dict[str, str]]  # id -> {title, text}
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    excluded: dict[str, set[str]]
    summary: dict


def read_beir_export(folder: Path) -> ExportedTask:
    summary = json.loads((folder / EXPORT_FILE).read_text())
    if summary["format"] != "beir":
        raise ExportError(f"{folder}: a {summary['format']} export; the referee reads BEIR exports")
    split = summary["split"]
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        corpus = {d["_id"]: {"title": d["title"], "text": d["text"]} for d in map(json.loads, f)}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = {d["_id"]: d["text"] for d in map(json.loads, f)}

    def rows(path: Path):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter="\t")
            next(reader)
            yield from reader

    qrels: dict[str, dict[str, int]] = {}
    for q, d, s in rows(folder / "qrels" / f"{split}.tsv"):
        qrels.setdefault(q, {})[d] = int(s)
    excluded: dict[str, set[str]] = {}
    for q, d in rows(folder / "excluded" / f"{split}.tsv"):
        excluded.setdefault(q, set()).add(d)
    return ExportedTask(corpus, queries, qrels, excluded, summary)
