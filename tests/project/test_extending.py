"""docs/extending.md's recipes, proven: a toy fusion method (tests/toy_sum_method.py) and a toy import format
(tests/toy_tsv_format.py), each one module plus one registry entry (registered here at run time), reach the
library, the CLI choices, spec validation, the study plan and the report on the real node."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

import toy_sum_method
import toy_tsv_format
from retrieval_data import grants, write_citation_native

MODEL = "all-minilm-l6-v2"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.fixture
def sum_method():
    from evalctl.evaluators.retrieval.methods import METHODS

    METHODS.register("sum", toy_sum_method.METHOD)  # the one line: "sum": "<module>:METHOD" in METHODS
    yield
    METHODS.unregister("sum")


@pytest.fixture
def tsv_format():
    from evalctl.corpus.import_formats.registry import IMPORT_FORMATS

    IMPORT_FORMATS.register("tsv", toy_tsv_format.open_tsv)  # the one line: "tsv": "<module>:open_tsv"
    yield
    IMPORT_FORMATS.unregister("tsv")


def _spec(corpus: str, fmt: str, method: str):
    from evalctl.study.spec.experiment import CorpusEntry, ExperimentSpec, ModelEntry
    from evalctl.study.tasks.retrieval.task import RetrievalEntry

    return ExperimentSpec(name="toy", corpora=(CorpusEntry(corpus, fmt, ("x",)),), models=(ModelEntry(MODEL),),
                          tasks={"retrieval": (RetrievalEntry(corpus, views=("TA",), methods=("dense", method)),)},
                          source_path="toy.yaml")


@pytest.mark.opensearch
@pytest.mark.models
def test_toy_fusion_method_runs_natively_everywhere(os_client, private_cache, sum_method):
    from evalctl.cli.main import cli
    from evalctl.corpus.importer import import_corpus
    from evalctl.evaluators.retrieval.methods import fused_methods
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import validate
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels, load_qrels
    from evalctl.config_files import SpecError
    from evalctl.corpus.views import load_views

    name = f"toy-{uuid.uuid4().hex[:8]}"
    corpus = import_corpus("native", [write_citation_native(private_cache / "cit.jsonl")], name=name).corpus
    build_citation_qrels(corpus, QrelsSpec(dev_fraction=0.0))
    index_corpus(os_client, corpus, [load_views()["TA"]], get_model(MODEL), progress=False)
    try:
        opts = RetrievalOptions(progress=False, batch_size=4)
        runs = {m: retrieve(os_client, RetrievalSpec(corpus=name, view="TA", method=m, model=MODEL, split=None, k=20),
                            opts) for m in ("bm25", "dense", "sum")}
        bm25, dense, fused = (runs[m].ranking for m in ("bm25", "dense", "sum"))
        excl = load_qrels(corpus, "citations").exclusions()
        assert set(fused) == set(excl)
        for q, docs in fused.items():
            # the engine summed the two clauses: every scored document is the dense run's, its score BM25 + knn
            assert {d for d, _ in docs} == {d for d, _ in dense[q]} and not {d for d, _ in docs} & excl[q]
            b, v = dict(bm25[q]), dict(dense[q])
            for d, s in docs:
                assert s == pytest.approx(b.get(d, 0.0) + v[d], rel=1e-5), (q, d)
        m = runs["sum"].manifest
        assert (m["method"], m["fusion_mode"], m["pipeline"], m["bm25_max_terms"]) == ("sum", "native", None, 1000)
        assert "query_prompt" in m and runs["sum"].label == f"sum:{MODEL}:TA"

        # the CLI choice, spec validation, the study plan and the report's fusion sections derive from the registry
        res = CliRunner().invoke(cli, ["retrieve", "--method", "sum", "--corpus", name, "--model", MODEL, "--view", "TA",
                                       "--split", "all", "--k", "20"])
        assert res.exit_code == 0, res.output
        assert f"run {runs['sum'].id}" in res.output  # the same identity: found, not searched again
        validate(_spec(name, "native", "sum"))
        with pytest.raises(SpecError, match=r"retrieval\[0\]: unknown method 'nope'"):
            validate(_spec(name, "native", "nope"))
        assert f"retrieve {name} {MODEL} TA sum" in [s.key for s in plan(_spec(name, "native", "sum"))]
        assert fused_methods() == ["hybrid", "rrf", "hybrid-maxp", "rrf-maxp", "sum"]
        with pytest.raises(Exception, match="no client-side fusion"):
            retrieve(os_client, RetrievalSpec(corpus=name, view="TA", method="sum", model=MODEL, split=None, k=20,
                                              fusion_mode="client"), opts)
    finally:
        os_client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_toy_import_format_imports_through_the_cli(private_cache, tsv_format):
    from evalctl.cli.main import cli
    from evalctl.corpus.store import load_corpus
    from evalctl.study.plan.loading import validate
    from evalctl.config_files import SpecError

    rows = grants(5)
    path = private_cache / "toy.tsv"
    path.write_text("".join(f"{r['grant_id']}\t{r['patent_title']}\t{' '.join(r['abstract'].split())}\n"
                            for r in rows) + "no tabs here\n", encoding="utf-8")
    res = CliRunner().invoke(cli, ["corpus", "import", str(path), "--format", "tsv", "--name", "toy-tsv"])
    assert res.exit_code == 0, res.output
    corpus = load_corpus("toy-tsv")
    assert corpus.manifest["source"]["format"] == "tsv" and corpus.manifest["problems"] == {"malformed_row": 1}
    assert [r.title for r in corpus.records()] == [r["patent_title"] for r in rows]
    validate(_spec("toy-tsv", "tsv", "bm25"))
    with pytest.raises(SpecError, match="corpus toy-tsv: unknown format 'nope'"):
        validate(_spec("toy-tsv", "nope", "bm25"))


def test_unregistered_names_are_refused_with_the_known_ones():
    from evalctl.cli.main import cli

    res = CliRunner().invoke(cli, ["retrieve", "--method", "sum", "--view", "TA"])
    assert res.exit_code == 2 and "'sum' is not one of 'bm25', 'dense', 'hybrid', 'rrf', 'exact'" in res.output


def test_label_source_and_clustering_rule_are_registry_entries():
    """A label set can read a registered source (here: the publication authority), and clustering can pick
    gold classes by a registered rule; unknown names are refused naming the known ones."""
    from evalctl.evaluators.tasks.clustering import RULES, ClusterSettings, single_labels
    from evalctl.corpus.label_sets import LABEL_SOURCES, LabelSetSpec, LabelSource
    from evalctl.corpus.patent_record import PatentRecord
    from evalctl.config_files import SpecError, build

    LABEL_SOURCES.register("jurisdiction", LabelSource(lambda r, level: [r.jurisdiction] if r.jurisdiction else [],
                                                       levelled=False))
    RULES.register("last", lambda labels, support: labels[-1])
    try:
        spec = build(LabelSetSpec, {"name": "j", "source": "jurisdiction"}, "label_sets.yaml: label_sets.j")
        assert spec.labels_of(PatentRecord(id="EP1", jurisdiction="EP")) == ["EP"]
        with pytest.raises(SpecError, match="cpc/ipc need a level"):
            build(LabelSetSpec, {"name": "j", "source": "jurisdiction", "level": "class"}, "label_sets.yaml")
        assert single_labels([["A21D", "H05B"]], {"A21D": 1, "H05B": 9}, ClusterSettings(rule="last").rule) == ["H05B"]
    finally:
        LABEL_SOURCES.unregister("jurisdiction")
        RULES.unregister("last")
    with pytest.raises(SpecError, match="unknown source 'jurisdiction'; one of cpc, ipc, labels"):
        build(LabelSetSpec, {"name": "j", "source": "jurisdiction"}, "label_sets.yaml")
    with pytest.raises(ValueError, match="unknown rule 'last'; known: first, most_frequent"):
        ClusterSettings(rule="last")


def test_every_registered_entry_resolves():
    """Entries given as "module:attribute" paths import (a moved module must update its registry line)."""
    from evalctl.evaluators.tasks.clustering import RULES
    from evalctl.evaluators.retrieval.methods import METHODS, RetrievalMethod
    from evalctl.corpus.import_formats.registry import IMPORT_FORMATS
    from evalctl.corpus.label_sets import LABEL_SOURCES, LabelSource

    assert all(isinstance(m, RetrievalMethod) and m.name == name for name, m in METHODS.items())
    assert all(callable(opener) for _, opener in IMPORT_FORMATS.items())
    assert all(isinstance(s, LabelSource) for _, s in LABEL_SOURCES.items())
    assert all(callable(rule) for _, rule in RULES.items())
    assert METHODS.names() == ("bm25", "dense", "hybrid", "rrf", "exact", "dense-maxp", "exact-maxp", "dense-sump",
                               "dense-avgp", "bm25-maxp", "hybrid-maxp", "rrf-maxp")
