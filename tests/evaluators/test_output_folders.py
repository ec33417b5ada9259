"""The output folders and files of `evalctl compare`, `tables`, `dashboards export` and `referee` (issues 25
and 37): a folder evalctl did not write is refused unless forced, a link given as the output is refused, links
planted in its own folder are replaced with their targets untouched."""

from __future__ import annotations

import uuid

import pytest

from cli_home import PIZZA, corpus, home, invoke, listing, plant_links, untouched  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, os_client):
    """Two stored BM25 runs of the pizza sample (a private cache and index prefix): their ids and the env."""
    import os

    root = tmp_path_factory.mktemp("runs")
    env = {"EVALCTL_CACHE": str(root / "cache"), "EVALCTL_CONFIG": str(root / "config.yaml"),
           "EVALCTL_INDEX_PREFIX": f"hs{uuid.uuid4().hex[:6]}", "HF_HUB_OFFLINE": "1", "EVALCTL_RESULTS": None}
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v) if v else mp.delenv(k, raising=False)
    try:
        assert invoke("corpus", "import", "--format", "espacenet", "--name", "hs-pizza", PIZZA).exit_code == 0
        assert invoke("corpus", "qrels", "hs-pizza", "--dev-fraction", "0").exit_code == 0
        assert invoke("index", "--corpus", "hs-pizza").exit_code == 0
        ids = []
        for terms in ("8", "64"):
            out = invoke("retrieve", "--corpus", "hs-pizza", "--method", "bm25", "--view", "T", "--bm25-max-terms", terms)
            assert out.exit_code == 0, out.output
            ids.append(__import__("re").search(r"run (\S+)  \(", out.output).group(1))
        yield ids, env
    finally:
        os_client.indices.delete(index=f"{os.environ['EVALCTL_INDEX_PREFIX']}-*", ignore_unavailable=True)
        mp.undo()


@pytest.fixture
def runs_here(two_runs, monkeypatch):
    ids, env = two_runs
    for k, v in env.items():
        monkeypatch.setenv(k, v) if v else monkeypatch.delenv(k, raising=False)
    return ids


def test_compare_out_is_an_output_folder(runs_here, tmp_path):
    ids, theirs, link = runs_here, tmp_path / "theirs", tmp_path / "link"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    out = invoke("compare", *ids, "--out", theirs)
    assert out.exit_code == 2 and f"{theirs} holds files that are not an evalctl comparison" in out.output, out.output
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"]
    out = invoke("compare", *ids, "--out", theirs, "--force")
    assert out.exit_code == 0, out.output
    assert (theirs / "comparison.md").is_file() and (theirs / "notes.txt").read_text() == "mine\n"
    real = tmp_path / "real"
    real.mkdir()
    link.symlink_to(real)
    for force in ((), ("--force",)):
        out = invoke("compare", *ids, "--out", link, *force)
        assert out.exit_code == 2 and f"{link} is a symbolic link" in out.output and not any(real.iterdir())
    # its own folder again, with links planted as its files: replaced, their targets untouched
    mine = tmp_path / "mine"
    assert invoke("compare", *ids, "--out", mine).exit_code == 0
    before = plant_links(mine, tmp_path / "elsewhere", files=["comparison.md", "ranx.tex"])
    assert invoke("compare", *ids, "--out", mine).exit_code == 0
    untouched(tmp_path / "elsewhere", before)
    assert not any(p.is_symlink() for p in mine.iterdir())


def test_single_file_outputs_refuse_a_link(runs_here, tmp_path):
    """--latex, --markdown, `tables --out`, `dashboards export --out`: a link given as the file is refused
    (the file would land elsewhere than the path shown), its target untouched."""
    target = tmp_path / "target.txt"
    target.write_bytes(b"not yours\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    for args in (("compare", *runs_here, "--latex", link), ("compare", *runs_here, "--markdown", link),
                 ("tables", "--task", "classification", "--out", link), ("dashboards", "export", "--out", link)):
        out = invoke(*args)
        assert out.exit_code == 2 and f"{link} is a symbolic link" in out.output, (args, out.output)
        assert target.read_bytes() == b"not yours\n" and link.is_symlink()


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
@pytest.mark.parametrize("plant", ["link", "foreign"])
def test_referee_out_is_an_output_folder(home, corpus, plant):
    out_dir = home / "ref"
    if plant == "link":
        (home / "real").mkdir()
        out_dir.symlink_to(home / "real")
        message = f"{out_dir} is a symbolic link"
    else:
        out_dir.mkdir()
        (out_dir / "referee.md").write_text("mine\n")
        message = f"{out_dir} holds files that are not an evalctl referee table"
    before = listing(home)
    out = invoke("referee", corpus, "--out", out_dir)
    assert out.exit_code == 2 and message in out.output, out.output
    assert listing(home) == before


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_referee_of_a_view_no_query_has_is_refused(home, corpus):
    """The Espacenet sample has titles only: no query has TA text, and MTEB crashed on the empty task."""
    out = invoke("referee", corpus, "--view", "TA", "--out", home / "ref-ta")
    assert out.exit_code == 2, out.output
    assert f"no query of citations/test has TA text in corpus {corpus} (3 without it)" in out.output
