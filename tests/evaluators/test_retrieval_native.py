"""Native retrieval on the real node with the offline MiniLM model, on corpora made of real USPTO
grants (tests/retrieval_data.py): self/family exclusion, empty-result queries, run files and
manifests, fusion values on a toy index, ANN vs exact, the comparison table and its IN/OUT and
jurisdiction breakdowns, the dev-tuned fusion sweep, and native hybrid/RRF where neural-search exists."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from click.testing import CliRunner

from retrieval_data import NONSENSE_QUERY, write_citation_native, write_known_item_beir
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.output_folder import MARK

pytestmark = [pytest.mark.opensearch, pytest.mark.models]
MODEL = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def env(tmp_path_factory, os_client):
    """Private cache; a known-item BEIR corpus (30 grants, view A) and a hand-linked citation corpus
    (11 grants, view TA), both indexed with MiniLM."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels
    from evalctl.corpus.views import load_views

    root = tmp_path_factory.mktemp("retrieval")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    tag = uuid.uuid4().hex[:8]
    ki = import_corpus("beir", [write_known_item_beir(root / "beir", 30)], name=f"ki-{tag}").corpus
    cit = import_corpus("native", [write_citation_native(root / "cit.jsonl")], name=f"cit-{tag}").corpus
    build_citation_qrels(cit, QrelsSpec(dev_fraction=0.0))
    views, model = load_views(), get_model(MODEL)
    index_corpus(os_client, ki, [views["A"]], model, progress=False)
    index_corpus(os_client, cit, [views["TA"]], model, progress=False)
    yield {"ki": ki.name, "cit": cit.name}
    for c in (ki.name, cit.name):
        os_client.indices.delete(index=f"{corpus_alias(c)}--*", ignore_unavailable=True)
    mp.undo()


def _retrieve(client, corpus, method, view, **kw):
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.evaluators.fusion.settings import FusionSpec

    kw.setdefault("qrels", "given" if corpus.startswith("ki-") else "citations")
    fusion = kw.pop("fusion", FusionSpec(technique="rrf" if method == "rrf" else "linear"))
    spec = RetrievalSpec(corpus=corpus, view=view, method=method, model=MODEL, fusion=fusion, **kw)
    return retrieve(client, spec, RetrievalOptions(progress=False, batch_size=4))


def test_self_and_family_are_excluded(os_client, env):
    from evalctl.evaluators.retrieval.query_bodies import knn_body
    from evalctl.indexers.index_layout import index_name, text_field
    from evalctl.corpus.qrels import load_qrels

    excl = load_qrels(env["cit"], "citations").exclusions()
    assert excl["US9000001"] == {"US9000001", "EP3000002"}
    idx = index_name(env["cit"], MODEL)
    title = os_client.get(index=idx, id="US9000001")["_source"]["title"]
    raw = os_client.search(index=idx, body={"size": 2, "query": {"match": {text_field("TA"): title}}})["hits"]["hits"]
    assert {h["_id"] for h in raw} == {"US9000001", "EP3000002"}  # without exclusion: self and family on top
    for method in ("bm25", "dense", "exact"):
        run = _retrieve(os_client, env["cit"], method, "TA", split=None, k=20)
        assert set(run.ranking) == set(excl)  # every query is in the run
        for q, docs in run.ranking.items():
            ids = {d for d, _ in docs}
            assert not ids & excl[q], (method, q)
            assert len(ids) == 11 - len(excl[q])  # the filter leaves every other document
    assert knn_body("vec_TA", [0.0], 3, excl["US9000001"])["query"]["knn"]["vec_TA"]["filter"]


def test_known_item_qrels_find_each_patent_from_its_title(os_client, env):
    """Known-item qrels built from the corpus: title queries (query view T) against TA documents find
    each grant first; the family twin with the same text is excluded, the known item is not."""
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.qrels import QrelsSpec, build_qrels

    build_qrels(load_corpus(env["cit"]), QrelsSpec(name="ki", source="known_item", dev_fraction=0.0), overwrite=True)
    for method in ("bm25", "dense", "exact"):
        run = _retrieve(os_client, env["cit"], method, "TA", query_view="T", qrels="ki", k=5)
        assert len(run.ranking) == 11 and run.manifest["query_view"] == "T"
        assert run.label == f"{method}:{MODEL}:T→TA" and run.id.startswith(f"{method}-{MODEL}-T_TA-test-")
        assert all(docs[0][0] == q for q, docs in run.ranking.items()), method
        assert "EP3000002" not in {d for d, _ in run.ranking["US9000001"]}
        assert "US9000001" not in {d for d, _ in run.ranking["EP3000002"]}


def test_empty_result_query_stays_in_the_run(os_client, env):
    bm25 = _retrieve(os_client, env["ki"], "bm25", "A", query_view="A")
    assert bm25.ranking[NONSENSE_QUERY[0]] == []
    assert bm25.manifest["n_empty"] >= 1
    dense = _retrieve(os_client, env["ki"], "dense", "A", query_view="A")
    assert set(dense.ranking) == set(bm25.ranking) and len(dense.ranking[NONSENSE_QUERY[0]]) == 30


def test_run_files_and_manifest(os_client, env):
    from ranx import Run

    run = _retrieve(os_client, env["ki"], "dense", "A", k=5)
    m = run.manifest
    assert m["kind"] == "run" and m["method"] == "dense" and m["k"] == 5 and m["split"] == "test"
    assert m["index_manifest"]["model"] == MODEL and m["query_set"].startswith("sha256:") and m["code_version"]
    assert m["query_prompt"] == "" and m["took_ms"] >= 0
    lines = run.result.file("run.trec").read_text().splitlines()
    assert len(lines) == 5 * len(run.ranking) and lines[0].split()[3] == "1"
    ranx_run = Run.from_file(str(run.result.file("run.json")), kind="json")
    assert set(ranx_run.keys()) == set(run.ranking)
    again = _retrieve(os_client, env["ki"], "dense", "A", k=5)
    assert again.id == run.id  # identity-addressed: found, not searched again


def test_fusion_values_on_a_toy_index(os_client, index_name):
    """BM25 and knn through search_all on a 4-document index, fused client-side: the fused scores
    equal min-max + weighted sum and RRF computed by hand from the engine's own scores."""
    from evalctl.evaluators.fusion.client_fusion import fuse_rankings
    from evalctl.evaluators.retrieval.query_bodies import bm25_body, knn_body
    from evalctl.evaluators.retrieval.params import Sending
    from evalctl.evaluators.retrieval.retrieve import search_all
    from evalctl.evaluators.scoring.runs import ranked
    from evalctl.evaluators.fusion.settings import FusionSpec

    docs = {"d1": ("wheelchair wheelchair ramp", [1, 0, 0, 0]), "d2": ("wheelchair lift", [0.6, 0.8, 0, 0]),
            "d3": ("stair lift", [0, 1, 0, 0]), "d4": ("pizza oven", [0, 0, 1, 0])}
    os_client.indices.create(index=index_name, body={
        "settings": {"index": {"knn": True, "number_of_shards": 1}},
        "mappings": {"properties": {"text": {"type": "text"}, "vec": {
            "type": "knn_vector", "dimension": 4,
            "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}}}}})
    for d, (text, vec) in docs.items():
        os_client.index(index=index_name, id=d, body={"text": text, "vec": vec})
    os_client.indices.refresh(index=index_name)
    (bm25_hits, dense_hits), stats, _ = search_all(
        os_client, index_name, [bm25_body("text", "wheelchair lift", 3, {"d4"}), knn_body("vec", [1, 0, 0, 0], 3, {"d4"})],
        Sending(batch_size=1))
    bm25, dense = {"q": ranked(bm25_hits)}, {"q": ranked(dense_hits)}
    assert stats.took_ms >= 0 and [d for d, _ in dense["q"]] == ["d1", "d2", "d3"]
    assert dict(dense["q"]) == pytest.approx({"d1": 1.0, "d2": 0.8, "d3": 0.5})  # (1 + cos) / 2
    assert {d for d, _ in bm25["q"]} == {"d1", "d2", "d3"}

    b, v = dict(bm25["q"]), dict(dense["q"])

    def mm(s):
        lo, hi = min(s.values()), max(s.values())
        return {d: (x - lo) / (hi - lo) for d, x in s.items()}

    nb, nv = mm(b), mm(v)
    expected = {d: 0.4 * nb.get(d, 0) + 0.6 * nv.get(d, 0) for d in docs if d in b or d in v}
    fused = fuse_rankings([bm25, dense], FusionSpec(dense_weight=0.6), depth=3)["q"]
    assert dict(fused) == pytest.approx(expected)
    assert [d for d, _ in fused] == [d for d, _ in ranked(expected.items())]
    rank_b = {d: i for i, (d, _) in enumerate(bm25["q"], 1)}
    rank_v = {d: i for i, (d, _) in enumerate(dense["q"], 1)}
    rrf = dict(fuse_rankings([bm25, dense], FusionSpec(technique="rrf"), depth=3)["q"])
    assert rrf == pytest.approx({d: sum(1 / (60 + r[d]) for r in (rank_b, rank_v) if d in r) for d in rrf})


@pytest.mark.neural_search
@pytest.mark.parametrize("method,fusion", [("hybrid", "linear"), ("rrf", "rrf")])
def test_native_and_client_fusion_agree_but_for_explained_cases(os_client, env, method, fusion):
    """Native pipelines and ranx fusion of the same two runs: every query whose top 10 differ is explained
    (the plugin's 0.001 floor / single-valued lists, or tied scores), and the runs score alike."""
    from evalctl.evaluators.fusion.parity import parity
    from evalctl.evaluators.scoring.metrics import evaluate_run
    from evalctl.evaluators.fusion.settings import FusionSpec

    spec = FusionSpec(technique=fusion, dense_weight=0.6 if fusion == "linear" else 0.5)
    runs = {m: _retrieve(os_client, env["ki"], m, "A", k=30) for m in ("bm25", "dense")}
    native = _retrieve(os_client, env["ki"], method, "A", fusion=spec, k=30)
    client = _retrieve(os_client, env["ki"], method, "A", fusion=spec, k=30, fusion_mode="client")
    assert native.manifest["pipeline"] and native.label.startswith(f"{method}:")
    assert client.label.startswith(f"{method}/client:")
    ndcg = {r.id: evaluate_run(r).per_query["ndcg@10"] for r in (native, client)}
    p = parity(native, client, runs["bm25"], runs["dense"], spec, ndcg)
    assert p.n_queries == len(client.ranking) > 0
    assert p.causes["unexplained"] == []
    assert p.identical_top10 + sum(len(v) for v in p.causes.values()) == p.n_queries
    assert abs(p.mean_ndcg10["native"] - p.mean_ndcg10["client"]) <= 0.02


def test_exact_search_measures_ann_loss(os_client, env):
    from evalctl.evaluators.scoring.metrics import ann_loss

    dense = _retrieve(os_client, env["ki"], "dense", "A", k=10)
    exact = _retrieve(os_client, env["ki"], "exact", "A", k=10)
    loss = ann_loss(dense, exact)
    assert loss["ann_recall_of_exact@10"] == pytest.approx(1.0)  # 30 documents: HNSW is exact here
    assert loss["ann_ndcg@10"] == pytest.approx(loss["exact_ndcg@10"])
    q = next(iter(exact.ranking))
    assert exact.ranking[q][0][1] == pytest.approx(dense.ranking[q][0][1], abs=1e-5)  # same (1+cos)/2 scale


def test_cli_runs_and_markdown_comparison(os_client, env, tmp_path):
    from evalctl import results_store
    from evalctl.cli.main import cli

    runner = CliRunner()
    base = ["retrieve", "--corpus", env["ki"], "--model", MODEL, "--view", "A", "--qrels", "given"]
    ids = []
    for extra in (["--method", "bm25"], ["--method", "dense"], ["--method", "hybrid", "--fusion", "client"]):
        res = runner.invoke(cli, [*base, *extra])
        assert res.exit_code == 0, res.output
        # "run ID  (path)": a progress bar on stderr (\r, no newline) may come first
        ids.append(re.search(r"run (\S+)  \(", res.output).group(1))
        assert "ndcg@10=" in res.output
    stored = sorted(r.path for r in results_store.iter_results(corpus=env["ki"]))
    assert {r.manifest["run"] for r in results_store.iter_results("metrics", env["ki"])} >= set(ids)  # retrieve keeps them
    res = runner.invoke(cli, ["compare", *ids, "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert sorted(r.path for r in results_store.iter_results(corpus=env["ki"])) == stored  # compare only reads
    out = res.output
    assert "### Systems" in out and "### Paired tests" in out and "p Holm" in out
    assert "| a bm25:" in out and "| c hybrid/client:" in out and "[" in out  # CI brackets
    assert {p.name for p in (tmp_path / "cmp").iterdir()} == {"comparison.md", "comparison.tex", "comparison.csv", MARK,
                                                             "ranx.md", "ranx.tex"}  # and ranx's own Report
    res = runner.invoke(cli, ["compare", ids[0], ids[1], "--format", "latex", "--baseline", ids[0]])
    assert res.exit_code == 0 and "\\begin{tabular}" in res.output
    res = runner.invoke(cli, ["evaluate", ids[1], "--domain", "IN"])
    assert res.exit_code == 0 and "0 queries" in res.output  # BEIR pairs have no IPC codes: no IN pair


def test_in_out_and_jurisdiction_breakdowns_cover_the_query_set(os_client, env):
    from evalctl.evaluators.scoring.compare import compare_runs, domain_partition, render
    from evalctl.corpus.qrels import load_qrels

    runs = [_retrieve(os_client, env["cit"], m, "TA", split=None, k=20) for m in ("bm25", "dense")]
    rep = compare_runs(runs, protocol=StatsProtocol(n_bootstrap=200))
    assert rep.n_queries == 5
    assert sum(rep.domain_partition.values()) == rep.n_queries
    assert rep.domain_partition == {"IN+OUT": 2, "IN": 1, "OUT": 1, "UNKNOWN": 1}
    parts = domain_partition(load_qrels(env["cit"], "citations"), None)
    assert set().union(*parts.values()) == {"US9000001", "US9000004", "EP3000008", "EP3000010", "US9000011"}
    for s in rep.systems:
        d = rep.domains[s]
        assert (d["IN"][0], d["OUT"][0], d["UNKNOWN"][0], d["ALL"][0]) == (3, 3, 1, 5)
        assert rep.jurisdictions[s] == {"EP": (2, pytest.approx(rep.jurisdictions[s]["EP"][1])),
                                        "US": (3, pytest.approx(rep.jurisdictions[s]["US"][1]))}
        n_all, mean_all = d["ALL"]
        assert mean_all == pytest.approx(sum(n * v for n, v in rep.jurisdictions[s].values()) / n_all)
    md = render(rep)
    assert "IN->OUT drop" in md and "IN+OUT=2" in md


def test_fusion_sweep_tunes_on_dev_and_reports_test(os_client, env):
    from evalctl.evaluators.retrieval.fusion_sweep import fusion_sweep
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec

    spec = RetrievalSpec(corpus=env["ki"], view="A", method="hybrid", model=MODEL, qrels="given", split="test")
    res = fusion_sweep(os_client, spec, [0.2, 0.8], mode="client", options=RetrievalOptions(progress=False))
    assert [p.dense_weight for p in res.points] == [0.2, 0.8]
    assert res.best.dense_weight == max(res.points, key=lambda p: p.dev_score).dense_weight
    m = res.test_run.manifest
    assert m["split"] == "test" and m["tuned_on"]["split"] == "dev" and m["fusion"]["dense_weight"] == res.best.dense_weight
    assert set(json.loads(res.test_run.result.file("run.json").read_text())) == set(res.test_run.ranking)


def test_a_query_sample_is_scored_on_the_queries_it_searched(os_client, env):
    """`--query-sample N`: the run's metrics are over its N queries (not the split, the others as zeros), its
    manifest says which sample; compared with a full run, both are scored on the N common queries."""
    from evalctl.cli.main import cli
    from evalctl.evaluators.scoring.compare import compare_runs, render
    from evalctl.evaluators.scoring.metrics import evaluate_run

    full = _retrieve(os_client, env["ki"], "dense", "A", split=None)
    sample = _retrieve(os_client, env["ki"], "dense", "A", split=None, query_sample=5)
    assert len(full.ranking) > 5 and sample.manifest["query_sample"] == {"n": 5, "seed": 0}
    scores, whole = evaluate_run(sample), evaluate_run(full)
    assert set(scores.per_query["ndcg@10"]) == set(sample.ranking)
    assert scores.per_query["ndcg@10"] == {q: whole.per_query["ndcg@10"][q] for q in sample.ranking}
    r = CliRunner().invoke(cli, ["retrieve", "--corpus", env["ki"], "--model", MODEL, "--view", "A", "--split", "all",
                                 "--method", "dense", "--query-sample", "5", "--qrels", "given"])
    assert r.exit_code == 0 and "metrics: 5 queries" in r.output, r.output
    rep = compare_runs([full, sample])
    assert rep.n_queries == 5 and rep.searched == (len(full.ranking), 5)
    assert "every number is over the 5 queries all of them searched" in render(rep)


def test_a_run_is_never_rescored_with_rebuilt_qrels(os_client, env):
    """`corpus qrels --overwrite` with another seed and dev fraction: `evaluate` and `compare` of a run made
    before refuse (exit 2) naming the run and what changed, storing nothing; the set rebuilt as the run
    recorded scores it again."""
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels
    from evalctl.corpus.store import load_corpus

    bm25, dense = (_retrieve(os_client, env["cit"], m, "TA", split=None) for m in ("bm25", "dense"))
    before = CliRunner().invoke(cli, ["evaluate", bm25.id])
    assert before.exit_code == 0, before.output
    kept = sorted(r.id for r in results_store.iter_results("metrics"))
    build_citation_qrels(load_corpus(env["cit"]), QrelsSpec(dev_fraction=0.5, seed="other"), overwrite=True)
    try:
        for args in (["evaluate", bm25.id], ["compare", bm25.id, dense.id]):
            r = CliRunner().invoke(cli, args)
            assert r.exit_code == 2 and "Traceback" not in r.output, r.output
            assert f"run {bm25.id}" in r.output and "dev_fraction 0.0 -> 0.5, seed 'evalctl' -> 'other'" in r.output
        assert sorted(r.id for r in results_store.iter_results("metrics")) == kept
    finally:
        build_citation_qrels(load_corpus(env["cit"]), QrelsSpec(dev_fraction=0.0), overwrite=True)
    assert CliRunner().invoke(cli, ["evaluate", bm25.id]).output == before.output
