"""Clustering on toy vectors (metrics equal scikit-learn's, the multi-label rule, code levels) and the
task tables built from stored results (bootstrap CIs over per-seed values)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalctl.evaluators.tasks.clustering import (METRICS, ClusterSettings, cluster, cluster_scores, level_specs,
                                                single_labels)
from evalctl.corpus.label_sets import LabelSetSpec


def test_scores_match_sklearn_on_a_toy_case():
    from sklearn import metrics

    gold = ["A", "A", "A", "B", "B", "C", "C", "C"]
    pred = [0, 0, 1, 1, 1, 2, 2, 0]
    got = cluster_scores(gold, pred)
    assert got == {
        "v_measure": pytest.approx(metrics.v_measure_score(gold, pred)),
        "ari": pytest.approx(metrics.adjusted_rand_score(gold, pred)),
        "nmi": pytest.approx(metrics.normalized_mutual_info_score(gold, pred)),
        "ami": pytest.approx(metrics.adjusted_mutual_info_score(gold, pred)),
    }
    assert cluster_scores(gold, [5, 5, 5, 7, 7, 9, 9, 9]) == {m: pytest.approx(1.0) for m in got}


def test_separable_blobs_are_recovered_with_k_from_the_gold_classes():
    rng = np.random.default_rng(0)
    centres = np.eye(4)[:3] * 10
    gold = [c for c in "ABC" for _ in range(20)]
    x = np.vstack([centres[i] + rng.normal(scale=0.3, size=(20, 4)) for i in range(3)])
    out = cluster(x, gold, ClusterSettings(seeds=(0, 1, 2)))
    assert out["k"] == 3 and out["n"] == 60 and [s["seed"] for s in out["seeds"]] == [0, 1, 2]
    assert out["summary"]["v_measure"]["mean"] == pytest.approx(1.0)
    assert out == cluster(x, gold, ClusterSettings(seeds=(0, 1, 2)))  # seeded: reproducible


def test_multi_label_rules():
    labels = [["A21D", "H05B"], ["H05B"], ["A47J", "H05B", "A21D"]]
    support = {"A21D": 2, "H05B": 3, "A47J": 1}
    assert single_labels(labels, support, "first") == ["A21D", "H05B", "A47J"]
    assert single_labels(labels, support, "most_frequent") == ["H05B", "H05B", "H05B"]
    with pytest.raises(ValueError, match="unknown rule"):
        ClusterSettings(rule="random")


def test_levels_of_a_code_label_set():
    spec = LabelSetSpec(name="ipc_subclass", source="ipc", level="subclass", min_support=5)
    assert [s.level for s in level_specs(spec, ("section", "class"))] == ["section", "class"]
    assert level_specs(spec, ()) == [spec]
    with pytest.raises(ValueError, match="no code levels"):
        level_specs(LabelSetSpec(name="landscape", source="labels"), ("section",))


def test_bootstrap_ci_brackets_the_mean():
    from evalctl.evaluators.scoring.significance import bootstrap_ci

    values = [0.50, 0.60, 0.55, 0.52, 0.58]
    lo, hi = bootstrap_ci(values)
    assert min(values) <= lo < np.mean(values) < hi <= max(values)
    assert bootstrap_ci(values) == (lo, hi)  # fixed random state
    assert bootstrap_ci([0.4, 0.4]) == (0.4, 0.4) and bootstrap_ci([0.3]) == (0.3, 0.3)


def test_tables_from_stored_results(tmp_path):
    from evalctl import results_store
    from evalctl.evaluators.scoring.significance import bootstrap_ci
    from evalctl.evaluators.scoring.significance_params import StatsProtocol
    from evalctl.study.tasks.labels.tables import task_table, to_csv, to_markdown

    spec = {"name": "ipc3"}
    for model, base in (("model-b", 0.3), ("model-a", 0.5)):
        body = {"class": {"k": 7, "n": 100, "seeds": [
            {"seed": s, "v_measure": base + s / 100, "ari": base, "nmi": base, "ami": base} for s in range(3)]}}
        results_store.write("clustering", "toy", {"name": f"cluster-{model}", "model": model, "view": "T",
                                                  "label_set": spec},
                            {"metrics.json": json.dumps(body)}, extra={"rule": "first"}, root=tmp_path)
    rows = task_table("clustering", METRICS, root=tmp_path)
    assert [r["model"] for r in rows] == ["model-a", "model-b"]
    assert rows[0]["v_measure"] == pytest.approx(0.51) and rows[0]["runs"] == 3 and rows[0]["k"] == 7
    protocol = StatsProtocol()  # the CI every table gives: the protocol's resamples and seed
    assert (rows[0]["v_measure_lo"], rows[0]["v_measure_hi"]) == bootstrap_ci([0.50, 0.51, 0.52], protocol.n_bootstrap,
                                                                               protocol.seed)
    wider = StatsProtocol(n_bootstrap=5000, seed=7)
    assert task_table("clustering", METRICS, root=tmp_path, protocol=wider)[0]["v_measure_lo"] == bootstrap_ci(
        [0.50, 0.51, 0.52], 5000, 7)[0]
    md = to_markdown(rows, "clustering")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()]
    assert ["toy", "model-a", "T", "ipc3", "class", "first", "100", "7", "3", "51.0 [50.0, 52.0]"] == cells[2][:10]
    assert to_csv(rows).splitlines()[0].startswith("corpus,model,view,label_set,level,rule,n,k,runs,v_measure,")
    assert task_table("classification", ("micro_f1",), root=tmp_path) == []
