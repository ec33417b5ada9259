"""Imports that used to lose or corrupt rows (issue 16): bad quoting, truncated files, header problems,
and single bad values. Each case generates its input, imports it through the CLI, and asserts no
traceback, the exact number of records kept, and each bad row reported with its line."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from corpus_helpers import isolated_cache  # noqa: F401 - autouse: a private cache per test
from evalctl.cli.main import cli

HEADER = "grant_id,patent_title,abstract\n"


def quoted_rows(n=10):
    """USPTO-style rows whose abstracts are quoted and span two lines (as real exports do)."""
    return [f'US{10000001 + i}B2,"Title {i}","Abstract of patent {i}, with a comma\nand a second line"' for i in range(n)]


def plain_rows(n=10):
    return [f"US{10000001 + i}B2,Title {i},Abstract {i}" for i in range(n)]


def run_import(fmt, *sources, name="c"):
    out = CliRunner().invoke(cli, ["corpus", "import", "--format", fmt, "--name", name, *map(str, sources)])
    assert "Traceback" not in out.output and (out.exception is None or isinstance(out.exception, SystemExit)), \
        (out.output, out.exception)
    return out


def imported(out, name="c"):
    from evalctl.corpus.store import load_corpus

    assert out.exit_code == 0, out.output
    corpus = load_corpus(name)
    problems = [json.loads(line) for line in (corpus.path / "problems.jsonl").read_text().splitlines()]
    return corpus, problems


def ids(corpus):
    return [r.id for r in corpus.records()]


# --------------------------------------------------------------------------- CSV quoting


def test_csv_cut_inside_its_last_quoted_field(tmp_path):
    f = tmp_path / "cut.csv"
    f.write_text(HEADER + "\n".join(quoted_rows())[:-20])
    corpus, problems = imported(run_import("uspto", f))
    assert len(corpus) == 9 and "US10000010" not in ids(corpus)
    assert [(p["kind"], p["line"]) for p in problems] == [("malformed_row", 20)]
    assert "ends inside this row's quoted field" in problems[0]["message"]


def test_csv_unclosed_quote_does_not_swallow_the_rest(tmp_path):
    rows = quoted_rows()
    rows[2] = rows[2][:-1]  # the abstract's closing quote is missing: it used to swallow rows 4-10
    f = tmp_path / "unclosed.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    corpus, problems = imported(run_import("uspto", f))
    assert len(corpus) == 9 and "US10000003" not in ids(corpus)
    assert problems[0]["kind"] == "malformed_row" and problems[0]["line"] == 6
    assert "unbalanced quote" in problems[0]["message"] and "row skipped" in problems[0]["message"]
    assert all(p["line"] in (6, 7) for p in problems), problems  # the row and its own continuation line
    assert [r.abstract for r in corpus.records()][3] == "Abstract of patent 4, with a comma and a second line"


@pytest.mark.parametrize("later", ["plain", "quoted"])
def test_csv_stray_quote_does_not_swallow_the_next_row(tmp_path, later):
    rows = plain_rows() if later == "plain" else quoted_rows()
    rows[4] = "US10000005B2,\"Stray title,Abstract 5" if later == "plain" else rows[4].replace('"Title 4"', '"Title 4')
    f = tmp_path / "stray.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    corpus, problems = imported(run_import("uspto", f))
    kept = ids(corpus)
    assert "US10000006" in kept, problems  # the row after the stray quote is kept
    assert len(corpus) == (9 if later == "plain" else 10), (kept, problems)
    assert problems and all(p["line"] for p in problems)


def test_csv_header_problems_are_one_message(tmp_path):
    renamed = tmp_path / "renamed.csv"
    renamed.write_text(HEADER.replace("grant_id", "grant number") + "\n".join(plain_rows()) + "\n")
    out = run_import("uspto", renamed)
    assert out.exit_code == 2 and "lacks column(s) 'grant_id'" in out.output and "'grant number'" in out.output
    assert out.output.count("Error") == 1
    semicolons = tmp_path / "semi.csv"
    semicolons.write_text((HEADER + "\n".join(plain_rows()) + "\n").replace(",", ";"))
    out = run_import("uspto", semicolons)
    assert out.exit_code == 2 and "another delimiter" in out.output
    no_bom = tmp_path / "utf16.csv"
    no_bom.write_bytes((HEADER + "\n".join(plain_rows()) + "\n").encode("utf-16-le"))
    out = run_import("uspto", no_bom)
    assert out.exit_code == 2 and "UTF-16" in out.output


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_csv_with_a_byte_order_mark_is_read(tmp_path, encoding):
    f = tmp_path / "bom.csv"
    f.write_bytes((HEADER + "\n".join(quoted_rows()) + "\n").encode(encoding))
    corpus, problems = imported(run_import("uspto", f))
    assert len(corpus) == 10 and problems == []


def test_csv_nul_bytes_are_reported(tmp_path):
    rows = plain_rows()
    rows[1] = rows[1].replace("Title 1", "Ti\x00tle 1")
    f = tmp_path / "nul.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    corpus, problems = imported(run_import("uspto", f))
    assert len(corpus) == 10 and next(r for r in corpus.records() if r.id == "US10000002").title == "Ti tle 1"
    assert [(p["kind"], p["line"], p["field"]) for p in problems] == [("bad_value", 3, "patent_title")]


# --------------------------------------------------------------------------- native JSON Lines values


def write_jsonl(path, objs_or_lines):
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs_or_lines) + "\n")
    return path


def test_native_bad_values_become_problems(tmp_path):
    good = [{"id": f"US{10000001 + i}", "title": f"Title {i}", "abstract": "An abstract."} for i in range(6)]
    lines = [
        good[0],
        '{"id": "US20000001", "title": "lone \\ud800 surrogate", "abstract": "x"}',  # line 2
        '{"id": "US20000002", "title": ' + "[" * 100_000 + "]" * 100_000 + "}",  # line 3: nested too deep
        {"id": "US20000003", "title": {"en": "a dict"}, "abstract": "has text"},  # line 4
        {"id": "US2000\u00000004", "title": "NUL in the id"},  # line 5
        *good[1:],
    ]
    corpus, problems = imported(run_import("native", write_jsonl(tmp_path / "n.jsonl", lines)))
    assert len(corpus) == 6 + 3  # only the unreadable line 3 is lost
    by_id = {r.id: r for r in corpus.records()}
    assert by_id["US20000001"].title == "lone \ufffd surrogate"
    assert by_id["US20000003"].title is None and by_id["US20000003"].abstract == "has text"
    assert "US20000004" in by_id
    assert {(p["kind"], p["line"]) for p in problems} == {
        ("bad_encoding", 2), ("malformed_row", 3), ("bad_value", 4), ("bad_value", 5)}


def test_native_ids_aliases_and_citations_share_one_rule(tmp_path):
    records = [
        {"id": "US2017104972", "title": "cited by its Espacenet spelling", "aliases": ["WO 2016/123456 A1"]},
        {"id": "EP0001234", "title": "cited with its zeros dropped"},
        {"id": "x-1", "title": "not a publication number"},
        {"id": "Q1", "title": "the citing record", "citations": [
            {"target": "US2017104972"}, {"target": "WO2016123456"}, {"target": "EP1234"}, {"target": "x-1"}]},
    ]
    corpus, problems = imported(run_import("native", write_jsonl(tmp_path / "n.jsonl", records)))
    assert problems == []
    assert ids(corpus) == ["US20170104972", "EP0001234", "x-1", "Q1"]
    out = CliRunner().invoke(cli, ["corpus", "qrels", "c", "--dev-fraction", "0"])
    assert out.exit_code == 0, out.output
    from evalctl.corpus.qrels import load_qrels

    m = load_qrels(corpus, "citations").manifest
    assert (m["citations"], m["citations_resolved"], m["citations_unresolved_like_in_set"]) == (4, 3, 1)
    assert "1 citations did not resolve although they look like numbers of this corpus" in out.output


# --------------------------------------------------------------------------- given qrels


def test_beir_scores_that_are_not_integers(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": f"d{i}", "title": f"doc {i}", "text": "t"} for i in range(4)])
    write_jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": f"query {i}"} for i in range(3)])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t\u00b2\nq2\td2\t2\nq1\td3\tinf\n")
    corpus, problems = imported(run_import("beir", root))
    assert len(corpus) == 4
    assert [(p["kind"], p["line"]) for p in problems] == [("malformed_row", 3), ("malformed_row", 5)]
    from evalctl.corpus.qrels import load_qrels

    assert load_qrels(corpus, "given").manifest["pairs"] == 2


def test_dapfam_non_finite_scores(tmp_path):
    root = tmp_path / "dapfam"
    root.mkdir()
    docs = {"title_en": ["a", "b", "c"], "abstract_en": ["x", "y", "z"], "claims_text": ["", "", ""],
            "description_en": ["", "", ""]}
    pq.write_table(pa.table({"relevant_id": ["F1", "F2", "F3"], **docs}), root / "corpus.parquet")
    pq.write_table(pa.table({"query_id": ["Q1", "Q2", "Q3"], **docs}), root / "queries.parquet")
    pq.write_table(pa.table({"query_id": ["Q1", "Q2", "Q3", "Q1"], "relevant_id": ["F1", "F2", "F3", "F2"],
                             "relevance_score": [1.0, math.inf, math.nan, 2.0],
                             "domain_rel": ["IN", "OUT", "IN", "IN"]}), root / "qrels_all.parquet")
    corpus, problems = imported(run_import("dapfam", root))
    assert [(p["kind"], p["row"], p["field"]) for p in problems] == [
        ("bad_value", 2, "relevance_score"), ("bad_value", 3, "relevance_score")]
    from evalctl.corpus.qrels import load_qrels

    assert load_qrels(corpus, "given").manifest["pairs"] == 2
