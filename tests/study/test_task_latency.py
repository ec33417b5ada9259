"""Serving latency as a study task (platform/study/tasks/latency/task.py, one line in TASKS): a spec's `latency:` entry
on the 274 Espacenet pizza patents (titles, MiniLM) is planned after its index, run by `evalctl run` (bm25 and
dense timed together, interleaved: one experiment), kept (a second run finds it done) and shown in the report's own
section; bad entries and expected latencies are refused naming the entry."""

from __future__ import annotations

import uuid

import pytest
import yaml
from click.testing import CliRunner

from conftest import ESPACENET
from report_tables import section_tables

MODEL = "all-minilm-l6-v2"


def _doc(corpus: str, **latency) -> dict:
    return {"name": f"lat-{corpus}", "models": [{"id": MODEL}],
            "corpora": [{"name": corpus, "format": "espacenet", "sources": [str(ESPACENET)],
                         "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
            "latency": [{"corpus": corpus, "views": ["T"], "warmup": 1, "max_queries": 3, **latency}]}


def _write(tmp_path, doc: dict):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_entry_matches_the_experiment_parameters():
    from evalctl.evaluators.retrieval.latency_experiment import ExperimentParams
    from evalctl.parameters import differences
    from evalctl.study.tasks.latency.task import LatencyEntry

    assert differences(LatencyEntry, ExperimentParams) == {}  # a spec entry means what the parameters mean
    assert {"warmup", "rounds", "max_queries", "busy_repeats"} <= set(LatencyEntry.__dataclass_fields__)


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_bad_entries_and_expected_latencies_are_refused(tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    for latency, named in (({"rounds": 2}, "latency[0]: rounds 2: must be 5 or more"),
                           ({"methods": ["sparse"]}, "latency[0]"), ({"split": "val"}, "latency[0]: unknown split")):
        r = CliRunner().invoke(cli, ["run", str(_write(tmp_path, _doc("lat-bad", **latency))), "--dry-run"])
        assert r.exit_code == 2 and named in r.output, r.output
    doc = _doc("lat-bad")  # a corpus's entries are one experiment: they agree on how it is measured
    doc["latency"].append({**doc["latency"][0], "views": ["A"], "max_queries": 5})
    r = CliRunner().invoke(cli, ["run", str(_write(tmp_path, doc)), "--dry-run"])
    assert r.exit_code == 2 and "latency[1]: max_queries 5: the latency entries of corpus lat-bad" in r.output, r.output
    doc = {**_doc("lat-bad"), "expected": [{"task": "latency", "corpus": "lat-bad", "model": MODEL, "view": "T",
                                            "method": "dense", "metric": "p50_ms", "value": 5.0}]}
    r = CliRunner().invoke(cli, ["run", str(_write(tmp_path, doc)), "--dry-run"])
    assert r.exit_code == 2 and "expected[0]" in r.output and "not a reproducible score" in r.output, r.output


@pytest.mark.opensearch
@pytest.mark.models
def test_latency_task_runs_is_kept_and_reported(os_client, tmp_path, monkeypatch):
    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.evaluators.retrieval.latency_experiment import analyse, read_encodings, read_rounds
    from evalctl.study.plan.runner import plan
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.spec.step_ids import step_key

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"lt-{uuid.uuid4().hex[:6]}"
    doc = _doc(corpus, methods=["bm25", "dense"], budget={"p95_ms": 60000, "index_mb_per_10k": 1},
               layouts=["serving", "study"])
    doc["retrieval"] = [{"corpus": corpus, "views": ["T"], "methods": ["bm25", "dense"]}]  # the scores it joins
    path = _write(tmp_path, doc)
    try:
        steps = {s.key: s for s in plan(load_experiment(str(path)))}
        keys = [f"latency {corpus} {MODEL} T {m}" for m in ("bm25", "dense")]
        for key in keys:
            deps = {step_key(d) for d in steps[key].deps}
            assert deps == {f"qrels {corpus} citations", f"index {corpus} {MODEL} [T]"}
        r = CliRunner().invoke(cli, ["run", str(path)])
        # the first step measures the corpus's experiment, the second takes its system's part of it
        assert r.exit_code == 0 and f"{keys[0]}: ok" in r.output and f"{keys[1]}: done" in r.output, r.output
        assert "2 systems x 2 layout(s) interleaved" in r.output
        refs = {steps[key].ref() for key in keys}
        assert len(refs) == 1  # one experiment timed both systems
        res = results_store.get(corpus, refs.pop())
        m = res.manifest
        labels = [str(steps[k].id.target) for k in keys]
        assert m["kind"] == "latency-experiment" and [(s["label"], s["layout"]) for s in m["systems"]] == [
            *((label, "serving") for label in labels), *((label, "study") for label in labels)]  # an arm each
        study_index = m["systems"][2]["index"]
        assert m["systems"][3]["index"] == study_index and all(  # the copies: removed after the experiment
            s["index"] != study_index and not os_client.indices.exists(index=s["index"]) for s in m["systems"][:2])
        studied, served = m["systems"][3]["index_manifest"]["cost"], m["systems"][0]["index_manifest"]["cost"]
        # the BM25 copy holds no vector, neither in vector files nor in its _source
        assert served["store_bytes"] < studied["store_bytes"] - studied["vector_bytes"]
        _, analysis = analyse(res)
        assert len(read_rounds(res).timings) == 4 * 3 * len(m["quiet"])  # every query to every arm, each round
        encode = read_encodings(res)  # BM25 encodes nothing; each dense query was encoded alone, and timed
        assert encode.shape == (4, 3) and (encode[0] == 0).all() and (encode[1] > 0).all()
        assert (encode[1] == encode[3]).all()  # both layouts of a system: one encoding
        for i, key in enumerate(keys):
            scores = steps[key].scores()
            assert scores["errors"] == 0 and scores["p50_ms"] == round(analysis.percentile(i, 50).value, 3)
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0 and all(f"{k}: done" in r.output for k in keys), r.output  # kept, not measured again
        monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:9")  # the report reads the store alone
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        # BM25 fits, dense does not (the table rounds to 0.1 MB: BM25's size is at most 0.05 above what it shows)
        bm25_size = round(_check_quality_and_cost(md, tmp_path / "report", corpus, {k: steps[k] for k in keys}) + 0.05, 2)
        doc["latency"][0]["budget"] = {"index_mb_per_10k": bm25_size}
        path.write_text(yaml.safe_dump(doc))
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        findings = (tmp_path / "report" / "report.md").read_text().split("## Findings")[1].split("\n## ")[0]
        claim = next(line for line in findings.splitlines() if f"{corpus}, within index ≤ {bm25_size:g} MB" in line)
        if m["busy"]:  # other work held the machine: shown, no finding drawn
            assert "no finding: the latency was measured while other work held the machine" in claim, claim
        else:
            assert ": the best system is BM25 on T (ndcg@10 " in claim, claim
            assert ("also the best measured" in claim) != ("the best measured, Dense · all-MiniLM-L6-v2 on T" in claim)
        section = md.split("## Serving latency")[1].split("\n## ")[0]
        rows, layouts, neighbours = section_tables(md, "Serving latency")
        assert [row["system"] for row in rows] == [f"{name} on T ({layout} layout)" for layout in ("serving", "study")
                                                   for name in ("BM25", "Dense · all-MiniLM-L6-v2")]  # a row per arm
        assert [row["system"] for row in layouts] == ["BM25 on T", "Dense · all-MiniLM-L6-v2 on T"]
        for i, row in enumerate(layouts):  # the same system in both layouts, paired
            d = analysis.difference(i, i + 2, 95, 0.975)
            assert row["study − serving ms [CI]"] == f"{d.value:+,.1f} [{d.lo:+,.1f}, {d.hi:+,.1f}]"
        for i, row in enumerate(rows):
            p50 = analysis.percentile(i, 50)
            assert row["p50 ms [95% CI]"] == f"{p50.value:,.1f} [{p50.lo:,.1f}, {p50.hi:,.1f}]" and row["errors"] == "0"
        assert len(neighbours) == 3 and {n["faster"] for n in neighbours} | {n["slower"] for n in neighbours} == {
            r["system"] for r in rows}
        assert "cannot be told apart on this machine" in section or "slower beyond the noise" in section
        assert "Serving latency" not in md.split("## Headline results")[1].split("\n## ")[0]  # no headline claim
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)


def _check_quality_and_cost(md: str, out, corpus: str, latency_steps: dict) -> None:
    """The quality-and-cost table joins each timed system to its score, with the costs its latency result
    recorded; both Pareto charts are drawn; the budget finding names the best system that fits."""
    from evalctl.evaluators.retrieval.serving_cost import latest_cost
    from evalctl.study.tasks.latency.quality_cost import pareto_optimal

    table, indexes = section_tables(md, "Quality and cost")
    header = list(table[0])
    assert {row["layout"] for row in table} == {"serving"}  # the findings' layout only
    assert [row["system"] for row in table] == ["BM25 on T", "Dense · all-MiniLM-L6-v2 on T"]
    costs = []
    for row in table:
        cost = latest_cost(corpus, row["run"])
        costs.append(cost)
        assert row["latency"] == cost.latency_id == next(iter(latency_steps.values())).ref()
        assert row["p95 ms"] == f"{cost.p95_ms:,.1f} [{cost.p95_ci[0]:,.1f}, {cost.p95_ci[1]:,.1f}]"
        assert float(row["index MB / 10k"]) > 0 and row["ndcg@10 [95% CI]"].count("[") == 1
    bm25, dense = table
    assert bm25["query encode p50 ms"] == "-" and bm25["serving p95 ms"] == bm25["p95 ms"]  # nothing to encode
    assert float(dense["query encode p50 ms"]) > 0
    assert float(dense["serving p95 ms"].split()[0]) >= float(dense["p95 ms"].split()[0])  # encoding + search
    assert bm25["graph MB / 10k"] == "-" and bm25["vectors MB / 10k"] == "-" and bm25["encode s / 1k"] == "-"
    assert float(dense["graph MB / 10k"].split()[0]) > float(dense["vectors MB / 10k"]) > 0  # links on the vectors
    assert float(dense["encode s / 1k"]) > 0
    assert float(dense["index MB / 10k"]) > float(bm25["index MB / 10k"])  # its vectors on top of the text
    assert [(row["index"], row["systems"]) for row in indexes] == [(c.index, "1") for c in costs]  # one each
    assert 0 < float(indexes[1]["shared MB / 10k (text, _source, ids)"]) < float(indexes[1]["store MB / 10k"])
    for axis, name in (("end_to_end_p95_ms", "latency"), ("index_mb_per_10k", "size")):
        # the costs as measured: the table rounds them, and two rounded alike may differ on the front
        points = [(getattr(cost, axis), float(row[header[1]].split()[0])) for cost, row in zip(costs, table)]
        assert [name in row["Pareto-optimal on"] for row in table] == pareto_optimal(points)
    for axis in ("end_to_end_p95_ms", "index_mb_per_10k"):
        assert (out / f"pareto-{corpus}-{axis}.png").stat().st_size > 10_000
    findings = md.split("## Findings")[1].split("\n## ")[0]
    # 1 MB per 10,000 patents admits neither system: the finding says so and lists what each costs (a busy
    # experiment: no finding, and it says why)
    said = ("no finding: the latency was measured while other work held the machine." if costs[0].busy
            else "no system measured fits.")
    assert f"{corpus}, within serving p95 ≤ 60000 ms and index ≤ 1 MB per 10,000 patents: {said}" in findings
    return float(bm25["index MB / 10k"])


@pytest.mark.opensearch
@pytest.mark.models
def test_a_precision_variant_is_set_beside_its_float32_twin(os_client, tmp_path, monkeypatch):
    """MiniLM and `minilm-int8` (defined `like:` it, pinned to int8): both indexed, scored and timed; the methods
    table names each system's precision, and the quality-and-cost section sets the int8 system beside the float32
    one with its encoding speed ratio and the comparison table's paired test."""
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = f"lp-{uuid.uuid4().hex[:6]}"
    doc = _doc(corpus, methods=["dense"])
    doc["models"].append({"id": "minilm-int8", "spec": {"like": MODEL, "precision": "int8"}})
    doc["retrieval"] = [{"corpus": corpus, "views": ["T"], "methods": ["dense"]}]
    path = _write(tmp_path, doc)
    try:
        r = CliRunner().invoke(cli, ["run", str(path)])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
        md = (tmp_path / "report" / "report.md").read_text()
        methods = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
                   if line.startswith("| Dense · ")]
        header = next([c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
                      if line.startswith("| system ") and "precision" in line and "reproduce" in line)
        named = {row[0]: row[header.index("precision")] for row in methods if len(row) == len(header)}
        assert named == {"Dense · all-MiniLM-L6-v2": "float32", "Dense · all-MiniLM-L6-v2 (int8)": "int8"}, named
        section = md.split("## Quality and cost")[1].split("\n## ")[0]
        trade = [dict(zip(h, row)) for h, *rows in [[[c.strip() for c in line.strip("|").split("|")]
                                                      for line in section.split("Precision: ")[1].splitlines()
                                                      if line.startswith("|") and not line.startswith(("|--", "|:"))]]
                 for row in rows]
        assert len(trade) == 1 and trade[0]["system"] == "Dense · all-MiniLM-L6-v2 (int8) on T" and trade[0]["precision"] == "int8"
        assert float(trade[0]["encoding speed × float32"]) > 0 and float(trade[0]["encode s / 1k"]) > 0
        assert trade[0]["float32 twin"] == "Dense · all-MiniLM-L6-v2 on T"
        test = trade[0]["ndcg@10 − float32 twin"]
        assert "Holm p" in test and "95% CI" in test, test
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}-*", ignore_unavailable=True)
