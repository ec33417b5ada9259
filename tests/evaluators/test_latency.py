"""`evalctl latency` on the real node: a known-item corpus of 30 real USPTO grants indexed once with the offline
MiniLM model; BM25 and dense measured one `_search` per query at concurrency 1 and 2, the per-query figures
read back from the store, the conditions in the manifest, and bad input refused by name."""

from __future__ import annotations

import re
import uuid

import pytest
from click.testing import CliRunner

from conftest import private_cache
from retrieval_data import write_known_item_beir

pytestmark = [pytest.mark.opensearch, pytest.mark.models]
MODEL = "all-minilm-l6-v2"
SENT = 6  # queries per pass (the test split has 20)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, os_client):
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model

    root = tmp_path_factory.mktemp("latency")
    mp = private_cache(root)
    c = import_corpus("beir", [write_known_item_beir(root / "beir", 30)], name=f"lat-{uuid.uuid4().hex[:8]}").corpus
    index_corpus(os_client, c, [load_views()["A"]], get_model(MODEL), progress=False)
    yield c.name
    os_client.indices.delete(index=f"{corpus_alias(c.name)}--*", ignore_unavailable=True)
    mp.undo()


def _latency(corpus: str, *args: str, view: str = "A"):
    from evalctl.cli.main import cli

    return CliRunner().invoke(cli, ["latency", "--corpus", corpus, "--model", MODEL, "--view", view, "--qrels", "given",
                                    "--split", "test", *args])


def _stored(output: str) -> str:
    """The result id the command printed."""
    return re.search(r"^result (\S+)  \(", output, re.M).group(1)


def test_latency_per_query_figures_and_conditions(os_client, corpus):
    from evalctl import results_store
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.retrieval.latency import read_timings

    c = load_corpus(corpus)
    test_ids = load_query_set(c, load_qrels(c, "given"), "test", "A").ids
    ids = []
    for method in ("bm25", "dense"):
        res = _latency(corpus, "--method", method, "--warmup", "3", "--concurrency", "1,2",
                       "--max-queries", str(SENT), "--time-limit", "60")
        assert res.exit_code == 0, res.output
        for c in (1, 2):  # the table's row: concurrency, queries, errors
            assert re.search(rf"^\s+{c}\s+{SENT}\s+0\s", res.output, re.M), res.output
        ids.append(rid := _stored(res.output))
        result = results_store.get(corpus, rid)
        m = result.manifest
        timings = read_timings(result)
        for p in m["passes"]:
            mine = [t for t in timings if t.concurrency == p["concurrency"]]
            assert len(mine) == p["sent"] == SENT and p["errors"] == 0 and p["stopped_by"] == "queries"
            assert sorted(t.query_id for t in mine) == sorted(test_ids[:SENT])  # the split's first queries, each once
            if p["concurrency"] == 1:
                assert [t.query_id for t in mine] == list(test_ids[:SENT])  # in order
            assert all(t.error is None and t.took_ms is not None and t.client_ms > 0 for t in mine)
            for figures in (p["client_ms"], p["took_ms"]):
                assert figures["min"] <= figures["p50"] <= figures["p95"] <= figures["p99"] <= figures["max"]
            assert p["client_ms"]["max"] == max(t.client_ms for t in mine)  # recomputable from the stored figures
            assert p["qps"] > 0
        assert [p["concurrency"] for p in m["passes"]] == [1, 2] and m["warmup"] == 3 and m["warmup_sent"] == 3
        assert m["method"] == method and m["retrieval"]["method"] == method and m["index_manifest"]["corpus"] == corpus
        node = m["node"]
        assert node["shards"] >= 1 and node["replicas"] >= 0 and node["version"]
        for n in node["nodes"].values():
            assert n["heap_max_bytes"] > 0 and n["ram_bytes"] > 0 and n["processors"] >= 1
        assert all(n["search_active"] >= 0 for n in m["node_load"]["before"].values())
        assert node["simd_vectors"] in (True, False)
        assert all(len(m["load_average"][k]) == 3 for k in ("before", "after"))
        assert m["busy"] == (m["load_average"]["before"][0] > m["client_host"]["cpus"] / 2)
        assert m["client_host"]["cpus"] >= 1 and m["client_host"]["ram_bytes"] > 0 and m["code_version"]
    assert len(set(ids)) == 2

    # more requests in flight than opensearch-py's default pool of 10 connections (the command sizes its pool)
    res = _latency(corpus, "--method", "dense", "--warmup", "0", "--concurrency", "12", "--max-queries", "12")
    assert res.exit_code == 0, res.output
    again = _stored(res.output)
    assert again not in ids and results_store.get(corpus, ids[1]) is not None  # another result, the first kept
    timings = read_timings(results_store.get(corpus, again))
    assert len(timings) == 12 and {t.concurrency for t in timings} == {12} and not any(t.error for t in timings)


def test_time_limit_stops_a_pass(os_client, corpus):
    from evalctl.evaluators.retrieval.latency import LatencyParams, measure_latency
    from evalctl.evaluators.retrieval.retrieve import RetrievalSpec

    spec = RetrievalSpec(corpus=corpus, view="A", method="bm25", model=MODEL, qrels="given")
    lat = measure_latency(os_client, spec, LatencyParams(warmup=0, concurrency=(1,), max_queries=20,
                                                         time_limit_s=0.001))
    (p,) = lat.passes
    assert p.stopped_by == "time limit" and p.sent < 20 and len(lat.timings) == p.sent


def test_bad_input_is_refused_by_name(os_client, corpus):
    for args, named in ((["--method", "dense", "--concurrency", "1,0"], "--concurrency"),
                        (["--method", "sparse"], "--method"),
                        (["--method", "dense", "--max-queries", "0"], "--max-queries"),
                        (["--method", "hybrid", "--fusion", "client"], "--fusion client")):
        res = _latency(corpus, *args)
        assert res.exit_code == 2 and named in res.output, (args, res.output)
    res = _latency(corpus, "--method", "dense", view="TA")  # the index holds view A only
    assert res.exit_code == 2 and "TA" in res.output, res.output


@pytest.mark.neural_search
def test_native_hybrid_is_one_request_per_query(os_client, corpus):
    from evalctl.evaluators.retrieval.latency import LatencyParams, measure_latency
    from evalctl.evaluators.retrieval.retrieve import RetrievalSpec

    spec = RetrievalSpec(corpus=corpus, view="A", method="hybrid", model=MODEL, qrels="given")
    lat = measure_latency(os_client, spec, LatencyParams(warmup=1, concurrency=(1,), max_queries=3))
    (p,) = lat.passes
    assert p.sent == 3 and p.errors == 0 and p.client_ms.min <= p.client_ms.p50 <= p.client_ms.max
    assert lat.result.manifest["retrieval"]["pipeline"]  # through the stored neural-search pipeline


def test_compare_adds_each_runs_serving_cost(corpus):
    """`evalctl compare --cost`: a run's cost row comes from the latency of the very system it ran (same index,
    method, queries, depth); a run no latency timed says so."""
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.evaluators.retrieval.serving_cost import serving_cost

    def retrieve(method: str, k: str) -> str:
        res = CliRunner().invoke(cli, ["retrieve", "--corpus", corpus, "--model", MODEL, "--view", "A", "--qrels",
                                       "given", "--split", "test", "--method", method, "--k", k])
        assert res.exit_code == 0, res.output
        return re.search(r"run (\S+)  \(", res.output).group(1)

    timed = _stored(_latency(corpus, "--method", "bm25", "--warmup", "0", "--concurrency", "1", "--max-queries", "3").output)
    runs = [retrieve("bm25", "100"), retrieve("dense", "50")]  # dense at depth 50: a system no latency timed
    res = CliRunner().invoke(cli, ["compare", *runs, "--cost"])
    assert res.exit_code == 0, res.output
    rows = {r[1]: r for r in (line.split("|") for line in res.output.split("### Serving cost")[1].splitlines()
                              if line.startswith("| ") and "system" not in line)}
    bm25 = next(r for name, r in rows.items() if "bm25" in name.lower())
    cost = serving_cost(results_store.get(corpus, timed))
    assert bm25[-2].strip() == timed and bm25[3].strip() == f"{cost.p95_ms:,.1f}" and float(bm25[6]) > 0  # QPS
    dense = next(r for name, r in rows.items() if "dense" in name.lower())
    assert "not measured" in dense[-2] and dense[2].strip() == "-"
    assert "Serving cost: vectors MB per 10,000 patents" in res.output


def test_systems_timed_interleaved_are_stored_and_read_back(os_client, corpus):
    from evalctl.evaluators.retrieval.latency import LatencyError
    from evalctl.evaluators.retrieval.latency_experiment import ExperimentParams, analyse, measure_interleaved
    from evalctl.evaluators.retrieval.params import RetrievalParams
    from evalctl.evaluators.retrieval.retrieve import retrieval_spec

    specs = [retrieval_spec(RetrievalParams(corpus, "A", m, MODEL, qrels="given",  # BM25 on the same index
                                            split="test")) for m in ("bm25", "dense")]
    exp = measure_interleaved(os_client, specs, ExperimentParams(warmup=2, rounds=5, max_queries=SENT, busy_repeats=1))
    m, sent = exp.result.manifest, len(exp.rounds.quiet)
    assert m["kind"] == "latency-experiment" and [s["method"] for s in m["systems"]] == ["bm25", "dense"]
    assert 5 <= sent <= 6 and len(m["queries"]) == SENT and m["busy"] == (sum(m["quiet"]) < 5)
    for s in m["systems"]:  # each timed in an index of its own, holding only its field, removed after
        assert s["layout"] == "serving" and "--serving-" in s["index"]
        assert not os_client.indices.exists(index=s["index"])
    bm25_copy, dense_copy = (s["index_manifest"]["cost"] for s in m["systems"])
    assert "vector_counts" not in bm25_copy and dense_copy["vector_counts"] == {"A": dense_copy["documents"]}
    cells = {(t.system, t.round, t.query) for t in exp.rounds.timings}  # every query to every system, once a round
    assert len(cells) == len(exp.rounds.timings) == 2 * SENT * sent
    first = {(t.round, t.query): t.system for t in exp.rounds.timings if t.position == 0}
    assert set(first.values()) == {0, 1}  # the order turns
    rounds, analysis = analyse(exp.result)  # read back from the store, the same figures
    assert rounds == exp.rounds
    for i, s in enumerate(exp.systems):
        assert s.errors == 0 and s.name == m["systems"][i]["retrieval"]["name"]
        assert 0 < s.p50_ms.lo <= s.p50_ms.value <= s.p50_ms.hi and s.p50_ms.value <= s.p95_ms.value
        assert analysis.percentile(i, 95) == s.p95_ms
    with pytest.raises(LatencyError, match="rounds 3: must be 5 or more"):
        ExperimentParams(rounds=3)
