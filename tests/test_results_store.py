"""The results store: identity decides the id, writes are atomic, lookups find exactly one result."""

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
