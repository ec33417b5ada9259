"""Importing the real exports (small samples cut from them and the full files, datasets of the catalogue: tests/real_data.py)."""

import json

import pytest
from click.testing import CliRunner
from conftest import ESPACENET, LENS, USPTO
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.store import load_corpus
from evalctl.corpus.import_formats.problems import CorpusImportError
from evalctl.corpus.patent_record import PatentRecord
from real_data import USPTO_OTHER_4, WIPO

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)


def test_espacenet_fixture_fields_and_aliases():
    res = import_corpus("espacenet", [FIXTURES / "espacenet_pizza_sample.csv"], name="esp")
    recs = {r.id: r for r in res.corpus.records()}
    assert len(recs) == len(res.corpus) == 12 and res.problems == ()
    box = recs["KR20140005697"]
    assert box.aliases == ("KR200476323",) and box.kind == "U" and box.jurisdiction == "KR"
    assert [c.code for c in box.ipc] == ["B65D5/49", "B65D85/36"]
    assert str(box.publication_date) == "2014-11-06" and str(box.priority_date) == "2013-04-29"
    # The search-report citation "US2013040016 (A1)" is normalised to the 11-digit US form.
    wo = recs["WO2014193417"]
    assert any(c.target == "US20130040016" for c in wo.citations)
    assert {c.type for r in recs.values() for c in r.citations} >= {"search_report"}


def test_lens_fixture_reports_duplicates_and_encoding():
    res = import_corpus("lens", [FIXTURES / "lens_pizza_sample.csv"], name="lens")
    counts = res.problem_counts
    assert counts == {"duplicate_id": 3, "bad_encoding": 1}
    dup = next(p for p in res.problems if p.kind == "duplicate_id")
    assert dup.where.file == "lens_pizza_sample.csv" and dup.where.line and "ITLI2005000" in dup.message
    enc = next(p for p in res.problems if p.kind == "bad_encoding")
    assert enc.field == "Title" and "0xCC" in enc.message
    recs = {r.id: r for r in res.corpus.records()}
    first = recs["US20130101709"]  # "US 2013/0101709 A1"
    assert first.kind == "A1" and str(first.publication_date) == "2013-04-25"  # dd/mm/yy + Publication Year
    assert str(recs["US3982033"].publication_date) == "1976-09-21"
    assert [c.code for c in first.cpc] == ["A23L1/0067", "G01G19/00"]
    assert "\ufffd" in next(r for r in recs.values() if "\ufffd" in (r.title or "")).title


def test_wipo_fixture_packed_ipc_and_family_members():
    res = import_corpus("wipo", [FIXTURES / "wipo_ritonavir_sample.csv"], name="wipo")
    recs = {r.id: r for r in res.corpus.records()}
    au = recs["AU2007202956"]
    assert au.kind == "B2" and [c.code for c in au.ipc] == ["C07D417/00"]
    assert au.aliases == ("AU2003254711", "AU2007202943")
    assert "IN00496MUM2008" in recs
    assert res.problem_counts["bad_code"] >= 1  # old-edition strings such as "7C 07D 235:00 J"


def test_uspto_fixture_claims_and_kinds():
    res = import_corpus("uspto", [FIXTURES / "uspto_grants_sample.csv"], name="uspto")
    recs = list(res.corpus.records())
    assert len(recs) == 4 and res.problems == ()
    utility = [r for r in recs if r.kind in ("B1", "B2")]
    assert all(r.abstract and len(r.claims) > 1 and r.claims[0].independent for r in utility)
    assert any(not c.independent for r in utility for c in r.claims)
    design = next(r for r in recs if r.kind == "S1")
    assert design.id.startswith("USD") and not design.id.startswith("USD0")


def test_same_source_same_hash_and_unchanged_reimport(tmp_path):
    src = [FIXTURES / "espacenet_pizza_sample.csv"]
    a = import_corpus("espacenet", src, out=tmp_path / "a")
    b = import_corpus("espacenet", src, out=tmp_path / "b")
    assert a.corpus.content_hash == b.corpus.content_hash
    again = import_corpus("espacenet", src, out=tmp_path / "a")
    assert again.unchanged and again.corpus.content_hash == a.corpus.content_hash
    with pytest.raises(CorpusImportError, match="different corpus"):
        import_corpus("lens", [FIXTURES / "lens_pizza_sample.csv"], out=tmp_path / "a")
    replaced = import_corpus("lens", [FIXTURES / "lens_pizza_sample.csv"], out=tmp_path / "a", overwrite=True)
    assert replaced.corpus.content_hash != a.corpus.content_hash


def test_manifest_documents_sources_counts_hash():
    res = import_corpus("espacenet", [FIXTURES / "espacenet_pizza_sample.csv"], name="esp", labels=("pizza",))
    m = json.loads((res.corpus.path / "manifest.json").read_text())
    assert m["content_hash"].startswith("sha256:") and m["record_count"] == 12 and m["rows_read"] == 12
    assert m["source"]["format"] == "espacenet" and m["source"]["files"][0]["sha256"].startswith("sha256:")
    assert m["fields"]["title"] == 12 and m["labels"] == ["pizza"]
    assert all(r.labels == ("pizza",) for r in res.corpus.records())
    assert load_corpus("esp").path == res.corpus.path  # found by name under cache_root()/corpora


def test_native_roundtrip(tmp_path):
    res = import_corpus("espacenet", [FIXTURES / "espacenet_pizza_sample.csv"], name="esp")
    native = tmp_path / "esp.jsonl"
    native.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in res.corpus.records()))
    back = import_corpus("native", [native], name="esp-native")
    assert back.problems == ()
    assert back.corpus.content_hash == res.corpus.content_hash
    assert [PatentRecord.from_dict(r.to_dict()) for r in back.corpus.records()] == list(res.corpus.records())


def test_native_reports_bad_json_and_values(tmp_path):
    f = tmp_path / "n.jsonl"
    f.write_text('{"id": "X1", "title": "ok", "cpc": ["A61K31/00"]}\n'
                 '{"id": "X2", "title": \n'
                 '[1, 2]\n'
                 '{"id": "X3", "title": "t", "citations": [{"target": "EP1", "type": "gossip"}], "colour": "red"}\n')
    res = import_corpus("native", [f], name="n")
    kinds = [(p.kind, p.where.line) for p in res.problems]
    assert ("malformed_row", 2) in kinds and ("malformed_row", 3) in kinds
    assert [k for k, line in kinds if line == 4] == ["bad_value", "bad_value"]
    assert [r.id for r in res.corpus.records()] == ["X1", "X3"]


@pytest.mark.parametrize("fmt,path,records,problems", [
    ("espacenet", ESPACENET, 239, {}),
    ("lens", LENS, 997, {"duplicate_id": 3, "bad_encoding": 1}),
    ("wipo", WIPO, 804, {"bad_code": 14}),
    ("uspto", USPTO, 150, {}),
])
def test_full_files_import_and_stats(fmt, path, records, problems):
    name = fmt + "-sample"
    runner = CliRunner()
    out = runner.invoke(cli, ["corpus", "import", "--format", fmt, "--name", name, str(path)])
    assert out.exit_code == 0, out.output
    c = load_corpus(name)
    assert len(c) == records and c.manifest["problems"] == problems
    stats = runner.invoke(cli, ["corpus", "stats", name])
    assert stats.exit_code == 0, stats.output
    assert f"records: {records}" in stats.output and "views (rendered" in stats.output


def test_uspto_both_files_share_one_grant():
    # 150 + 4 rows with one id in common (US10360345) -> 153 distinct grants, the repeat reported.
    res = import_corpus("uspto", [USPTO, USPTO_OTHER_4], name="uspto-all")
    assert len(res.corpus) == 153 and res.problem_counts == {"duplicate_id": 1}
