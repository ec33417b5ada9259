"""A corpus export's target folder (issues 25 and 37): an export never replaces files evalctl did not write,
never follows a link given as or planted in its folder, never writes into the corpus store, and a qrels set
name is never a path."""

from __future__ import annotations

import json

import pytest

from cli_home import PIZZA, corpus, home, invoke, listing, plant_links, untouched  # noqa: F401 - fixtures

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)


def export(corpus, out_dir, *more):
    return invoke("corpus", "export", corpus, out_dir, "--view", "TA", *more)


def test_export_refuses_a_folder_it_did_not_write(home, corpus):
    theirs = home / "beir-dataset"
    (theirs / "qrels").mkdir(parents=True)
    (theirs / "corpus.jsonl").write_text('{"_id": "theirs"}\n')
    (theirs / "qrels" / "test.tsv").write_text("q\td\t1\n")
    before = listing(home)
    out = export(corpus, theirs)
    assert out.exit_code == 2 and f"{theirs} holds files that are not an evalctl export" in out.output, out.output
    assert listing(home) == before
    out = export(corpus, theirs, "--force")
    assert out.exit_code == 0, out.output
    assert json.loads((theirs / "export.json").read_text())["corpus"] == corpus


def test_export_rewrites_its_own_export(home, corpus):
    mine = home / "mine"
    assert export(corpus, mine).exit_code == 0
    assert export(corpus, mine, "--format", "dapfam").exit_code == 0
    (mine / "export.json").unlink()  # an export cut short: the mark says it is evalctl's
    assert export(corpus, mine).exit_code == 0
    assert json.loads((mine / "export.json").read_text())["format"] == "beir"


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_export_refuses_a_symlink(home, corpus, force):
    real = home / "real"
    real.mkdir()
    (home / "link").symlink_to(real)
    out = export(corpus, home / "link", *force)
    assert out.exit_code == 2 and "is a symbolic link" in out.output and not any(real.iterdir())


@pytest.mark.parametrize("inside, force", [("", ()), ("", ("--force",)), ("sub", ("--force",))])
def test_export_refuses_the_corpus_folder(home, corpus, inside, force):
    """A DAPFAM export's corpus.parquet would replace the corpus's own."""
    folder = home / "inside" / "cache" / "corpora" / corpus
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    out = export(corpus, folder / inside if inside else folder, "--format", "dapfam", *force)
    assert out.exit_code == 2 and "is inside the corpus store" in out.output, out.output
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_export_qrels_name_is_never_a_path(home, corpus):
    """`--qrels ../../other/qrels/citations` would read another corpus's qrels."""
    assert invoke("corpus", "import", "--format", "espacenet", "--name", "other", PIZZA).exit_code == 0
    assert invoke("corpus", "qrels", "other").exit_code == 0
    out = export(corpus, home / "out", "--qrels", "../../other/qrels/citations")
    assert out.exit_code == 2 and "qrels set '../../other/qrels/citations' is not a valid name" in out.output
    assert not (home / "out").exists()



@pytest.mark.parametrize("fmt", ["beir", "dapfam"])
def test_export_replaces_links_planted_in_its_folder(home, corpus, fmt):
    mine = home / "mine"
    assert export(corpus, mine, "--format", fmt).exit_code == 0
    files = [p.name for p in mine.iterdir() if p.is_file() and p.name != ".evalctl-output"]
    folders = [p.name for p in mine.iterdir() if p.is_dir()]  # qrels/ and excluded/
    assert files and folders
    before = plant_links(mine, home / "elsewhere", files=files, folders=folders)
    out = export(corpus, mine, "--format", fmt)
    assert out.exit_code == 0, out.output
    untouched(home / "elsewhere", before)
    assert not any(p.is_symlink() for p in mine.rglob("*"))
    assert json.loads((mine / "export.json").read_text())["format"] == fmt


def test_export_never_writes_through_a_link_in_a_forced_folder(home, corpus):
    theirs = home / "theirs"
    theirs.mkdir()
    before = plant_links(theirs, home / "elsewhere", files=["corpus.jsonl"], folders=["qrels"])
    assert export(corpus, theirs, "--force").exit_code == 0
    untouched(home / "elsewhere", before)
