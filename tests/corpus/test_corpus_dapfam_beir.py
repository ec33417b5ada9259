"""DAPFAM's published layout and BEIR, built here with the real column names; given qrels kept as given."""

import json

import pandas as pd
from corpus_helpers import isolated_cache  # noqa: F401

from evalctl.corpus.importer import import_corpus
from evalctl.corpus.qrels import load_qrels


def _dapfam(root):
    root.mkdir()
    text = lambda i: dict(title_en=f"Title {i}", abstract_en=f"Abstract {i}",  # noqa: E731
                          claims_text=f"1. A device {i}. 2. The device of claim 1, made of steel.",
                          description_en=f"Description {i}")
    pd.DataFrame([{"relevant_id": f"F{i}", **text(i)} for i in range(6)]).to_parquet(root / "corpus.parquet")
    pd.DataFrame([{"query_id": f"Q{i}", **text(100 + i)} for i in range(3)]).to_parquet(root / "queries.parquet")
    pd.DataFrame({
        "query_id": ["Q0", "Q0", "Q0", "Q1", "Q1", "Q2", "Q2"],
        "relevant_id": ["F0", "F1", "F2", "F3", "F4", "F5", "F9"],
        "relevance_score": [1.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        "domain_rel": ["IN", "OUT", "IN", "OUT", "IN", "IN", "OUT"],
    }).to_parquet(root / "qrels_all.parquet")
    return root


def test_dapfam_imports_with_domain_labels_intact(tmp_path):
    res = import_corpus("dapfam", [_dapfam(tmp_path / "dapfam")], name="dapfam")
    c = res.corpus
    assert len(c) == 6 and c.manifest["queries_count"] == 3
    rec = next(c.records())
    assert rec.family_id == rec.id == "F0" and rec.description == "Description 0"
    assert [cl.independent for cl in rec.claims] == [True, False]
    q = load_qrels(c, "given")
    labels = {(p.query_id, p.doc_id): (p.domain, p.score) for p in q.pairs}
    # relevance_score 0 is not relevant; F9 is not in the corpus (reported); domains exactly as given.
    assert labels == {("Q0", "F0"): ("IN", 1), ("Q0", "F1"): ("OUT", 2), ("Q1", "F3"): ("OUT", 1),
                      ("Q1", "F4"): ("IN", 1), ("Q2", "F5"): ("IN", 1)}
    assert [(p.kind, p.where.row, p.field) for p in res.problems] == [("bad_value", 7, "corpus-id")]
    assert q.exclusions()["Q0"] == frozenset({"Q0"})
    assert {x.source for x in q.queries} == {"queries"}
    assert q.qrels(domain="OUT") == {"Q0": {"F1": 2}, "Q1": {"F3": 1}}
    tsv = sorted((q.path / "qrels").glob("*.tsv"))
    assert tsv and tsv[0].read_text().splitlines()[0] == "query-id\tcorpus-id\tscore"


def test_dapfam_bad_domain_is_reported(tmp_path):
    root = _dapfam(tmp_path / "d")
    pd.DataFrame({"query_id": ["Q0"], "relevant_id": ["F0"], "relevance_score": [1.0],
                  "domain_rel": ["SIDEWAYS"]}).to_parquet(root / "qrels_all.parquet")
    res = import_corpus("dapfam", [root], name="d")
    assert [(p.kind, p.field) for p in res.problems] == [("bad_value", "domain_rel")]


def test_beir_layout(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"body {i}"}) + "\n"
                                               for i in range(4)))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a query"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq1\tbroken\n")
    res = import_corpus("beir", [root], name="beir")
    assert len(res.corpus) == 4 and next(res.corpus.records()).abstract == "body 0"
    q = load_qrels(res.corpus, "given")
    assert q.qrels("test") == {"q1": {"d1": 1}}
    assert [(p.kind, p.where.file, p.where.line) for p in res.problems] == [("malformed_row", "qrels/test.tsv", 4)]


def test_beir_files_not_in_utf8_name_the_record_and_keep_it(tmp_path):
    """Latin-1 bytes in a BEIR corpus, queries and qrels file: no UnicodeDecodeError; the record is kept
    with U+FFFD and the problem names the file and line."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_bytes(b'{"_id": "d1", "title": "Pizza oven", "text": "caf\xe9 heat"}\n'
                                        b'{"_id": "d2", "title": "Dough \xff", "text": "knead"}\n')
    (root / "queries.jsonl").write_bytes(b'{"_id": "q1", "text": "oven \xe9"}\n')
    (root / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td\xe92\t1\n")
    res = import_corpus("beir", [root], name="beir-latin1")
    assert [r.abstract for r in res.corpus.records()] == ["caf\ufffd heat", "knead"]
    assert {(p.kind, p.where.file, p.where.line) for p in res.problems} >= {
        ("bad_encoding", "corpus.jsonl", 1), ("bad_encoding", "corpus.jsonl", 2)}
