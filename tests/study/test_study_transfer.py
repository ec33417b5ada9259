"""Cross-landscape transfer as a study task (platform/study/task_transfer.py, one line in TASKS): MiniLM tuned
with R3 on test_study_runner's 60 USPTO grants (2 steps of 16 pairs: the recipe loop, not a tuned model), then compared with its
base on the 274 Espacenet pizza patents' citation queries, by the plan, the runner, an expected score and the
report; the step's numbers are those `evalctl.evaluators.tasks.transfer` gives for the same runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from test_study_runner import spec_file

pytestmark = [pytest.mark.opensearch, pytest.mark.models]


def _spec(tmp_path, tag: str, transfer: list[dict], expected: list[dict] = ()) -> Path:
    """test_study_runner's two corpora and MiniLM, R3 on the grants, and the given transfer entries."""
    path = spec_file(tmp_path, tag)
    doc = yaml.safe_load(path.read_text())
    doc.update(finetune=[{"corpus": f"rt-{tag}-grants", "recipes": ["R3"], "match_size": 16, "max_steps": 2}],
               transfer=transfer, expected=list(expected))
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_transfer_without_fine_tuning_with_a_text_method_or_on_the_training_corpus_is_refused(tmp_path):
    from evalctl.config_files import SpecError
    from evalctl.study.spec_loading import load_experiment

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
    from evalctl.study.spec_loading import load_experiment
    from evalctl.study.runner import plan
    from evalctl.study.step_ids import step_key

    tag = uuid.uuid4().hex[:6]
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pizza, tuned = f"rt-{tag}-pizza", f"all-minilm-l6-v2+r3-n16@rt-{tag}-grants"
    path = _spec(tmp_path, tag, [{"corpus": pizza, "views": ["T"]}])
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
             "value": round(row.delta, 6), "tolerance": 1e-5}])
        again = CliRunner().invoke(cli, ["run", str(path)])
        assert again.exit_code == 0, again.output
        assert "0 ran" in again.output and f"OK   transfer/{pizza}/{tuned}/T/exact delta" in again.output, again.output

        report = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert report.exit_code == 0, report.output
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("Cross-landscape transfer", 1)[1]
        assert tuned in section and "p (Holm)" in section and step.ref() in section
    finally:
        os_client.indices.delete(index=f"evalctl-rt-{tag}-*", ignore_unavailable=True)
