"""One way to persist: atomic files and folders (nothing half-written stays, an old version survives a
failed write), one UTC clock, and a fine-tuned model's spec copied from its base field by field."""

from __future__ import annotations

import dataclasses
import re

import pytest

from evalctl.atomic import publish_dir, replace_dir, staging_dir, write_text, writing
from evalctl.clock import utc_now


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "a.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with writing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["a.json"]
    write_text(target, "new")
    assert target.read_text() == "new" and len(list(target.parent.iterdir())) == 1


def test_a_staging_folder_is_published_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "results" / "r1"
    with pytest.raises(RuntimeError):
        with staging_dir(dest) as tmp:
            (tmp / "run.trec").write_text("partial")
            raise RuntimeError("killed")
    assert list(dest.parent.iterdir()) == []  # no half result, no leftover temporary
    with staging_dir(dest) as tmp:
        (tmp / "run.trec").write_text("v1")
        assert publish_dir(tmp, dest)
    with staging_dir(dest) as tmp:
        (tmp / "run.trec").write_text("v2")
        assert not publish_dir(tmp, dest)  # taken: the first publisher wins
        replace_dir(tmp, dest)
    assert (dest / "run.trec").read_text() == "v2" and [p.name for p in dest.parent.iterdir()] == ["r1"]


def test_the_clock_is_utc_iso():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_now())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", utc_now("%Y-%m-%d %H:%M UTC"))


def test_register_copies_every_field_of_the_base(tmp_path, monkeypatch):
    from evalctl.finetune.train import register
    from evalctl.models import get_model

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path))
    base = get_model("all-minilm-l6-v2")
    lineage = {"recipe": {"id": "R3"}, "corpora": [{"name": "c1", "content_hash": "h"}], "seed": (1, 2)}
    spec_file = tmp_path / "models" / "registered" / "toy-tuned.yaml"
    tuned = register(base, "toy-tuned", tmp_path / "m", "ft-0123456789abcdef", lineage, spec_file)
    differs = {f.name for f in dataclasses.fields(base) if getattr(base, f.name) != getattr(tuned, f.name)}
    assert differs <= {"id", "revision", "named_by_study", "source", "path", "lineage", "offline", "notes"}
    assert (tuned.id, tuned.revision, tuned.path) == ("toy-tuned", "ft-0123456789abcdef", str(tmp_path / "m"))
    assert tuned.offline is None and not tuned.named_by_study and tuned.lineage["seed"] == [1, 2]
    assert tuned.source == "evalctl finetune: all-minilm-l6-v2 + recipe R3 on c1"


@pytest.mark.slow  # scores through ranx (its kernels load in seconds)
def test_scoring_stores_nothing_until_asked(tmp_path, monkeypatch):
    import json

    from evalctl import results_store
    from evalctl.evaluators.scoring.runs import StoredRun
    from evalctl.evaluators.scoring.metrics import METRICS, evaluate_run, store_scores
    from evalctl.evaluators.scoring.run_queries import RunQueries
    from evalctl.corpus.qrels import QrelsPair, QrelsQuery, QrelsSet

    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    qset = QrelsSet("citations", tmp_path, {}, tuple(QrelsQuery(q, "test", None, "corpus", frozenset()) for q in ("q1", "q2")),
                    (QrelsPair("q1", "d1", 1, "IN", "test"), QrelsPair("q2", "d3", 1, "OUT", "test")))
    manifest = {"name": "bm25_toy", "corpus": "toy", "qrels": "citations", "split": "test"}
    run = StoredRun(results_store.Result(tmp_path / "run-1", manifest), {"q1": [("d1", 2.0), ("d2", 1.0)], "q2": [("d2", 1.0)]})
    basis = RunQueries(qset, frozenset({"q1", "q2"}))
    scores = evaluate_run(run, basis=basis)
    assert scores.mean["ndcg@10"] == 0.5 and scores.per_query["ndcg@10"] == {"q1": 1.0, "q2": 0.0}
    assert list(results_store.iter_results()) == []
    inn = evaluate_run(run, domain="IN", basis=basis)
    assert inn.n_queries == 1 and list(results_store.iter_results()) == []
    stored = store_scores(run, scores)
    # the identity (hence the result id) is the one evaluate_run stored as a side effect before
    identity = {"name": "bm25_toy", "run": "run-1", "qrels": "citations", "split": "test", "domain": None,
                "metrics": list(METRICS)}
    assert results_store.find("metrics", "toy", identity).path == stored.path
    assert json.loads(stored.file("metrics.json").read_text()) == {"n_queries": 2, "mean": scores.mean}
    assert store_scores(run, inn, "IN").manifest["name"] == "bm25_toy-IN"
