"""The index contract (indexers/index_contract.py) on the real node: one set of checks and messages behind
retrieval, vector read-back, `index verify` and the study runner's index step."""

from __future__ import annotations

import uuid

import pytest

from retrieval_data import write_citation_native

MODEL = "all-minilm-l6-v2"


def test_tolerance_follows_the_vector_encoder():
    from evalctl.indexers.index_contract import FP16_TOLERANCE, REENCODE_TOLERANCE, IndexState

    assert IndexState("i", {"encoder": "flat"}, ()).tolerance == REENCODE_TOLERANCE
    assert IndexState("i", {"model": "m"}, ()).tolerance == REENCODE_TOLERANCE  # older manifests: flat
    assert IndexState("i", {"encoder": "sq_fp16"}, ()).tolerance == FP16_TOLERANCE


@pytest.mark.opensearch
def test_every_reader_applies_the_same_contract(os_client, tmp_path, monkeypatch):
    from evalctl.corpus.importer import import_corpus
    from evalctl.evaluators.vectors.export import ReadbackError, ViewVectors, export_vectors
    from evalctl.evaluators.retrieval.retrieve import RetrievalError, RetrievalSpec, resolve_index
    from evalctl.study.plan.runner import index_step
    from evalctl.indexers.index_contract import IndexUnavailable, inspect_index, open_index
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.indexers.index_verify import verify_index
    from evalctl.models import get_model
    from evalctl.corpus.views import load_views

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    name, views = f"contract-{uuid.uuid4().hex[:8]}", load_views()
    source = write_citation_native(tmp_path / "cit.jsonl")
    corpus = import_corpus("native", [source], name=name).corpus
    try:
        missing = inspect_index(os_client, corpus, MODEL, ["TA"])
        assert not missing.exists and missing.problems == (
            f"index {missing.name} does not exist; build it with `evalctl index --corpus {name} --model {MODEL} "
            "--view TA`",)
        assert verify_index(os_client, corpus, views, get_model(MODEL)).problems[0].startswith(
            f"index {missing.name} does not exist")

        index_corpus(os_client, corpus, [views["T"]], None, progress=False)  # BM25-only, view T
        state = open_index(os_client, corpus, None, ["T"])
        assert state.manifest["views"] == ["T"] and state.manifest["corpus_hash"] == corpus.content_hash
        assert index_step(name, None, None, ("T",)).is_done()
        no_view = f"index {state.name} has no view TA (has T); add it with `evalctl index --corpus {name} --view TA`"
        with pytest.raises(RetrievalError) as e:
            resolve_index(os_client, corpus, RetrievalSpec(corpus=name, view="TA", method="bm25"))
        assert str(e.value) == no_view
        with pytest.raises(ReadbackError) as e:
            export_vectors(os_client, ViewVectors(corpus, views["TA"], None), progress=False)
        assert str(e.value) == no_view
        with pytest.raises(IndexUnavailable):
            open_index(os_client, corpus, None, ["T", "TA"])
        assert not index_step(name, None, None, ("T", "TA")).is_done()

        # the same name, other records: every reader refuses the stale index
        source.write_text("".join(source.read_text().splitlines(keepends=True)[:-1]))
        changed = import_corpus("native", [source], name=name, overwrite=True).corpus
        stale = (f"index {state.name} was built from corpus hash {corpus.content_hash}, corpus {name} now has "
                 f"{changed.content_hash}: re-index it")
        with pytest.raises(RetrievalError, match="re-index it") as e:
            resolve_index(os_client, changed, RetrievalSpec(corpus=name, view="T", method="bm25"))
        assert str(e.value) == stale
        assert stale in verify_index(os_client, changed, views).problems
        assert not index_step(name, None, None, ("T",)).is_done()
    finally:
        os_client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)
