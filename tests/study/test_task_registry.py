"""docs/extending.md's "a new task", proven: a toy pair-similarity task (tests/toy_pair_task.py), one module
plus one registry line, goes through spec loading and validation, the plan, the run, expected scores and
the report, on the real node with real patents and MiniLM."""

from __future__ import annotations

import uuid

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO

MODEL = "all-minilm-l6-v2"
PIZZA = REPO / "samples/espacenet-pizza-2013-2014/pizza_sliced_20132014_274.csv"


@pytest.fixture
def pair_task():
    from evalctl.study.tasks import TASKS

    TASKS.register("pairsim", "toy_pair_task:TASK")  # the one line: "pairsim": "<module>:TASK" in TASKS
    yield
    TASKS.unregister("pairsim")


def _doc(corpus: str, **more) -> dict:
    return {"name": f"toy-task-{corpus}", "models": [{"id": MODEL}],
            "corpora": [{"name": corpus, "format": "espacenet", "sources": [str(PIZZA)],
                         "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
            "pairsim": [{"corpus": corpus, "views": ["T"]}], **more}


def test_task_registry_holds_the_study_tasks():
    from evalctl.study.experiment import ExperimentSpec
    from evalctl.study.tasks import TASKS

    assert TASKS.names() == ("retrieval", "classification", "clustering", "transfer")
    from evalctl.cli.main import cli

    for name, task in TASKS.items():  # each task's entries are a spec section of its name, and its step has a command
        assert task.name == name and task.command in cli.commands, task.command
    # transfer came as a plug-in does (one module, one registry line): its section has no field of its own
    fields = ExperimentSpec.__dataclass_fields__
    assert [n for n in TASKS.names() if n in fields] == ["retrieval", "classification", "clustering"]


def test_a_bad_toy_entry_is_refused_naming_it(pair_task, tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    doc = _doc("tt-bad")
    del doc["corpora"][0]["qrels"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code == 2 and "pairsim[0]: corpus tt-bad builds no qrels set" in r.output, r.output
    doc = _doc("tt-bad", expected=[{"task": "pairsim", "corpus": "tt-bad", "model": MODEL, "view": "T",
                                    "metric": "auc", "value": 0.5}])
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code == 2 and "expected[0]: unknown metric 'auc' for a pairsim score (one of win_rate)" in r.output
    doc = {**_doc("tt-bad"), "more": {"pairsim": []}}  # where registered sections go, never written by hand
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code == 2 and "unknown key 'more'" in r.output, r.output


@pytest.mark.opensearch
@pytest.mark.models
def test_toy_task_through_spec_plan_run_expected_and_report(os_client, pair_task, tmp_path, monkeypatch):
    from evalctl.cli.main import cli
    from evalctl.study.runner import plan
    from evalctl.study.step_ids import step_key
    from evalctl.study.spec_loading import load_experiment

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"tt-{uuid.uuid4().hex[:6]}"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_doc(corpus)))
    try:
        steps = {s.key: s for s in plan(load_experiment(str(path)))}
        key = f"pairsim {corpus} {MODEL} T citations"
        assert {step_key(d) for d in steps[key].deps} == {f"qrels {corpus} citations", f"index {corpus} {MODEL} [T]"}
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and f"{key}: ok" in r.output, r.output
        got = steps[key].scores()["win_rate"]
        assert 0.5 < got <= 1.0  # MiniLM's title vectors place cited patents closer than random ones
        expected = {"task": "pairsim", "corpus": corpus, "model": MODEL, "view": "T", "metric": "win_rate"}
        path.write_text(yaml.safe_dump(_doc(corpus, expected=[{**expected, "value": round(got, 4), "tolerance": 0.001},
                                                                {**expected, "value": round(got - 0.3, 4)}])))
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 1 and f"{key}: done" in r.output, r.output
        assert f"OK   pairsim/{corpus}/{MODEL}/T/citations win_rate: {got:.4f}" in r.output
        assert f"FAIL pairsim/{corpus}/{MODEL}/T/citations win_rate: {got:.4f}" in r.output
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("## Pair similarity (citation pairs)")[1]
        row = next(line for line in section.splitlines() if steps[key].ref() in line)
        assert [c.strip() for c in row.strip("|").split("|")][:4] == [corpus, MODEL, "T", f"{round(got, 4):g}"], row
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)
