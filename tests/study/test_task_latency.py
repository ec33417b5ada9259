"""Serving latency as a study task (platform/study/tasks/latency/task.py, one line in TASKS): a spec's `latency:` entry
on the 274 Espacenet pizza patents (titles, MiniLM) is planned after its index, run by `evalctl run` (bm25 and
dense, two concurrency levels), kept (a second run finds it done) and shown in the report's own section; bad
entries and expected latencies are refused naming the entry."""

from __future__ import annotations

import uuid

import pytest
import yaml
from click.testing import CliRunner

from conftest import ESPACENET

MODEL = "all-minilm-l6-v2"


def _doc(corpus: str, **latency) -> dict:
    return {"name": f"lat-{corpus}", "models": [{"id": MODEL}],
            "corpora": [{"name": corpus, "format": "espacenet", "sources": [str(ESPACENET)],
                         "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
            "latency": [{"corpus": corpus, "views": ["T"], "warmup": 1, "concurrency": [1, 2], "max_queries": 3,
                         "time_limit_s": 30, **latency}]}


def _write(tmp_path, doc: dict):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_entry_matches_the_command_parameters():
    from evalctl.evaluators.retrieval.latency import LatencyParams
    from evalctl.parameters import differences
    from evalctl.study.tasks.latency.task import LatencyEntry

    assert differences(LatencyEntry, LatencyParams) == {}  # a spec entry means what the command's options mean
    assert {"warmup", "concurrency", "max_queries", "time_limit_s"} <= set(LatencyEntry.__dataclass_fields__)


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_bad_entries_and_expected_latencies_are_refused(tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    for latency, named in (({"concurrency": [1, 0]}, "latency[0]: concurrency 1,0"),
                           ({"methods": ["sparse"]}, "latency[0]"), ({"split": "val"}, "latency[0]: unknown split")):
        r = CliRunner().invoke(cli, ["run", str(_write(tmp_path, _doc("lat-bad", **latency))), "--dry-run"])
        assert r.exit_code == 2 and named in r.output, r.output
    doc = {**_doc("lat-bad"), "expected": [{"task": "latency", "corpus": "lat-bad", "model": MODEL, "view": "T",
                                            "method": "dense", "metric": "p50_ms", "value": 5.0}]}
    r = CliRunner().invoke(cli, ["run", str(_write(tmp_path, doc)), "--dry-run"])
    assert r.exit_code == 2 and "expected[0]" in r.output and "not a reproducible score" in r.output, r.output


@pytest.mark.opensearch
@pytest.mark.models
def test_latency_task_runs_is_kept_and_reported(os_client, tmp_path, monkeypatch):
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.evaluators.retrieval.latency import read_timings
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.spec.step_ids import step_key

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"lt-{uuid.uuid4().hex[:6]}"
    doc = _doc(corpus, methods=["bm25", "dense"], budget={"p95_ms": 60000, "index_mb_per_10k": 1})
    doc["retrieval"] = [{"corpus": corpus, "views": ["T"], "methods": ["bm25", "dense"]}]  # the scores it joins
    path = _write(tmp_path, doc)
    try:
        steps = {s.key: s for s in plan(load_experiment(str(path)))}
        keys = [f"latency {corpus} {MODEL} T {m}" for m in ("bm25", "dense")]
        for key in keys:
            deps = {step_key(d) for d in steps[key].deps}
            assert deps == {f"qrels {corpus} citations", f"index {corpus} {MODEL} [T]"}
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and all(f"{k}: ok" in r.output for k in keys), r.output
        for key in keys:
            scores, ref = steps[key].scores(), steps[key].ref()
            res = results_store.get(corpus, ref)
            assert res.manifest["kind"] == "latency" and [p["concurrency"] for p in res.manifest["passes"]] == [1, 2]
            timings = read_timings(res)
            assert len(timings) == sum(p["sent"] for p in res.manifest["passes"]) and scores["errors"] == 0
            assert scores["p50_ms"] == res.manifest["passes"][0]["client_ms"]["p50"] and scores["qps@2"] > 0
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and all(f"{k}: done" in r.output for k in keys), r.output  # kept, not measured again
        monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:9")  # the report reads the store alone
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        # BM25 fits, dense does not (the table rounds to 0.1 MB: BM25's size is at most 0.05 above what it shows)
        bm25_size = round(_check_quality_and_cost(md, tmp_path / "report", corpus, {k: steps[k] for k in keys}) + 0.05, 2)
        doc["latency"][0]["budget"] = {"index_mb_per_10k": bm25_size}
        path.write_text(yaml.safe_dump(doc))
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        findings = (tmp_path / "report" / "report.md").read_text().split("## Findings")[1].split("\n## ")[0]
        claim = next(line for line in findings.splitlines() if f"{corpus}, within index ≤ {bm25_size:g} MB" in line)
        assert ": the best system is BM25 on T (ndcg@10 " in claim, claim
        assert ("also the best measured" in claim) != ("the best measured, Dense · all-MiniLM-L6-v2 on T" in claim)
        section = md.split("## Serving latency")[1].split("\n## ")[0]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
                if steps[keys[1]].ref() in line]
        dense = "Dense · all-MiniLM-L6-v2"
        assert [(row[0], row[2]) for row in rows] == [(dense, "1"), (dense, "2")]  # a row per concurrency level
        assert all(float(row[4]) > 0 and row[7] == "0" for row in rows)  # p50 ms, errors
        assert "Serving latency" not in md.split("## Headline results")[1].split("\n## ")[0]  # no headline claim
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)


def _check_quality_and_cost(md: str, out, corpus: str, latency_steps: dict) -> None:
    """The quality-and-cost table joins each timed system to its score, with the costs its latency result
    recorded; both Pareto charts are drawn; the budget finding names the best system that fits."""
    from evalctl import results_store
    from evalctl.evaluators.retrieval.serving_cost import serving_cost
    from evalctl.study.tasks.latency.quality_cost import pareto_optimal

    section = md.split("## Quality and cost")[1].split("\n## ")[0]
    header, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
                     if line.startswith("|") and not line.startswith(("|--", "|:"))]
    table = [dict(zip(header, row)) for row in rows]
    assert [row["system"] for row in table] == ["BM25 on T", "Dense · all-MiniLM-L6-v2 on T"]
    costs = []
    for row, step in zip(table, latency_steps.values()):
        cost = serving_cost(results_store.get(corpus, step.ref()))
        costs.append(cost)
        assert row["latency"] == step.ref() and row["p95 ms"] == f"{cost.p95_ms:,.1f}"
        assert float(row["index MB / 10k"]) > 0 and row["ndcg@10 [95% CI]"].count("[") == 1
    bm25, dense = table
    assert bm25["HNSW MB"] == "-" and bm25["encode s / 1k"] == "-"  # no vectors searched, none encoded
    assert float(dense["HNSW MB"]) > 0 and float(dense["encode s / 1k"]) > 0
    assert float(dense["index MB / 10k"]) > float(bm25["index MB / 10k"])  # its vectors on top of the text
    for axis, name in (("p95_ms", "latency"), ("index_mb_per_10k", "size")):
        # the costs as measured: the table rounds them, and two rounded alike may differ on the front
        points = [(getattr(cost, axis), float(row[header[1]].split()[0])) for cost, row in zip(costs, table)]
        assert [name in row["Pareto-optimal on"] for row in table] == pareto_optimal(points)
    for axis in ("p95_ms", "index_mb_per_10k"):
        assert (out / f"pareto-{corpus}-{axis}.png").stat().st_size > 10_000
    findings = md.split("## Findings")[1].split("\n## ")[0]
    # 1 MB per 10,000 patents admits neither system: the finding says so and lists what each costs
    assert f"{corpus}, within p95 ≤ 60000 ms and index ≤ 1 MB per 10,000 patents: no system measured fits." in findings
    return float(bm25["index MB / 10k"])


@pytest.mark.opensearch
@pytest.mark.models
def test_a_precision_variant_is_set_beside_its_float32_twin(os_client, tmp_path, monkeypatch):
    """MiniLM and `minilm-int8` (defined `like:` it, pinned to int8): both indexed, scored and timed; the methods
    table names each system's precision, and the quality-and-cost section sets the int8 system beside the float32
    one with its encoding speed ratio and the comparison table's paired test."""
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"lp-{uuid.uuid4().hex[:6]}"
    doc = _doc(corpus, methods=["dense"], concurrency=[1])
    doc["models"].append({"id": "minilm-int8", "spec": {"like": MODEL, "precision": "int8"}})
    doc["retrieval"] = [{"corpus": corpus, "views": ["T"], "methods": ["dense"]}]
    path = _write(tmp_path, doc)
    try:
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        methods = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
                   if line.startswith("| Dense · ")]
        header = next([c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
                      if line.startswith("| system ") and "precision" in line and "reproduce" in line)
        named = {row[0]: row[header.index("precision")] for row in methods if len(row) == len(header)}
        assert named == {"Dense · all-MiniLM-L6-v2": "float32", "Dense · all-MiniLM-L6-v2 (int8)": "int8"}, named
        section = md.split("## Quality and cost")[1].split("\n## ")[0]
        trade = [dict(zip(h, row)) for h, *rows in [[[c.strip() for c in line.strip("|").split("|")]
                                                      for line in section.split("Precision: ")[1].splitlines()
                                                      if line.startswith("|") and not line.startswith(("|--", "|:"))]]
                 for row in rows]
        assert len(trade) == 1 and trade[0]["system"] == "Dense · all-MiniLM-L6-v2 (int8) on T" and trade[0]["precision"] == "int8"
        assert float(trade[0]["encoding speed × float32"]) > 0 and float(trade[0]["encode s / 1k"]) > 0
        assert trade[0]["float32 twin"] == "Dense · all-MiniLM-L6-v2 on T"
        test = trade[0]["ndcg@10 − float32 twin"]
        assert "Holm p" in test and "95% CI" in test, test
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)
