"""Reading vectors back from a real index: 60 real Lens pizza records (titles, CPC/IPC codes) indexed
with the offline MiniLM model on view T. The export must hold exactly the indexed vectors, id by id,
and the classify / cluster / tables commands must run end to end on it."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import lens_head, private_cache

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

N_RECORDS = 60


@pytest.fixture(scope="module")
def env(tmp_path_factory, os_client):
    """A private cache, a corpus of the first 60 Lens rows, and its MiniLM index on view T."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.corpus.views import load_views

    root = tmp_path_factory.mktemp("readback")
    mp = private_cache(root)
    src = lens_head(root / "lens.csv", N_RECORDS)
    name = f"readback-test-{uuid.uuid4().hex[:8]}"
    corpus = import_corpus("lens", [src], name=name).corpus
    model, view = get_model("all-minilm-l6-v2"), load_views()["T"]
    index_corpus(os_client, corpus, [view], model, progress=False)
    yield {"corpus": corpus, "model": model, "view": view, "root": root}
    os_client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)
    mp.undo()


def test_exported_vectors_equal_indexed_ones_id_by_id(os_client, env):
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.indexers.index_layout import index_name
    from evalctl.evaluators.vectors.export import ViewVectors, export_vectors

    corpus, model, view = env["corpus"], env["model"], env["view"]
    # pages of 7 documents: the point-in-time / search_after paging crosses many page boundaries
    rep = export_vectors(os_client, ViewVectors(corpus, view, model.id), page_docs=7, progress=False)
    exp = rep.export
    records = {r.id: r for r in corpus.records() if view.render(r)}
    assert not rep.reused
    assert exp.ids == sorted(records)  # every document once, in doc_id order
    assert exp.vectors.shape == (len(records), model.dim) and exp.vectors.dtype == np.float32
    assert exp.manifest["count"] == len(records) and exp.manifest["dim"] == model.dim
    assert exp.manifest["index_manifest"]["corpus_hash"] == corpus.manifest["content_hash"]

    name = index_name(corpus.name, model.id)
    docs = os_client.mget(index=name, body={"ids": exp.ids}, _source_includes=["vec_T", "cpc", "ipc", "labels"])["docs"]
    for i, doc in enumerate(docs):
        # vectors through script fields: the same float32 bits as the document's _source, row by row
        assert np.array_equal(exp.vectors[i], np.asarray(doc["_source"]["vec_T"], dtype=np.float32)), exp.ids[i]
        # codes from the corpus: what the index document holds, in its order
        assert exp.codes[i] == {k: doc["_source"].get(k, []) for k in ("cpc", "ipc", "labels")}, exp.ids[i]
        assert exp.codes[i]["cpc"] == [c.code for c in records[exp.ids[i]].cpc]
    cached = get_or_encode(model, "document", "T", exp.ids, [view.render(records[i]) for i in exp.ids],
                           progress=False)
    assert np.array_equal(np.asarray(exp.vectors), cached)  # bit-identical to what was encoded
    assert any("max |diff| 0" in c for c in rep.checks)


def test_export_is_reused_until_the_index_changes(os_client, env):
    from evalctl.evaluators.vectors.export import ViewVectors, export_vectors

    corpus, model, view = env["corpus"], env["model"], env["view"]
    first = export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False)
    again = export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False)
    assert again.reused and again.export.ids == first.export.ids
    # the index's cost measured again (as a load that adds documents does) changes nothing an export holds
    from evalctl.indexers.index_cost import measure_index_cost
    from evalctl.indexers.index_loader import read_manifest

    name = first.export.manifest["index"]
    meta = read_manifest(os_client, name)
    remeasured = {**meta, "cost": {**measure_index_cost(os_client, name, meta), "measured_at": "later"}}
    os_client.indices.put_mapping(index=name, body={"_meta": remeasured})
    assert export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False).reused
    forced = export_vectors(os_client, ViewVectors(corpus, view, model.id), force=True, progress=False)
    assert not forced.reused and np.array_equal(np.asarray(forced.export.vectors), np.asarray(first.export.vectors))


def test_commands_end_to_end_and_too_few_examples_reported(os_client, env):
    from evalctl.cli.main import cli
    from evalctl.results_store import iter_results

    corpus, runner = env["corpus"], CliRunner()
    common = ["--corpus", corpus.name, "--model", "all-minilm-l6-v2", "--view", "T"]
    out = runner.invoke(cli, ["vectors", "export", *common])
    assert out.exit_code == 0, out.output
    assert "corpus records rendering view T (same ids)" in out.output

    out = runner.invoke(cli, ["classify", *common, "--label-set", "cpc_subclass", "--min-support", "3",
                              "--seeds", "0,1,2"])
    assert out.exit_code == 0, out.output
    assert "logreg" in out.output and "knn" in out.output
    res = next(iter_results("classification", corpus.name))
    m = res.manifest
    assert m["settings"]["seeds"] == [0, 1, 2] and m["label_set"]["min_support"] == 3 and m["sklearn"]
    splits = json.loads(res.file("splits.json").read_text())
    assert [s["seed"] for s in splits] == [0, 1, 2] and all(s["test_ids"] for s in splits)

    out = runner.invoke(cli, ["cluster", *common, "--label-set", "cpc_subclass", "--min-support", "3",
                              "--seeds", "0,1", "--levels", "section,subclass"])
    assert out.exit_code == 0, out.output
    cl = next(iter_results("clustering", corpus.name)).manifest
    assert cl["rule"] == "first" and set(cl["summary"]) == {"section", "subclass"}

    for task, metric in (("classification", "micro_f1"), ("clustering", "v_measure")):
        out = runner.invoke(cli, ["tables", "--task", task, "--corpus", corpus.name])
        assert out.exit_code == 0 and metric in out.output and "all-minilm-l6-v2" in out.output, out.output

    # The landscape label set has no labels on a Lens import: a clear message, no traceback.
    out = runner.invoke(cli, ["classify", *common, "--label-set", "landscape"])
    assert out.exit_code == 2 and out.exception.__class__ is SystemExit
    assert "label set 'landscape'" in out.output and "0 keep a label" in out.output


@pytest.mark.parametrize("damage", ["rows shuffled", "ids cut short", "vectors truncated", "manifest truncated"])
def test_a_damaged_export_is_exported_again_never_reused(os_client, env, damage):
    """An export whose files differ from the digests its manifest recorded is refused (named in the
    checks) and exported again: the probe gets the index's vectors, never the damaged ones."""
    from evalctl.evaluators.vectors.export import ViewVectors, export_vectors

    corpus, model, view = env["corpus"], env["model"], env["view"]
    good = export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False).export
    ids, vectors = list(good.ids), np.array(good.vectors)
    path = good.path
    del good  # the memory map
    if damage == "rows shuffled":
        np.save(path / "vectors.npy", vectors[np.random.default_rng(0).permutation(len(vectors))])
    elif damage == "ids cut short":
        (path / "ids.txt").write_text("\n".join(ids[:10]) + "\n")
    else:
        victim = path / ("vectors.npy" if damage == "vectors truncated" else "manifest.json")
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    rep = export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False)
    assert not rep.reused and rep.checks[0].startswith("stored export refused, exported again: ")
    assert str(path / {"ids cut short": "ids.txt", "manifest truncated": "manifest.json"}.get(damage, "vectors.npy")) \
        in rep.checks[0]
    assert rep.export.ids == ids and np.array_equal(np.asarray(rep.export.vectors), vectors)
    assert export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False).reused  # the new one is whole


def test_missing_documents_are_reported(os_client, env):
    """Runs last: removes one document from the index, which the export must notice."""
    from evalctl.evaluators.vectors.export import ReadbackError, ViewVectors, export_vectors
    from evalctl.indexers.index_layout import index_name

    corpus, model, view = env["corpus"], env["model"], env["view"]
    name = index_name(corpus.name, model.id)
    gone = sorted(r.id for r in corpus.records())[3]
    os_client.delete(index=name, id=gone, refresh=True)
    with pytest.raises(ReadbackError, match=f"1 missing \\(e.g. \\['{gone}'\\]\\)"):
        export_vectors(os_client, ViewVectors(corpus, view, model.id), progress=False)
