"""`evalctl classify`: multi-label classification probes on frozen vectors read back from the index.

One label set at a time (configs/label_sets.yaml), labels taken from the codes stored with each
vector. Labels below the set's `min_support` (counted over the exported documents) are dropped and
reported, and so are documents left without a label. For each seed, a shuffled train/test split
(default 80/20) trains two probes:

- `logreg`: one-vs-rest logistic regression (L2, C=1, lbfgs on the float32 vectors, intercept not
  penalised), threshold 0.5 (evalctl's default where the study is silent, docs/study.md);
- `knn`: k nearest neighbours by cosine, a label predicted when most of the k neighbours carry it.

Memory stays near the vectors' own float32 size: each split copies its train and test rows once (from the
memory-mapped export), both probes share them, and neither makes float64 copies (liblinear, used before,
copied the train rows to float64 and into its own sparse nodes for every label fit in flight: 7x the
matrix at 40k rows, and 3x slower than lbfgs on the quickstart's ipc3 at micro-F1 0.666 vs 0.665).

The vectors are the view's under the model's classification prompt where it differs from the document
prompt (`vectors="task"`, as MTEB encodes classification texts), else, or with `vectors="document"`,
the document vectors; the result's identity names the task field and prompt when it is not the latter.

Metrics per split: micro-F1 and samples-F1 over all labels, macro-F1 over the labels with at least one
positive in that split's test part (a label absent from the test part has no defined F1 and would
otherwise count as 0), all by scikit-learn with zero_division=0; then mean and sample standard
deviation (ddof=1) over the splits. Test ids per seed are stored, so every split can be rebuilt.
"""

from __future__ import annotations

import json
import mmap
import os
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from evalctl import results_store
from evalctl.corpus.label_sets import LabelSetSpec, label_matrix, label_support
from evalctl.errors import BadInput
from evalctl.evaluators.vectors.export import ViewVectors, export_vectors
from evalctl.gc_tuning import long_lived_frozen
from evalctl.parameters import param

PROBES = ("logreg", "knn")
METRICS = ("micro_f1", "macro_f1", "samples_f1")
# Below these a split cannot train and test anything meaningful.
MIN_RECORDS = 10
MIN_LABELS = 2


class TooFewExamples(BadInput, ValueError):
    """The label set keeps too few records or labels on this corpus to classify or cluster."""


@dataclass(frozen=True)
class ClassifySettings:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    test_size: float = param(0.2, min=0, max=1, min_open=True, max_open=True, help="Test share of each split.")
    probes: tuple[str, ...] = param(PROBES, flag="--probe", choices=PROBES, help="Probe(s) to run (default: both).")
    C: float = 1.0
    max_iter: int = 1000
    knn_k: int = param(5, min=1, help="Neighbours of the kNN probe.")
    solver: str = "lbfgs"  # in the result identity: results made by liblinear keep their own ids
    # scikit-learn's lbfgs scales the loss by 1/n: its default 1e-4 stopped after 11 iterations at twice the
    # optimum's objective on 74k training rows (1e-8: 23 iterations, the optimum, still 4x faster than liblinear)
    tol: float = 1e-8

    def __post_init__(self):
        if not 0 < self.test_size < 1:
            raise ValueError(f"test_size must be in (0, 1), not {self.test_size}")
        if unknown := set(self.probes) - set(PROBES):
            raise ValueError(f"unknown probe(s) {sorted(unknown)}; known: {', '.join(PROBES)}")
        if not self.seeds:
            raise ValueError("at least one seed is needed")


@dataclass(frozen=True)
class LabelledRows:
    """The records a label set keeps, their labels, and what was dropped on the way."""

    ids: list[str]
    labels: list[list[str]]
    support: dict[str, int]  # kept label -> records
    dropped: dict[str, int]  # label below min_support -> records
    n_unlabelled: int  # exported records without any kept label


def labelled_rows(export, spec: LabelSetSpec, *, min_records: int = MIN_RECORDS,
                  min_labels: int = MIN_LABELS) -> LabelledRows:
    """Apply the label set to the exported codes; TooFewExamples names what is missing."""
    support = label_support(export, spec)
    ids, labels = label_matrix(export, spec)
    kept = {lab: n for lab, n in support.items() if n >= spec.min_support}
    dropped = {lab: n for lab, n in support.items() if n < spec.min_support}
    rows = LabelledRows(ids, labels, dict(sorted(kept.items())), dict(sorted(dropped.items())),
                        len(export.ids) - len(ids))
    if len(ids) < min_records or len(kept) < min_labels:
        raise TooFewExamples(
            f"label set {spec.name!r} ({spec.source}{'/' + spec.level if spec.level else ''}, min_support "
            f"{spec.min_support}): {len(export.ids)} exported documents, {len(ids)} keep a label and "
            f"{len(kept)} label(s) reach the support ({len(dropped)} dropped below it); need at least "
            f"{min_records} documents and {min_labels} labels. Use a corpus with these codes, another "
            "label set, or a lower min_support in configs/label_sets.yaml")
    return rows


def label_indicators(rows: LabelledRows) -> np.ndarray:
    """One row per record, one 0/1 column per kept label, as bytes: int64 indicators (8 bytes a label) held
    two thirds of the 384-d vectors' memory at 127 labels."""
    from sklearn.preprocessing import MultiLabelBinarizer  # deferred: sklearn

    return MultiLabelBinarizer(classes=list(rows.support)).fit_transform(rows.labels).astype(np.uint8)


def f1_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Micro/samples F1 over all labels, macro F1 over labels with a positive in y_true."""
    from sklearn.metrics import f1_score  # deferred: sklearn

    present = np.flatnonzero(y_true.sum(axis=0) > 0)
    return {
        "micro_f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", labels=present, zero_division=0)),
        "samples_f1": float(f1_score(y_true, y_pred, average="samples", zero_division=0)),
    }


FIT_THREADS = min(4, os.cpu_count() or 1)


def make_probe(name: str, settings: ClassifySettings, n_train: int):
    from sklearn.linear_model import LogisticRegression  # deferred: sklearn
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.neighbors import KNeighborsClassifier

    if name == "logreg":
        return OneVsRestClassifier(LogisticRegression(C=settings.C, solver=settings.solver, max_iter=settings.max_iter,
                                                      tol=settings.tol))
    # Cosine neighbours are the euclidean neighbours of unit vectors (classify normalises the rows first):
    # scikit-learn's chunked float32 kernel, where metric="cosine" computes float64 distance blocks.
    return KNeighborsClassifier(n_neighbors=min(settings.knn_k, n_train), metric="euclidean", algorithm="brute")


def _release_pages(x: np.ndarray) -> None:
    """Once a split's rows are copied, a memory-mapped export's pages leave this process's memory (they stay
    in the page cache, and come back if read again): the export and the copies are not held side by side."""
    if (mm := getattr(x, "_mmap", None)) is not None:
        mm.madvise(mmap.MADV_DONTNEED)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """x's rows scaled to length 1, in place (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


def summarise(per_split: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean and sample standard deviation of each metric over splits (or seeds)."""
    out = {}
    for m in per_split[0]:
        values = np.array([s[m] for s in per_split])
        out[m] = {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
    return out


def classify(x: np.ndarray, y: np.ndarray, ids: list[str], settings: ClassifySettings,
             rows: np.ndarray | None = None) -> dict:
    """Probe results: per probe, per-split metrics and their summary; the test ids of each split.
    Row `rows[i]` of `x` (default: row i; `x` may be a memory-mapped export) is the vector of `ids[i]`."""
    from joblib import parallel_backend  # deferred: joblib, sklearn
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split

    rows = np.arange(len(ids)) if rows is None else np.asarray(rows)
    results = {p: {"splits": []} for p in settings.probes}
    splits = []
    for seed in settings.seeds:
        train, test = train_test_split(np.arange(len(ids)), test_size=settings.test_size, random_state=seed)
        splits.append({"seed": seed, "n_train": len(train), "test_ids": [ids[i] for i in test]})
        x_train = np.array(x[rows[train]], dtype=np.float32)
        x_test = np.array(x[rows[test]], dtype=np.float32)
        _release_pages(x)
        for name in sorted(settings.probes, key=lambda p: p == "knn"):  # knn last: it normalises in place
            if name == "knn":
                _unit_rows(x_train), _unit_rows(x_test)
            probe = make_probe(name, settings, len(train))
            # One-vs-rest fits its labels on threads, each with one BLAS thread: threads x BLAS threads
            # oversubscribe 2 cores (ipc3 on the quickstart, default tol: 33 s with, 2 s without).
            with warnings.catch_warnings(), parallel_backend("threading", n_jobs=FIT_THREADS), \
                    threadpool_limits(limits=1, user_api="blas"):
                # a label constant in a training split is learned as a constant: expected, not noise
                warnings.filterwarnings("ignore", message="Label ", category=UserWarning)
                warnings.simplefilter("ignore", ConvergenceWarning)
                probe.fit(x_train, y[train])
            pred = np.asarray(probe.predict(x_test))
            results[name]["splits"].append({"seed": seed, **f1_scores(y[test], pred)})
        del x_train, x_test  # before the next split's copies
    for name in settings.probes:
        results[name]["summary"] = summarise([{m: s[m] for m in METRICS} for s in results[name]["splits"]])
    return {"probes": results, "splits": splits}


@long_lived_frozen()  # full collections skip the long-lived heap (evalctl.gc_tuning)
def run_classification(client, of: ViewVectors, spec: LabelSetSpec, settings: ClassifySettings | None = None, *,
                       progress: bool = True):
    """Export (or reuse) the view's vectors (`vectors`: "task" or "document", see the module docstring),
    probe them, store the result (kind "classification")."""
    import sklearn  # deferred: sklearn

    settings = settings or ClassifySettings()
    rep = export_vectors(client, of, task="classification", progress=progress)
    exp = rep.export
    rows = labelled_rows(exp, spec)
    y = label_indicators(rows)
    t0 = time.perf_counter()
    out = classify(exp.vectors, y, rows.ids, settings, exp.positions(rows.ids))
    meta = exp.manifest["index_manifest"]
    identity = result_identity("classify", exp.manifest["index"], meta, rep.source, spec, asdict(settings))
    summary = {p: out["probes"][p]["summary"] for p in settings.probes}
    extra = {"index_manifest": meta, "vectors": rep.source.describe(), "export": str(exp.path),
             "sklearn": sklearn.__version__,
             "n_records": len(rows.ids), "n_labels": len(rows.support), "n_unlabelled": rows.n_unlabelled,
             "labels_dropped": rows.dropped, "summary": summary,
             "seconds": round(time.perf_counter() - t0, 3)}
    files = {"metrics.json": json.dumps(out["probes"], indent=2),
             "splits.json": json.dumps(out["splits"]),
             "labels.json": json.dumps({"kept": rows.support, "dropped": rows.dropped}, indent=2)}
    return results_store.write("classification", of.corpus.name, identity, files, extra=extra)


def result_identity(prefix: str, index: str, meta: dict, source, spec: LabelSetSpec, settings: dict) -> dict:
    """What decides a classification or clustering result: index content, vectors (view, and the task's
    field and prompt when not the document vectors, so those results keep their ids), label set, settings.
    `meta`: the index manifest; `source`: index_contract.VectorSource."""
    return {"name": f"{prefix}-{meta['model']}-{source.view}-{spec.name}".replace("/", "_"),
            "index": index, "model": meta["model"], "revision": meta.get("revision"),
            "prompt_variant": meta.get("prompt_variant"), "corpus_hash": meta["corpus_hash"],
            "view": source.view, **({"vectors": source.describe()} if source.task else {}),
            "label_set": asdict(spec), "settings": settings}
