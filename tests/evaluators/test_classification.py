"""Classification probes on toy vectors: metrics equal scikit-learn's, splits are fixed by the seeds,
labels below the support are dropped and reported, and a label set with too few examples is refused
with a message that says what is missing."""

from __future__ import annotations

import numpy as np
import pytest

from evalctl.evaluators.tasks.classification import (
    ClassifySettings, TooFewExamples, classify, f1_scores, labelled_rows, summarise,
)
from evalctl.evaluators.vectors.export import VectorExport
from evalctl.corpus.label_sets import LabelSetSpec


def toy_export(codes: list[list[str]], dim: int = 4, seed: int = 0) -> VectorExport:
    ids = [f"D{i:03d}" for i in range(len(codes))]
    vectors = np.random.default_rng(seed).normal(size=(len(codes), dim)).astype(np.float32)
    return VectorExport(path=None, manifest={}, ids=ids, vectors=vectors,
                        codes=[{"cpc": c, "ipc": [], "labels": []} for c in codes])


def test_f1_matches_sklearn_on_a_toy_case():
    from sklearn.metrics import f1_score

    y_true = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    y_pred = np.array([[1, 0, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])
    got = f1_scores(y_true, y_pred)
    # micro: tp 3, fp 1, fn 2 -> 2*3 / (2*3 + 1 + 2)
    assert got["micro_f1"] == pytest.approx(6 / 9)
    assert got["micro_f1"] == pytest.approx(f1_score(y_true, y_pred, average="micro"))
    # macro over the labels present in y_true (0, 1, 3): label 2 has no true positive to find
    assert got["macro_f1"] == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)
    assert got["macro_f1"] == pytest.approx(f1_score(y_true, y_pred, average="macro", labels=[0, 1, 3],
                                                     zero_division=0))
    assert got["samples_f1"] == pytest.approx(f1_score(y_true, y_pred, average="samples", zero_division=0))
    assert got["samples_f1"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)


def test_probes_reproduce_sklearn_and_record_splits():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(1)
    centres = np.eye(3) * 4
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]] * 15)
    x = (y @ centres + rng.normal(size=(len(y), 3))).astype(np.float32)
    ids = [f"D{i}" for i in range(len(y))]
    settings = ClassifySettings(seeds=(3, 4), test_size=0.25)
    out = classify(x, y, ids, settings)
    assert out == classify(x, y, ids, settings)  # fixed seeds: same splits, same numbers

    train, test = train_test_split(np.arange(len(y)), test_size=0.25, random_state=3)
    assert out["splits"][0]["test_ids"] == [ids[i] for i in test]
    ref = OneVsRestClassifier(LogisticRegression(tol=1e-8)).fit(x[train], y[train])
    assert out["probes"]["logreg"]["splits"][0] == {"seed": 3, **f1_scores(y[test], ref.predict(x[test]))}
    # the kNN probe's euclidean neighbours of unit rows are scikit-learn's cosine neighbours
    knn = KNeighborsClassifier(n_neighbors=5, metric="cosine").fit(x[train], y[train])
    assert out["probes"]["knn"]["splits"][0] == {"seed": 3, **f1_scores(y[test], knn.predict(x[test]))}
    assert out["probes"]["knn"]["summary"]["micro_f1"]["mean"] > 0.9  # well separated blobs
    # the memory-mapped export's way in: rows picked by position give the same numbers
    shuffled = np.random.default_rng(2).permutation(len(y))
    stored = np.empty_like(x)
    stored[shuffled] = x
    assert classify(stored, y, ids, settings, rows=shuffled) == out
    assert np.array_equal(stored[shuffled], x)  # the caller's vectors are not normalised in place
    values = [s["macro_f1"] for s in out["probes"]["logreg"]["splits"]]
    assert out["probes"]["logreg"]["summary"]["macro_f1"] == {
        "mean": pytest.approx(np.mean(values)), "sd": pytest.approx(np.std(values, ddof=1))}


def test_summary_of_one_split_has_zero_sd():
    assert summarise([{"micro_f1": 0.5}]) == {"micro_f1": {"mean": 0.5, "sd": 0.0}}


def test_labels_below_support_are_dropped_and_reported():
    codes = [["H05B6/64", "A21D13/00"]] * 6 + [["A47J37/06", "B65D85/36"]] + [["A47J37/10"]] * 5 + [["B65D81/34"]]
    spec = LabelSetSpec(name="cpc_subclass", source="cpc", level="subclass", min_support=3)
    rows = labelled_rows(toy_export(codes), spec)
    assert rows.support == {"A21D": 6, "A47J": 6, "H05B": 6}
    assert rows.dropped == {"B65D": 2}
    assert rows.n_unlabelled == 1 and len(rows.ids) == 12 and "D012" not in rows.ids
    assert rows.labels[0] == ["H05B", "A21D"] and rows.labels[6] == ["A47J"]  # source order kept


def test_a_label_set_with_too_few_examples_is_refused_clearly():
    spec = LabelSetSpec(name="cpc_group", source="cpc", level="group", min_support=5)
    codes = [["A21D13/00"]] * 4 + [["A47J37/06"]] * 8
    with pytest.raises(TooFewExamples) as e:
        labelled_rows(toy_export(codes), spec)
    msg = str(e.value)
    assert "label set 'cpc_group'" in msg and "12 exported documents, 8 keep a label" in msg
    assert "1 label(s) reach the support (1 dropped below it)" in msg and "min_support" in msg


def test_settings_are_checked():
    with pytest.raises(ValueError, match="test_size"):
        ClassifySettings(test_size=1.5)
    with pytest.raises(ValueError, match="unknown probe"):
        ClassifySettings(probes=("svm",))
