"""`evalctl export mteb` (evaluators/referee/mteb_export.py, study/report/mteb_entries.py): a small real study (the
Espacenet pizza export's titles: BM25, dense and exact all-MiniLM-L6-v2 retrieval, classification and clustering by
IPC class) is run, reported and exported; mteb's own loader (ResultCache over the export folder) reads every file, each
main score is the report's, and what the files cannot hold (BM25, the HNSW run that shares the exact run's file, CIs,
IN/OUT, latency) is listed in not_exported.md and printed. Stored runs and metrics results export by id too."""

from __future__ import annotations

import importlib.util
import json
import uuid

import pytest
import yaml
from click.testing import CliRunner

from conftest import private_cache, share_embeddings
from real_data import ESPACENET

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

MODEL, HF_ID = "all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def study(os_client, tmp_path_factory):
    """(spec path, report.md text, corpus name) of a study run and reported under a private cache and store."""
    from evalctl.cli.main import cli

    root = tmp_path_factory.mktemp("mteb-export")
    mp = private_cache(root)
    share_embeddings(root / "cache")
    corpus = f"mx-{uuid.uuid4().hex[:6]}-pizza"
    doc = {"name": "mteb-export", "models": [{"id": MODEL}],
           "corpora": [{"name": corpus, "format": "espacenet", "sources": [str(ESPACENET)],
                        "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
           "retrieval": [{"corpus": corpus, "views": ["T"], "methods": ["bm25", "dense", "exact"]}],
           "classification": [{"corpus": corpus, "views": ["T"], "label_sets": ["ipc3"]}],
           "clustering": [{"corpus": corpus, "views": ["T"], "label_sets": ["ipc3"]}]}
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    try:
        for args in (["run", str(spec)], ["report", str(spec), "--out", str(root / "report")]):
            r = CliRunner().invoke(cli, args)
            assert r.exit_code == 0, r.output
        yield spec, (root / "report" / "report.md").read_text(), corpus
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}*", ignore_unavailable=True)
        mp.undo()


def _export(*args: str):
    from evalctl.cli.main import cli

    return CliRunner().invoke(cli, ["export", "mteb", *map(str, args)])


def _report_scores(spec) -> dict[str, float]:
    """Each task step's main score as the report counts it, by task (one step each here, retrieval's dense)."""
    from evalctl.study.abstasks.records import recorded
    from evalctl.study.abstasks.registry import task_targets
    from evalctl.study.abstasks.steps import spec_models
    from evalctl.study.plan.loading import load_experiment

    loaded = load_experiment(str(spec))
    return {sid.target.task: recorded(loaded.name, sid).scores[task.main_score(sid.target)]
            for task, _, sid in task_targets(loaded, spec_models(loaded)) if sid.target.what in ("exact", "ipc3")}


@pytest.mark.skipif(importlib.util.find_spec("mteb") is None,
                    reason="mteb is not installed (pip install 'evalctl[referee]')")
def test_a_study_exports_files_mteb_loads_with_the_reports_main_scores(study, tmp_path):
    from mteb.cache import ResultCache
    from mteb.models.model_meta import ModelMeta

    spec, report_md, corpus = study
    out = tmp_path / "mteb"
    r = _export(spec, "--out", out)
    assert r.exit_code == 0, r.output
    loaded = ResultCache(cache_path=out).load_results(include_remote=False)  # what mteb reads of a results folder
    [model] = loaded.model_results
    assert (model.model_name, model.model_revision) == (HF_ID, "8b3219a92973c328a8e22fadcfa821b5dc75636a")
    stem = f"EvalctlMx{corpus.removeprefix('mx-').removesuffix('-pizza').capitalize()}PizzaT"  # CamelCased, view T
    mains = {t.task_name: t.get_score() for t in model.task_results}
    want = _report_scores(spec)
    assert mains == {f"{stem}Retrieval": want["retrieval"], f"{stem}Ipc3Classification": want["classification"],
                     f"{stem}Ipc3Clustering": want["clustering"]}
    # the report shows them: nDCG@10 to 4 decimals, the label tasks in percent
    assert f"{want['retrieval']:.4f}" in report_md
    assert all(f"| {100 * want[t]:.1f} " in report_md for t in ("classification", "clustering"))
    [retrieval] = [t for t in model.task_results if t.task_name.endswith("Retrieval")]
    entry = retrieval.scores["test"][0]
    assert entry["ndcg_at_10"] == entry["main_score"] and {"ndcg_at_100", "recall_at_100", "mrr_at_10"} <= set(entry)
    folder = out / "results" / HF_ID.replace("/", "__") / model.model_revision
    ModelMeta.model_validate_json_resolved((folder / "model_meta.json").read_text())  # valid as mteb reads metadata
    listed = (out / "not_exported.md").read_text()
    assert "bm25:all-minilm-l6-v2:T" in listed and "OpenSearch BM25" in listed
    # one file per model and task: the exact run's (MTEB searches exhaustively), the HNSW run listed
    assert "dense:all-minilm-l6-v2:T (" in listed and "is exact:all-minilm-l6-v2:T (" in listed
    for standing in ("confidence intervals", "IN and OUT of domain", "latency and cost"):
        assert standing in listed and standing in r.output


def test_runs_and_metrics_export_by_id_and_a_domain_score_is_listed(study, tmp_path):
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.evaluators.scoring.metrics import stored_scores
    from evalctl.evaluators.scoring.runs import load_run

    _, _, corpus = study
    [dense] = [r for r in results_store.iter_results("run", corpus) if r.manifest["method"] == "dense"]
    r = CliRunner().invoke(cli, ["evaluate", dense.id, "--domain", "IN"])
    assert r.exit_code == 0, r.output
    [in_domain] = [m for m in results_store.iter_results("metrics", corpus) if m.manifest["domain"] == "IN"]
    out = tmp_path / "by-id"
    r = _export(dense.id, in_domain.id, "--out", out)
    assert r.exit_code == 0, r.output
    [file] = (out / "results").glob("*/*/*Retrieval.json")
    entry = json.loads(file.read_text())["scores"]["test"][0]
    assert entry["main_score"] == stored_scores(load_run(dense.id))["ndcg@10"]
    assert f"metrics {in_domain.id}" in (out / "not_exported.md").read_text() and "IN pairs" in r.output
    bad = _export("no-such-thing", "--out", tmp_path / "bad")
    assert bad.exit_code == 2, bad.output
    assert "no experiment spec 'no-such-thing'" in bad.output and "matches no stored run" in bad.output
