"""Serving latency as a study task (platform/study/task_latency.py, one line in TASKS): a spec's `latency:` entry
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
    from evalctl.study.task_latency import LatencyEntry

    assert differences(LatencyEntry, LatencyParams) == {}  # a spec entry means what the command's options mean
    assert {"warmup", "concurrency", "max_queries", "time_limit_s"} <= set(LatencyEntry.__dataclass_fields__)


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
    from evalctl.study.runner import plan
    from evalctl.study.spec_loading import load_experiment
    from evalctl.study.step_ids import step_key

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"lt-{uuid.uuid4().hex[:6]}"
    path = _write(tmp_path, _doc(corpus, methods=["bm25", "dense"]))
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
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("## Serving latency")[1].split("\n## ")[0]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
                if steps[keys[1]].ref() in line]
        dense = "Dense · all-MiniLM-L6-v2"
        assert [(row[0], row[2]) for row in rows] == [(dense, "1"), (dense, "2")]  # a row per concurrency level
        assert all(float(row[4]) > 0 and row[7] == "0" for row in rows)  # p50 ms, errors
        assert "Serving latency" not in md.split("## Headline results")[1].split("\n## ")[0]  # no headline claim
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)
