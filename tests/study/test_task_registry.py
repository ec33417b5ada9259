"""docs/extending.md's "a new task", proven: a toy pair-similarity task in a package of its own
(tests/plugin_task: one module and a pyproject.toml declaring it in the `evalctl.tasks` entry-point group), installed
with pip, goes through spec loading and validation, the plan, the run, expected scores and the report, on the real
node with real patents and MiniLM, with no file of evalctl changed. A task whose hooks do not match the base's is
refused when it registers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO, share_embeddings
from real_data import ESPACENET

MODEL = "all-minilm-l6-v2"
PIZZA = ESPACENET
EVALCTL = str(Path(sys.executable).with_name("evalctl"))


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The plug-in package installed by pip (its wheel built from a copy, so the repository stays clean) into a
    folder of its own: on the path, that folder is a site of installed distributions as the venv's is."""
    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(REPO / "tests" / "plugin_task", root / "src")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    "--target", str(root / "site"), str(root / "src")], check=True, capture_output=True)
    return root / "site"


@pytest.fixture
def pair_task(plugin_site, monkeypatch):
    """The installed task, registered in this process as the entry point registers it in a new one."""
    from evalctl.study.abstasks.registry import TASKS

    monkeypatch.syspath_prepend(str(plugin_site))
    TASKS.register("pairsim", "toy_pair_task:TASK")
    yield
    TASKS.unregister("pairsim")


def _doc(corpus: str, **more) -> dict:
    return {"name": f"toy-task-{corpus}", "models": [{"id": MODEL}],
            "corpora": [{"name": corpus, "format": "espacenet", "sources": [str(PIZZA)],
                         "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
            "pairsim": [{"corpus": corpus, "views": ["T"]}], **more}


def test_task_registry_holds_the_study_tasks():
    from evalctl.cli.main import cli
    from evalctl.study.abstasks.base import AbsTask
    from evalctl.study.abstasks.registry import TASKS
    from evalctl.study.spec.experiment import ExperimentSpec

    assert TASKS.names()[:5] == ("retrieval", "classification", "clustering", "transfer", "latency")
    for name, task in TASKS.items():  # each task's entries are a spec section of its name, and its step has a command
        assert isinstance(task, AbsTask) and task.name == name and task.command in cli.commands, task.command
        # its entry type lives in its own room, as a plug-in's does, and it declares its main score
        assert task.entry.__module__ == type(task).__module__.rsplit(".", 1)[0] + ".task", name
        assert type(task).__module__.startswith("evalctl.study.tasks.") and task.metadata.main_score
    # every task's section is read alike: no task has a field of the spec
    assert not set(TASKS.names()) & set(ExperimentSpec.__dataclass_fields__)


@pytest.mark.slow  # pip builds and installs the plug-in's wheel
def test_an_installed_package_adds_its_task_by_entry_point(plugin_site, monkeypatch):
    from evalctl.registry import Registry
    from evalctl.study.abstasks.base import check_task

    monkeypatch.syspath_prepend(str(plugin_site))
    tasks = Registry("task", {"retrieval": "evalctl.study.tasks.retrieval.task:TASK"}, group="evalctl.tasks",
                     check=check_task)  # as registry.TASKS is built, in a process that has the package
    assert tasks.names() == ("retrieval", "pairsim")  # built-ins first, then the installed ones
    assert type(tasks.get("pairsim")).__name__ == "PairTask"
    taken = Registry("task", {"pairsim": "evalctl.study.tasks.retrieval.task:TASK"}, group="evalctl.tasks")
    with pytest.raises(ValueError, match=r"task 'pairsim' is declared twice: evalctl's own and entry point pairsim = "
                                         r"toy_pair_task:TASK \(evalctl-toy-pair-task\)"):
        taken.names()


def test_a_task_whose_hook_differs_from_the_base_is_refused_when_it_registers():
    from evalctl.registry import Registry
    from evalctl.study.abstasks.base import TaskMetadata, check_task
    from evalctl.study.tasks.labels.task import LabelTaskEntry
    from evalctl.study.tasks.transfer.task import TransferTask

    class Written(TransferTask):  # from docs of another signature: findings(report, steps, pairs)
        metadata = TaskMetadata("written", "classify", LabelTaskEntry, "Written", "f1")

        def findings(self, report, steps, pairs):
            return []

    tasks = Registry("task", {}, check=check_task)
    with pytest.raises(TypeError, match=r"task written: findings\(self, report, steps, pairs\) does not match the "
                                        r"base's findings\(self, report: 'Report', spec: 'ExperimentSpec'"):
        tasks.register("written", Written())
    with pytest.raises(TypeError, match="registered under another name than its metadata's"):
        tasks.register("other", TransferTask())

    @dataclass_entry
    class NoViews:
        corpus: str

    with pytest.raises(TypeError, match="task bare: its entry NoViews lacks views, models, include_tuned"):
        TaskMetadata("bare", "classify", NoViews, "Bare", "f1")


def dataclass_entry(cls):
    from dataclasses import dataclass

    return dataclass(frozen=True)(cls)


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_a_target_given_twice_is_refused(tmp_path, monkeypatch):
    """Two entries that plan one target would share its study record: the plan and the report refuse them."""
    from evalctl.config_files import SpecError
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.plan.runner import plan
    from evalctl.study.report.write import write_report

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
def test_an_installed_task_runs_through_spec_plan_run_expected_and_report(os_client, plugin_site, tmp_path):
    """New `evalctl` processes, with the installed package on their path and nothing registered by hand."""
    corpus = f"tt-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "EVALCTL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")]))}
    env.pop("EVALCTL_RESULTS", None)
    share_embeddings(tmp_path / "cache")
    path = tmp_path / "spec.yaml"

    def evalctl(*args):
        return subprocess.run([EVALCTL, *args], env=env, capture_output=True, text=True)

    key = f"pairsim {corpus} {MODEL} T citations"
    target = f"pairsim/{corpus}/{MODEL}/T/citations win_rate"
    expected = {"task": "pairsim", "corpus": corpus, "model": MODEL, "view": "T", "metric": "win_rate"}
    try:
        # MiniLM's title vectors place cited patents closer than random ones: a win rate in (0.5, 1], never -1
        path.write_text(yaml.safe_dump(_doc(corpus, expected=[{**expected, "value": 0.75, "tolerance": 0.25},
                                                                {**expected, "value": -1.0}])))
        r = evalctl("run", str(path))
        assert r.returncode == 1 and f"{key}: ok" in r.stdout, r.stdout + r.stderr  # exit 1: one expected score fails
        got = r.stdout.split(f"OK   {target}: ")[1].split()[0]  # 4 decimals
        assert 0.5 < float(got) <= 1.0 and f"FAIL {target}: {got}, expected -1.0" in r.stdout, r.stdout
        r = evalctl("report", str(path), "--out", str(tmp_path / "report"))
        assert r.returncode == 0, r.stdout + r.stderr
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("## Pair similarity (citation pairs)")[1].split("\n## ")[0]
        cells = [c.strip() for c in next(ln for ln in section.splitlines() if corpus in ln).strip("|").split("|")]
        assert cells[:4] == [corpus, MODEL, "T", got], cells
        # its main score in the headline table, with no headline code in the task; the model as a reader knows it
        head = md.split("## Headline results")[1].split("\n## ")[0]
        assert "pairsim: win_rate per target" in head
        cells = [c.strip() for c in next(ln for ln in head.splitlines() if corpus in ln).strip("|").split("|")]
        assert cells == [corpus, "all-MiniLM-L6-v2", "T", "citations", got], cells
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)


def test_the_docs_example_is_the_installed_task():
    """docs/extending.md shows the plug-in package's two files as they are, so its example is the task this file runs."""
    doc = (REPO / "docs" / "extending.md").read_text()
    for name, lang in (("pyproject.toml", "toml"), ("toy_pair_task.py", "python")):
        shown = doc.split(f"<!-- tests/plugin_task/{name} -->\n```{lang}\n")[1].split("```\n")[0]
        assert shown == (REPO / "tests" / "plugin_task" / name).read_text(), name


def test_a_step_recorded_before_the_task_base_stays_done(tmp_path, monkeypatch):
    """A study-step record of the earlier tasks names its result under "run" (retrieval) or "result" (the others):
    the step is done, with that result as its ref, and nothing is computed again."""
    from evalctl import results_store
    from evalctl.study.abstasks.base import STEP_KIND
    from evalctl.study.abstasks.steps import PlanContext, SpecModels
    from evalctl.study.spec.step_ids import Target, TaskStepId, identity_name
    from evalctl.study.tasks.latency.task import LatencyEntry, LatencyTask

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EVALCTL_RESULTS", raising=False)

    class Stored(LatencyTask):
        def identity(self, ctx, entry, sid):
            return {"settings": "as before"}

        def compute(self, ctx, entry, sid):
            raise AssertionError("a finished step is not computed again")

        def deps(self, ctx, entry, sid):
            return ()  # no spec here to find the corpus's other systems in

    sid = TaskStepId("latency", Target("latency", "toy", "m", "T", "dense"))
    result = results_store.write("latency", "toy", {"name": "a measurement"}, {})
    for key in ("result", "run"):
        results_store.write(STEP_KIND, "toy", {"name": identity_name(sid), "settings": "as before"}, {},
                            extra={"scores": {"p50_ms": 31.8}, key: result.id})
        ctx = PlanContext(None, [], SpecModels((), ()), {("toy", "m"): None})
        step = Stored().step(ctx, LatencyEntry("toy"), sid)
        assert step.is_done() and step.scores() == {"p50_ms": 31.8} and step.ref() == result.id, key
