"""Label tasks read the vectors of their own prompt back from the index (issue 26, item 2).

Where a model's classification or clustering prompt differs from its document prompt, `evalctl index`
(and the study runner, for the tasks its spec has) adds `vec_<VIEW>__<task>`, and classify/cluster read it;
`--vectors document` reads the document vectors instead. Models whose task prompts equal the document
prompt (the quickstart's) keep their single field and their result ids.

The real-model tests use the offline all-MiniLM-L6-v2 weights under a registered spec that gives it a
classification and a clustering prompt, on the titles of 120 real Lens pizza records."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import asdict

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from conftest import lens_head, private_cache

N_RECORDS = 120
CLASSIFY_PROMPT = "Classify the patent into its technology field: "
CLUSTER_PROMPT = "Identify the technology field of the patent: "


# --------------------------------------------------------------------------- pure logic


def test_quickstart_models_have_no_task_prompts_of_their_own():
    from evalctl.indexers.index_layout import task_prompts
    from evalctl.models import get_model

    for model_id in ("all-minilm-l6-v2", "all-mpnet-base-v2"):
        model = get_model(model_id)
        for variant in model.prompt_variants:
            assert task_prompts(model, variant) == {}, (model_id, variant)


def test_instruction_models_get_task_fields_where_their_prompts_differ():
    from evalctl.indexers.index_layout import task_prompts, task_vectors, vector_field
    from evalctl.models import get_model

    kalm = get_model("kalm-gemma3-12b")  # default variant `patent`: both tasks instructed
    assert set(task_prompts(kalm, None)) == {"classification", "clustering"}
    assert task_vectors(kalm, None, {"clustering": ["TAC", "TAC"]}) == {
        "clustering": {"prompt": kalm.prompt_for("document", "clustering"), "views": ["TAC"]}}
    qwen = get_model("qwen3-embedding-0.6b")
    assert task_prompts(qwen, "instructed") == {}  # a query instruction only: label tasks read the document vectors
    assert task_prompts(qwen, "patent")["clustering"].startswith("Instruct: Identify the technology field")
    assert vector_field("TA") == "vec_TA" and vector_field("TA", "clustering") == "vec_TA__clustering"


# Identity hashes of the quickstart's label-task results (model all-minilm-l6-v2, its index name, views T and
# TA, label sets ipc3 and cpc_subclass, default settings), computed with the code before task vectors existed
# (commit d0647a2) for this index manifest: the document vectors must keep these ids.
QUICKSTART_MANIFEST = {"model": "all-minilm-l6-v2", "revision": "8b3219a92973c328a8e22fadcfa821b5dc75636a",
                       "prompt_variant": "plain", "corpus_hash": "abc123", "document_prompt": "", "views": ["T", "TA"],
                       "dim": 384}
# classify's ids changed once since, on purpose: the probe's solver (lbfgs, was liblinear) and tol joined its settings
BEFORE = {("classify", "T", "ipc3"): "06f5e9697d1f47d2", ("cluster", "T", "ipc3"): "5c4da823893644b6",
          ("classify", "T", "cpc_subclass"): "5896ef0379cce7bd", ("cluster", "T", "cpc_subclass"): "7abf8f52b132bddc",
          ("classify", "TA", "ipc3"): "7b3fa7cebc8ec3a2", ("cluster", "TA", "ipc3"): "6c7d1fc832490be3",
          ("classify", "TA", "cpc_subclass"): "38537218130820e4", ("cluster", "TA", "cpc_subclass"): "d88a070e6cf457ff"}


def test_document_vector_results_keep_their_ids():
    from evalctl.corpus.label_sets import load_label_sets
    from evalctl.evaluators.tasks.classification import ClassifySettings, result_identity
    from evalctl.evaluators.tasks.clustering import ClusterSettings
    from evalctl.indexers.index_contract import IndexState, vector_source
    from evalctl.results_store import identity_hash

    index, sets = "evalctl-qs-ops-pizza--all-minilm-l6-v2", load_label_sets()
    state = IndexState(index, QUICKSTART_MANIFEST, ())
    for (prefix, view, label_set), expected in BEFORE.items():
        task, settings = (("classification", ClassifySettings()) if prefix == "classify"
                          else ("clustering", ClusterSettings()))
        source = vector_source(state, view, task)  # the default, "task": MiniLM has no task prompt
        assert source.field == f"vec_{view}" and source.task is None
        identity = result_identity(prefix, index, QUICKSTART_MANIFEST, source, sets[label_set], asdict(settings))
        assert identity_hash(identity) == expected, (prefix, view, label_set)


# --------------------------------------------------------------------------- a real model on a real index


@pytest.fixture(scope="module")
def env(tmp_path_factory, os_client):
    """A private cache with a registered MiniLM spec that has task prompts, and 120 Lens records."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.models import get_model, registered_dir

    root = tmp_path_factory.mktemp("task-prompts")
    mp = private_cache(root)
    base = get_model("all-minilm-l6-v2")
    model_id = f"minilm-tasks-{uuid.uuid4().hex[:6]}"
    entry = {k: v for k, v in asdict(dataclasses.replace(
        base, id=model_id, default_variant="instructed",
        prompt_variants={"plain": {}, "instructed": {"classification": CLASSIFY_PROMPT, "clustering": CLUSTER_PROMPT}},
    )).items() if v is not None}
    entry["offline"] = {**entry["offline"], "packages": list(entry["offline"]["packages"])}
    registered_dir().mkdir(parents=True, exist_ok=True)
    (registered_dir() / f"{model_id}.yaml").write_text(yaml.safe_dump({"models": [entry]}, sort_keys=False))
    src = lens_head(root / "lens.csv", N_RECORDS)
    names = [f"tp-{uuid.uuid4().hex[:8]}", f"tp-run-{uuid.uuid4().hex[:8]}"]
    corpus = import_corpus("lens", [src], name=names[0]).corpus
    yield {"corpus": corpus, "model": get_model(model_id), "src": src, "run_corpus": names[1], "root": root}
    for name in names:
        os_client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)
    mp.undo()


def _reference(model, prompt: str, texts: list[str]) -> np.ndarray:
    """The model's own encoding of prompt + text (sentence-transformers, no evalctl prompt handling)."""
    from sentence_transformers import SentenceTransformer

    from evalctl.indexers.model_loader import offline_model_dir

    st = SentenceTransformer(str(offline_model_dir(model)), device="cpu")
    return st.encode([prompt + t for t in texts], normalize_embeddings=True, convert_to_numpy=True)


def _read(result, view_spec, corpus):
    """The vectors a result read (its export), with the texts of their rows."""
    from evalctl.evaluators.vectors.export import load_export

    exp = load_export(result.manifest["index"], result.manifest["vectors"]["field"][len("vec_"):])
    texts = {r.id: view_spec.render(r) for r in corpus.records()}
    return np.asarray(exp.vectors), [texts[i] for i in exp.ids]


@pytest.mark.models
def test_index_adds_task_fields_and_label_tasks_read_them(os_client, env):
    from evalctl.cli.main import cli
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name
    from evalctl.results_store import iter_results
    from evalctl.study.abstasks.registry import TASKS
    from evalctl.study.tasks.labels.tables import task_table

    corpus, model, runner = env["corpus"], env["model"], CliRunner()
    name, view = index_name(corpus.name, model.id), load_views()["T"]
    common = ["--corpus", corpus.name, "--model", model.id, "--view", "T"]

    # document vectors only: the clustering task then refuses to run on them unasked, naming the fix
    out = runner.invoke(cli, ["index", *common, "--vectors", "document"])
    assert out.exit_code == 0, out.output
    props = os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    assert "vec_T" in props and not any(p.startswith("vec_T__") for p in props)
    out = runner.invoke(cli, ["cluster", *common, "--label-set", "ipc3", "--seeds", "0,1"])
    assert out.exit_code == 2, out.output
    assert "has no clustering vectors for view T" in out.output and f"evalctl index --corpus {corpus.name}" in out.output

    # the default adds a field per task to the existing index, and loads it into every document
    out = runner.invoke(cli, ["index", *common])
    assert out.exit_code == 0, out.output
    assert "vec_T__clustering" in out.output and repr(CLUSTER_PROMPT) in out.output
    mapping = os_client.indices.get_mapping(index=name)[name]["mappings"]
    assert {"vec_T", "vec_T__classification", "vec_T__clustering"} <= set(mapping["properties"])
    assert mapping["_meta"]["task_vectors"] == {"classification": {"prompt": CLASSIFY_PROMPT, "views": ["T"]},
                                               "clustering": {"prompt": CLUSTER_PROMPT, "views": ["T"]}}
    n_titles = sum(1 for r in corpus.records() if view.render(r))
    for field in ("vec_T", "vec_T__classification", "vec_T__clustering"):
        assert os_client.count(index=name, body={"query": {"exists": {"field": field}}})["count"] == n_titles

    ids = {}
    for command, task, extra in (("cluster", "clustering", []), ("classify", "classification", ["--probe", "knn"])):
        for choice in ("task", "document"):
            before = {r.id for r in iter_results(task, corpus.name)}
            out = runner.invoke(cli, [command, *common, "--label-set", "ipc3", "--seeds", "0,1", *extra,
                                      "--vectors", choice])
            assert out.exit_code == 0, out.output
            # the new result (created_at is to the second: two fast probes can share it)
            (res,) = [r for r in iter_results(task, corpus.name) if r.id not in before]
            field = f"vec_T__{task}" if choice == "task" else "vec_T"
            assert res.manifest["vectors"]["field"] == field and field in out.output
            ids[(task, choice)] = res.id
            read, texts = _read(res, view, corpus)
            prompt = {"classification": CLASSIFY_PROMPT, "clustering": CLUSTER_PROMPT}[task] if choice == "task" else ""
            assert res.manifest["vectors"]["prompt"] == prompt
            assert np.abs(read - _reference(model, prompt, texts)).max() < 1e-5  # prompt + text, as the model encodes it
            other = _reference(model, "" if choice == "task" else CLUSTER_PROMPT, texts)
            assert np.abs(read - other).max() > 1e-2  # and not the other prompt's vectors
        assert ids[(task, "task")] != ids[(task, "document")]
        # the tables (and so the report) say which prompt made the vectors
        rows = task_table(task, TASKS.get(task).unit_metrics, corpus.name)
        assert {r["view"] for r in rows} == {"T", f"T ({task} prompt)"}


@pytest.mark.models
def test_study_runner_adds_only_the_fields_its_tasks_read(os_client, env):
    from evalctl.indexers.index_layout import index_name
    from evalctl.study.plan.runner import execute, plan
    from evalctl.study.spec.experiment import CorpusEntry, ExperimentSpec, ModelEntry
    from evalctl.study.tasks.labels.task import LabelTaskEntry

    corpus_name, model = env["run_corpus"], env["model"]
    spec = ExperimentSpec(
        name="task-prompts-test", corpora=(CorpusEntry(corpus_name, "lens", (str(env["src"]),)),),
        models=(ModelEntry(model.id),),
        tasks={"clustering": (LabelTaskEntry(corpus_name, views=("T",), label_sets=("ipc3",)),),
               "classification": (LabelTaskEntry(corpus_name, views=("T",), label_sets=("ipc3",), vectors="document"),)})
    report = execute(plan(spec), echo=lambda *_: None)
    assert not report.failed, report.failed
    name = index_name(corpus_name, model.id)
    props = os_client.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    assert "vec_T__clustering" in props and "vec_T__classification" not in props  # classification asked for documents
    again = execute(plan(spec), echo=lambda *_: None)
    assert {o.status for o in again.outcomes} == {"done"}  # the task field counts in the index step's check
