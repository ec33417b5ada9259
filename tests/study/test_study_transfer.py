"""Cross-landscape transfer as a study task (platform/study/tasks/transfer/task.py, one line in TASKS): MiniLM tuned
with R3 on test_study_runner's 60 USPTO grants (2 steps of 16 pairs: the recipe loop, not a tuned model), then compared with its
base on the 274 Espacenet pizza patents' citation queries, by the plan, the runner, an expected score and the
report; the step's numbers are those `evalctl.evaluators.tasks.transfer` gives for the same runs."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from test_study_runner import spec_file

pytestmark = [pytest.mark.opensearch, pytest.mark.models]


def _spec(tmp_path, tag: str, transfer: list[dict], expected: list[dict] = (), **tasks) -> Path:
    """test_study_runner's two corpora and MiniLM, R3 on the grants, the given transfer entries and other tasks."""
    path = spec_file(tmp_path, tag)
    doc = yaml.safe_load(path.read_text())
    doc.update(finetune=[{"corpus": f"rt-{tag}-grants", "recipes": ["R3"], "match_size": 16, "max_steps": 2}],
               transfer=transfer, expected=list(expected), **tasks)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_transfer_without_fine_tuning_with_a_text_method_or_on_the_training_corpus_is_refused(tmp_path):
    from evalctl.config_files import SpecError
    from evalctl.study.plan.loading import load_experiment

    path = _spec(tmp_path, "v", [{"corpus": "rt-v-pizza"}])
    doc = yaml.safe_load(path.read_text())
    for change, message in ((lambda d: d.pop("finetune"), r"transfer\[0\]: the spec fine-tunes no model"),
                            (lambda d: d["transfer"][0].update(method="bm25"), r"transfer\[0\]: method 'bm25'"),
                            (lambda d: d["transfer"][0].update(corpus="rt-v-grants"),
                             r"transfer\[0\]: corpus rt-v-grants is where the spec fine-tunes")):
        bad = yaml.safe_load(yaml.safe_dump(doc))
        change(bad)
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(SpecError, match=message):
            load_experiment(str(path))


def test_transfer_runs_as_a_study_task(os_client, tmp_path, monkeypatch):
    from evalctl.cli.main import cli
    from evalctl.corpus.qrels import load_qrels
    from evalctl.evaluators.tasks.transfer import transfer
    from evalctl.evaluators.tasks.transfer_params import TransferParams
    from evalctl.opensearch.connection import make_client
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.plan.runner import plan
    from evalctl.study.spec.step_ids import step_key

    tag = uuid.uuid4().hex[:6]
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pizza, tuned = f"rt-{tag}-pizza", f"all-minilm-l6-v2+r3-n16@rt-{tag}-grants"
    # classification on the same index: the report's recipe table compares the tuned model with its base
    classify = {"classification": [{"corpus": pizza, "views": ["T"], "label_sets": ["ipc3"]}]}
    path = _spec(tmp_path, tag, [{"corpus": pizza, "views": ["T"]}], **classify)
    try:
        steps = {s.key: s for s in plan(load_experiment(str(path)))}
        key = f"transfer {pizza} {tuned} T"
        assert [k for k in steps if k.startswith("transfer ")] == [key]  # the base itself is no comparison
        assert {step_key(d) for d in steps[key].deps} == {f"qrels {pizza} citations", f"index {pizza} all-minilm-l6-v2 [T]",
                                                         f"index {pizza} {tuned} [T]"}
        out = CliRunner().invoke(cli, ["run", str(path)])
        assert out.exit_code == 0 and "FAILED" not in out.output, out.output

        step = next(s for s in plan(load_experiment(str(path))) if s.key == key)
        scores = step.scores()
        (row,) = transfer(make_client(), [tuned], TransferParams(pizza, "T", method="exact"), progress=False).rows
        assert scores == pytest.approx({"delta": row.delta, "base_score": row.base_score,
                                        "tuned_score": row.tuned_score, "p": row.p}, abs=1e-12)
        assert row.n_queries == len(load_qrels(pizza, "citations").qrels("test")) > 0  # every test query, paired

        _spec(tmp_path, tag, [{"corpus": pizza, "views": ["T"]}], expected=[
            {"task": "transfer", "corpus": pizza, "model": tuned, "view": "T", "metric": "delta",
             "value": round(row.delta, 6), "tolerance": 1e-5}], **classify)
        again = CliRunner().invoke(cli, ["run", str(path)])
        assert again.exit_code == 0, again.output
        assert "0 ran" in again.output and f"OK   transfer/{pizza}/{tuned}/T/exact delta" in again.output, again.output

        report = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert report.exit_code == 0, report.output
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("Cross-landscape transfer", 1)[1]
        # models under the names a reader knows (display_names.model_title), not their ids
        assert "all-MiniLM-L6-v2 + R3" in section and "p (Holm)" in section and step.ref() in section
        _check_recipe_table(md)
    finally:
        os_client.indices.delete(index=f"evalctl-rt-{tag}-*", ignore_unavailable=True)


def _check_recipe_table(md: str) -> None:
    """The recipe table gives F1 in percent with the CIs the classification table gives its base, and for the main
    metric (logreg) the test its finding states: 5 seeds, an exact test that cannot reach significance."""
    recipes = md.split("## Fine-tuning recipes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in recipes.splitlines() if line.startswith("| classification")]
    assert len(rows) == 2 and all("micro_f1 (%)" in r and "all-MiniLM-L6-v2 + R3" in r for r in rows), recipes
    cells = re.findall(r"\| (\d+\.\d) \[(\d+\.\d), (\d+\.\d)\] ", recipes)
    assert len(cells) == 4 and all(float(lo) <= float(v) <= float(hi) for v, lo, hi in cells), recipes
    (logreg,) = [r for r in rows if "logreg" in r]
    base = re.search(r"\| (\d+\.\d \[[^]]*\]) ", logreg).group(1)
    assert base in md.split("## Classification", 1)[1].split("\n## ", 1)[0]  # the same mean and CI as its table
    assert "cannot reach significance with n=5, Holm p" in logreg and " pt)" in logreg
    finding = next(line for line in md.splitlines() if line.startswith("- Recipe R3") and "logreg" in line)
    assert "cannot reach significance with n=5" in finding
