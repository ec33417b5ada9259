"""The results store: identity decides the id, writes are atomic, lookups find exactly one result."""

import pytest

from evalctl import results_store as rs


def test_write_find_iter(tmp_path):
    ident = {"name": "bm25", "index": "evalctl-x--bm25", "view": "TAC", "k": 100}
    r = rs.write("run", "pizza", ident, {"run.trec": "q1 Q0 d1 1 2.0 bm25\n"}, extra={"seconds": 1.5}, root=tmp_path)
    assert r.file("run.trec").read_text().startswith("q1 Q0 d1")
    assert r.manifest["view"] == "TAC" and r.manifest["seconds"] == 1.5 and "code_version" in r.manifest
    assert rs.find("run", "pizza", ident, root=tmp_path).path == r.path
    assert rs.find("run", "pizza", {**ident, "k": 1000}, root=tmp_path) is None
    again = rs.write("run", "pizza", ident, {"run.trec": "q1 Q0 d2 1 3.0 bm25\n"}, root=tmp_path)
    assert again.path == r.path and "d2" in again.file("run.trec").read_text()  # same identity: replaced
    assert [x.path for x in rs.iter_results("run", "pizza", root=tmp_path)] == [r.path]
    assert not list(tmp_path.glob("pizza/run/.*"))  # no temporary folders left behind


def _two_runs(root):
    from evalctl.evaluators.scoring.runs import save_run

    return None, [save_run("pizza", {"name": name, "k": 10}, {"q1": [("d1", 2.0), ("d2", 1.0)]})
                    for name in ("bm25", "dense")]


def test_a_changed_file_is_refused_by_name_and_counts_as_not_done(tmp_path, monkeypatch):
    """Doc ids flipped inside a stored run.json: reading it fails naming the file and the command that
    rebuilds it; `find` (is it done?) says no, so rerunning rewrites it."""
    from evalctl.digests import DamagedFile
    from evalctl.evaluators.scoring.runs import find_run, load_run

    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path))
    _, (bm25, dense) = _two_runs(tmp_path)
    run_json = bm25.result.file("run.json")
    run_json.write_text(run_json.read_text().replace('"d1"', '"dX"'))
    with pytest.raises(DamagedFile, match=r"run\.json: content differs.*`evalctl retrieve`"):
        load_run(bm25.id)
    assert find_run("pizza", {"name": "bm25", "k": 10}) is None
    assert not rs.intact("pizza", bm25.id) and rs.intact("pizza", dense.id)
    assert load_run(dense.id).ranking == dense.ranking  # the other run is untouched


@pytest.mark.parametrize("damage", ["truncated", "empty", "not an object", "no kind"])
def test_a_damaged_manifest_is_skipped_by_listings_and_named(tmp_path, monkeypatch, capsys, damage):
    """One truncated manifest (a run's, a study record's, a classification result's) must not stop commands
    about other entries: listings skip and name it, the entry itself is not done and fails by name."""
    from evalctl.digests import DamagedFile
    from evalctl.evaluators.scoring.runs import load_run

    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path))
    _, (bm25, dense) = _two_runs(tmp_path)
    record = rs.write("study-record", "pizza", {"name": "s-1"}, {}, extra={"scores": {"ndcg@10": 0.5}})
    manifest = bm25.result.file(rs.MANIFEST)
    text = {"truncated": manifest.read_text()[:40], "empty": "", "not an object": "[1, 2]",
            "no kind": '{"name": "bm25"}'}[damage]
    for victim in (manifest, record.file(rs.MANIFEST)):
        victim.write_text(text)
    assert [r.id for r in rs.iter_results()] == [dense.id]
    err = capsys.readouterr().err
    assert str(manifest) in err and str(record.file(rs.MANIFEST)) in err and "skipped" in err
    assert load_run(dense.id).id == dense.id and load_run(dense.id[:6]).id == dense.id
    assert rs.find("study-record", "pizza", {"name": "s-1"}) is None  # not done: `evalctl run` redoes it
    with pytest.raises(DamagedFile, match="manifest.json: .*`evalctl retrieve`"):
        load_run(bm25.result.path)
