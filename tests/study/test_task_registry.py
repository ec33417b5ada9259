"""docs/extending.md's "a new task", proven: a toy pair-similarity task (tests/toy_pair_task.py), one module
plus one registry line, goes through spec loading and validation, the plan, the run, expected scores and
the report, on the real node with real patents and MiniLM."""

from __future__ import annotations

import uuid

import pytest
import yaml
from click.testing import CliRunner

from real_data import ESPACENET

MODEL = "all-minilm-l6-v2"
PIZZA = ESPACENET


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
    import sys

    from evalctl.cli.main import cli
    from evalctl.study.experiment import ExperimentSpec
    from evalctl.study.tasks import TASKS

    assert TASKS.names() == ("retrieval", "classification", "clustering", "transfer", "latency")
    for name, task in TASKS.items():  # each task's entries are a spec section of its name, and its step has a command
        assert task.name == name and task.command in cli.commands, task.command
        # its entry type lives in its own module, as a plug-in's does, and it declares its headline metrics
        assert task.entry.__module__ == type(task).__module__ and task.headline_metrics, name
        assert sys.modules[task.entry.__module__].__name__.startswith("evalctl.study.task_")
    # every task's section is read alike: no task has a field of the spec
    assert not set(TASKS.names()) & set(ExperimentSpec.__dataclass_fields__)


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_a_target_given_twice_is_refused(tmp_path, monkeypatch):
    """Two entries that plan one target would share its study record: the plan and the report refuse them."""
    from evalctl.config_files import SpecError
    from evalctl.study.runner import plan
    from evalctl.study.spec_loading import load_experiment
    from evalctl.study.report import write_report

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    doc = _doc("tt-twice")
    del doc["pairsim"]
    doc["retrieval"] = [{"corpus": "tt-twice", "views": ["T"], "methods": ["bm25"]},
                        {"corpus": "tt-twice", "views": ["T", "TA"], "methods": ["bm25"], "k": 10}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_experiment(str(path))
    message = rf"retrieval\[0\] and retrieval\[1\] both plan retrieve tt-twice {MODEL} T bm25 .*give each target once"
    with pytest.raises(SpecError, match=message):
        plan(spec)
    with pytest.raises(SpecError, match=message):
        write_report(spec, tmp_path / "report")


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
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
    doc = {**_doc("tt-bad"), "tasks": {"pairsim": []}}  # where the tasks' sections go, never written by hand
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code == 2 and "unknown key 'tasks'" in r.output, r.output


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
        assert [c.strip() for c in row.strip("|").split("|")][:4] == [corpus, MODEL, "T", f"{got:.4f}"], row
        # its headline metric in the headline table, with no headline code in the task
        head = md.split("## Headline results")[1].split("\n## ")[0]
        assert "pairsim: win_rate per target" in head
        row = next(line for line in head.splitlines() if corpus in line)
        # the model as a reader knows it (display_names.model_title), not its id
        assert [c.strip() for c in row.strip("|").split("|")] == [corpus, "all-MiniLM-L6-v2", "T", "citations",
                                                                   f"{got:.4f}"]
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)
