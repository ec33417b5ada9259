"""Runs and judgments made elsewhere (`evalctl runs import`, `evalctl qrels import`), on the real node: a BM25 run
evalctl made, written out as TREC and brought back in, scores and compares as the run itself; a file naming too
many unknown ids, or with a line that cannot be read, is refused before anything is stored; judgments written out
and imported score as the qrels set they came from. The corpus and runs are test_output_folders' (the pizza sample,
two BM25 runs)."""

from __future__ import annotations

import re

from cli_home import invoke
from test_output_folders import runs_here, two_runs  # noqa: F401 - fixtures
from evalctl import results_store
from evalctl.corpus.qrels import load_qrels
from evalctl.digests import file_digest
from evalctl.evaluators.scoring.compare import compare_runs
from evalctl.evaluators.scoring.metrics import METRICS, evaluate_run
from evalctl.evaluators.scoring.run_import import METHOD, NOT_SERVED
from evalctl.evaluators.scoring.runs import KIND, TIE_RULE, load_run

CORPUS = "hs-pizza"


def _import_run(path, name: str, *extra):
    return invoke("runs", "import", path, "--format", "trec", "--name", name, "--corpus", CORPUS,
                  "--qrels", "citations", "--view", "T", *extra)


def _run_id(out) -> str:
    assert out.exit_code == 0, out.output
    return re.search(r"run (\S+)  \(", out.output).group(1)


def _rows(run) -> list[list[str]]:
    return [line.split() for line in run.result.read_text("run.trec").splitlines()]


def _stored_runs() -> set[str]:
    return {r.id for r in results_store.iter_results(KIND, CORPUS)}


def test_an_imported_copy_of_a_run_scores_and_compares_as_the_run(runs_here, tmp_path):  # noqa: F811 - fixture
    original = load_run(runs_here[0])
    path = tmp_path / "bm25.trec"
    path.write_text(original.result.read_text("run.trec"))
    out = _import_run(path, "copy", "--produced-by", "evalctl retrieve, BM25 on T")
    imported = load_run(_run_id(out))
    assert "imported:copy:T on qrels citations/test" in out.output and "dropped: 0 of" in out.output, out.output

    mine, theirs = evaluate_run(original), evaluate_run(imported)
    assert theirs.per_query == mine.per_query and theirs.mean == mine.mean and set(mine.per_query) == set(METRICS)
    rep = compare_runs([original, imported])
    assert rep.n_queries == mine.n_queries > 0
    assert all(p.delta == 0 and p.wins == p.losses == 0 and p.tested.p == 1 for p in rep.pairs), rep.pairs

    m = imported.manifest
    assert (m["method"], m["qrels"], m["split"], m["source_file"]) == (METHOD, "citations", "test", path.name)
    assert m["source"] == {"format": "trec", "sha256": file_digest(path)}
    assert m["produced_by"] == "evalctl retrieve, BM25 on T" and m["imported_at"] and m["not_served"] == NOT_SERVED
    assert m["tie_rule"] == TIE_RULE
    assert m["query_set"] == original.manifest["query_set"]  # the same queries, exclusions and query texts
    assert (m["rank_disagreements"], m["id_check"]["dropped_rows"], m["excluded_rows"]) == (0, 0, 0)
    assert "unchanged" in _import_run(path, "copy").output  # the same file again: the stored run

    listed = invoke("runs", "list", "--corpus", CORPUS).output
    assert f"{imported.id}  imported:copy:T  {CORPUS} citations/test" in listed, listed
    assert invoke("evaluate", imported.id).exit_code == 0
    table = invoke("compare", original.id, imported.id, "--cost")
    assert table.exit_code == 0 and NOT_SERVED in table.output, table.output

    # ranks that contradict the scores are counted, and the scores' order is what is scored
    flipped = tmp_path / "flipped.trec"
    flipped.write_text("".join(f"{q} Q0 {d} {1000 - int(rank)} {score} x\n"
                               for q, _, d, rank, score, _ in _rows(original)))
    reordered = load_run(_run_id(_import_run(flipped, "flipped")))
    assert reordered.manifest["rank_disagreements"] > 0 and evaluate_run(reordered).per_query == mine.per_query


def test_a_run_naming_unknown_documents_is_refused_past_the_share(runs_here, tmp_path):  # noqa: F811 - fixture
    rows = _rows(load_run(runs_here[0]))
    for i in range(0, len(rows), 10):  # 10% of the rows
        rows[i][2] = f"XX{i}"
    unknown = len(range(0, len(rows), 10))
    path = tmp_path / "other.trec"
    path.write_text("".join(" ".join(r) + "\n" for r in rows))
    before = _stored_runs()
    out = _import_run(path, "other")
    assert out.exit_code == 2, out.output
    assert f"{unknown} of {len(rows)} rows" in out.output and f"{unknown} unknown document ids" in out.output
    assert "XX0" in out.output and "nothing was imported" in out.output, out.output
    assert _stored_runs() == before

    # under a larger share the same rows are dropped, and counted where the run is kept
    kept = load_run(_run_id(_import_run(path, "other", "--max-unknown-share", "0.2")))
    check = kept.manifest["id_check"]
    assert (check["unknown_document_rows"], check["rows"], check["max_unknown_share"]) == (unknown, len(rows), 0.2)


def test_imported_judgments_score_as_the_qrels_they_were_written_from(runs_here, tmp_path):  # noqa: F811 - fixture
    original = load_run(runs_here[0])
    qrels = load_qrels(CORPUS, "citations").qrels(split="test")
    path = tmp_path / "citations.qrels"
    path.write_text("".join(f"{q} 0 {d} {rel}\n" for q, docs in qrels.items() for d, rel in docs.items()))
    out = invoke("qrels", "import", path, "--format", "trec", "--corpus", CORPUS, "--name", "mine")
    assert out.exit_code == 0 and "dropped: 0 of" in out.output, out.output
    assert load_qrels(CORPUS, "mine").qrels(split="test") == qrels

    out = invoke("retrieve", "--corpus", CORPUS, "--method", "bm25", "--view", "T", "--bm25-max-terms", "8",
                 "--qrels", "mine")
    rescored = load_run(_run_id(out))
    assert rescored.manifest["query_set"] == original.manifest["query_set"]  # same queries, texts, exclusions
    assert evaluate_run(rescored).per_query == evaluate_run(original).per_query

    assert "unchanged" in invoke("qrels", "import", path, "--corpus", CORPUS, "--name", "mine").output
    other = tmp_path / "other.qrels"
    other.write_text(path.read_text().splitlines()[0] + "\n")
    out = invoke("qrels", "import", other, "--corpus", CORPUS, "--name", "mine")
    assert out.exit_code == 2 and "never replaced" in out.output, out.output
    assert load_qrels(CORPUS, "mine").qrels(split="test") == qrels


def test_a_line_that_cannot_be_read_is_refused_by_its_number(runs_here, tmp_path):  # noqa: F811 - fixture
    lines = [" ".join(r) for r in _rows(load_run(runs_here[0]))]
    before = _stored_runs()
    for line, why in ((lines[2].rsplit(" ", 2)[0] + " high x", "score 'high' is not a finite number"),
                      (lines[2].rsplit(" ", 1)[0], "expected 6 columns")):
        path = tmp_path / "bad.trec"
        path.write_text("\n".join([*lines[:2], line, *lines[3:]]) + "\n")
        out = _import_run(path, "bad")
        assert out.exit_code == 2 and f"bad.trec, line 3: {why}" in out.output, out.output
    assert _stored_runs() == before
    path = tmp_path / "bad.qrels"
    path.write_text("Q1 0 D1 1\nQ1 0 D2 yes\n")
    out = invoke("qrels", "import", path, "--corpus", CORPUS, "--name", "bad")
    assert out.exit_code == 2 and "bad.qrels, line 2: relevance 'yes' is not an integer" in out.output, out.output
