"""A file with one broken row per problem kind: good rows kept, every bad one reported precisely."""

from click.testing import CliRunner
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.import_formats.problems import PROBLEM_KINDS

BROKEN = FIXTURES / "espacenet_broken.csv"
# (kind, line, field) expected for each bad row; the header is line 1, data row N is line N + 1.
EXPECTED = {
    ("malformed_row", 3, None),
    ("missing_field", 4, "Publication number"),
    ("missing_field", 5, "title/abstract/claims/description"),
    ("duplicate_id", 6, "id"),
    ("bad_encoding", 7, "Title"),
    ("bad_code", 8, "International classification"),
    ("bad_pubnum", 9, "Patents cited in the search report"),
    ("bad_date", 10, "Publication date"),
}


def test_every_problem_reported_with_file_line_field():
    res = import_corpus("espacenet", [BROKEN], name="broken")
    got = {(p.kind, p.where.line, p.field) for p in res.problems}
    assert got == EXPECTED
    assert all(p.where.file == "espacenet_broken.csv" and p.where.row == p.where.line - 1 for p in res.problems)
    assert set(res.problem_counts) == set(PROBLEM_KINDS) - {"bad_value"}
    ids = [r.id for r in res.corpus.records()]
    # Kept: the good rows and those whose problem only cost a value (encoding, code, citation, date).
    assert ids == ["KR20140005697", "KR20130006269", "PH22014000369", "KR20130002692", "KR20140142438", "US20140000001"]
    recs = {r.id: r for r in res.corpus.records()}
    assert recs["KR20130006269"].title == "Pizza \ufffd oven"  # one U+FFFD per run of bad bytes
    assert [c.code for c in recs["PH22014000369"].ipc] == ["B65D5/18"]
    assert [c.target for c in recs["KR20130002692"].citations] == ["US20130068830"]
    assert recs["KR20140142438"].publication_date is None


def test_cli_prints_each_problem_and_summary():
    out = CliRunner().invoke(cli, ["corpus", "import", "--format", "espacenet", "--name", "broken", str(BROKEN)])
    assert out.exit_code == 0, out.output
    assert "Traceback" not in out.output
    for kind, line, field in EXPECTED:
        expected = f"espacenet_broken.csv, line {line}, row {line - 1}" + (f", field {field!r}" if field else "")
        assert f"{expected}: {kind}:" in out.output
    assert "records 6" in out.output and "duplicate_id 1" in out.output


def test_cli_strict_fails_on_first_problem_without_traceback():
    out = CliRunner().invoke(cli, ["corpus", "import", "--format", "espacenet", "--name", "b", "--strict", str(BROKEN)])
    assert out.exit_code == 2  # bad input
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert "line 3" in out.output and "malformed_row" in out.output and "--strict" in out.output
    assert "Traceback" not in out.output


def test_cli_user_errors(tmp_path):
    runner = CliRunner()
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for args, msg in [
        (["corpus", "import", "--format", "lens", str(empty)], "--name"),
        (["corpus", "import", "--format", "lens", "--name", "x", str(empty)], "empty file"),
        (["corpus", "import", "--format", "beir", "--name", "x", str(tmp_path)], "corpus.jsonl"),
        (["corpus", "stats", "nope"], "no corpus"),
        (["corpus", "qrels", "nope"], "no corpus"),
    ]:
        out = runner.invoke(cli, args)
        assert out.exit_code != 0 and msg in out.output, (args, out.output)
        assert "Traceback" not in out.output


def test_nothing_valid_is_an_error(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text("not json\n")
    out = CliRunner().invoke(cli, ["corpus", "import", "--format", "native", "--name", "x", str(f)])
    assert out.exit_code == 2 and "no valid records" in out.output and "line 1" in out.output
