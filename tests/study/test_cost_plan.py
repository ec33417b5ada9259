"""The cost plan of `evalctl run SPEC --dry-run` (platform/study/plan/cost_plan.py): its settings refused where
wrong; the quickstart's plan on its imported corpus (the OPS pizza dataset) priced record by record,
checked against the texts themselves and OpenSearch's HNSW formula; a text-only index's size estimate
against the index evalctl builds of it on the real node; and a corpus not imported yet, priced from the
size given on the command line."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from conftest import USPTO, private_cache
from real_data import OPS

MODEL = "all-minilm-l6-v2"


def test_settings_and_sizes_are_refused_naming_what_is_wrong():
    from evalctl.errors import BadInput
    from evalctl.config_files import SpecError
    from evalctl.study.plan.cost_plan import load_cost_settings, parse_sizes

    assert load_cost_settings(gpu="A100", utilisation=0.25).flops_per_s == 312e12 * 0.25
    with pytest.raises(SpecError, match=r"configs/cost_plan.yaml.*gpu 'B300': not one of H200"):
        load_cost_settings(gpu="B300")
    with pytest.raises(SpecError, match=r"utilisation 1.5: must be above 0 and at most 1"):
        load_cost_settings(utilisation=1.5)
    assert parse_sizes(("landscape=113000", "dapfam=45000")) == {"landscape": 113000, "dapfam": 45000}
    for bad in ("landscape", "landscape=1e5", "=10", "landscape=0"):
        with pytest.raises(BadInput, match=f"--corpus-size '{bad}'"):
            parse_sizes((bad,))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quickstart spec, planned, with its corpus imported (nothing indexed or encoded)."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment

    mp = private_cache(tmp_path_factory.mktemp("cost"))
    spec = load_experiment("quickstart")
    corpus = import_corpus("ops", [OPS], name=spec.corpora[0].name).corpus
    yield spec, plan(spec), corpus
    mp.undo()


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_an_imported_corpus_is_priced_from_its_own_texts(quickstart):
    from evalctl.corpus.views import load_views
    from evalctl.models import get_model
    from evalctl.study.plan.cost_plan import cost_plan

    spec, steps, corpus = quickstart
    p = cost_plan(spec, steps)
    (row,) = [r for r in p.rows if r.model == MODEL]
    assert row.views == ("A", "T", "TA") and row.measured and not p.unknown
    model, cpt = get_model(MODEL), p.settings.chars_per_token
    texts = {v: [t for r in corpus.records() if (t := load_views()[v].render(r))] for v in row.views}
    # MiniLM has one prompt for every task (none), so one vector per view and record that renders it, and one per
    # passage of the spec's TA setting (64-token windows every 48: the last ends at the text's end)
    assert [(v, p.name) for v, p in row.passages] == [("TA", "w64s48")]
    windows = [(1 if n <= 64 else math.ceil((n - 64) / 48) + 1, min(n, 64))
               for n in (math.ceil(len(t) / cpt) for t in texts["TA"])]
    assert row.vectors == sum(map(len, texts.values())) + sum(c for c, _ in windows) and row.docs == len(corpus)
    assert row.tokens == (sum(min(math.ceil(len(t) / cpt), model.max_seq_length) for ts in texts.values() for t in ts)
                          + sum(c * n for c, n in windows))
    assert row.cache_bytes == row.vectors * (4 * 384 + 32)
    assert row.graph_bytes == pytest.approx(row.vectors * 1.1 * (4 * 384 + 8 * 16))
    assert row.gpu_hours == pytest.approx(2 * model.params_m * 1e6 * row.tokens / (989e12 * 0.5) / 3600)
    # Lucene's sq encoder keeps one byte a component in the graph
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.study.plan.cost_plan import Pricing, corpus_lengths, index_cost
    from evalctl.study.spec.step_ids import IndexId

    lengths = corpus_lengths(row.corpus, list(row.views), p.settings, {})
    sq = index_cost(IndexId(row.corpus, MODEL, row.views, row.passages), model, None, lengths,
                    Pricing(p.settings, load_index_settings(encoder="sq")))
    assert sq.graph_bytes == pytest.approx(row.vectors * 1.1 * (384 + 8 * 16)) and sq.tokens == row.tokens
    # the tuned models are priced as their base; the plan's total is the sum of its rows
    tuned = [r for r in p.rows if r.model and r.model.startswith(f"{MODEL}+")]
    assert len(tuned) == 2 and all(r.dim == 384 for r in tuned)
    total = next(line for line in p.lines() if line.startswith("  total:"))
    assert f"{sum(r.gpu_hours for r in p.rows):.1f} GPU-hours on H200" in total


@pytest.mark.opensearch
def test_a_text_index_estimate_is_near_the_index_built(os_client, quickstart, tmp_path, monkeypatch):
    """The text rates of configs/cost_plan.yaml (measured on the OPS sample's titles and abstracts) against an
    index evalctl builds of other patents: the USPTO 2019 grants (dataset uspto-grants-2019), with their claims."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.study.plan.cost_plan import cost_plan
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment

    corpus = import_corpus("uspto", [USPTO], name="uspto-cost").corpus
    spec_file = tmp_path / "bm25.yaml"
    spec_file.write_text(f"name: bm25-cost\ncorpora:\n  - {{name: {corpus.name}, format: uspto, sources: [{USPTO}]}}\n"
                         f"retrieval:\n  - {{corpus: {corpus.name}, views: [T, A, C, TAC], methods: [bm25]}}\n")
    spec = load_experiment(str(spec_file))
    (row,) = cost_plan(spec, plan(spec)).rows
    assert (row.model, row.views, row.vectors, row.docs) == (None, ("A", "C", "T", "TAC"), 0, len(corpus))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", "cost-plan-test")
    rep = index_corpus(os_client, corpus, [load_views()[v] for v in row.views], None, progress=False)
    try:
        built = os_client.indices.stats(index=rep.index, metric="store")["indices"][rep.index]["primaries"]
        size = built["store"]["size_in_bytes"]
        print(f"text index of {len(corpus)} USPTO grants (T, A, C, TAC): estimated {row.index_bytes:,.0f} B, "
              f"built {size:,} B")
        assert 0.67 < row.index_bytes / size < 1.5
    finally:
        os_client.indices.delete(index=rep.index, ignore_unavailable=True)


def test_dry_run_prices_a_corpus_not_imported_from_the_size_given(tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:9")  # the plan itself needs no node
    spec = tmp_path / "big.yaml"
    spec.write_text("name: big\ncorpora:\n  - {name: big, format: lens, sources: [landscape.csv]}\n"
                    f"models:\n  - {{id: {MODEL}}}\nretrieval:\n  - {{corpus: big, views: [T, TA], methods: [dense]}}\n")
    run = CliRunner().invoke(cli, ["run", str(spec), "--dry-run", "--corpus-size", "big=113000", "--gpu", "L4"])
    assert run.exit_code == 0, run.output
    (line,) = [x for x in run.output.splitlines() if x.startswith(f"  big {MODEL} [T,TA]")]
    # typical lengths (configs/cost_plan.yaml): a title of 55 characters, title + "\n" + abstract of 671
    assert line.split()[3:6] == ["113,000", "226,000x384", f"{113000 * (11 + 135) / 1e6:.1f}M"]
    assert "GPU L4 (121 TFLOP/s dense bf16) at 50% utilisation" in run.output
    assert "big: not imported, priced as 113,000 records of typical length" in run.output
    bare = CliRunner().invoke(cli, ["run", str(spec), "--dry-run"])
    assert bare.exit_code == 0 and "big: not imported and of unknown size, left out: give --corpus-size big=N" \
        in bare.output
    bad = CliRunner().invoke(cli, ["run", str(spec), "--dry-run", "--gpu", "B300"])
    assert bad.exit_code == 2 and "gpu 'B300': not one of" in bad.output
