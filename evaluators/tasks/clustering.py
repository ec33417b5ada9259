"""`evalctl cluster`: MiniBatchKMeans on frozen vectors read back from the index, scored against codes.

Gold labels come from a label set (configs/label_sets.yaml), which is multi-label; each record gets
one gold class by a stated rule, recorded in the result:

- `first`: the record's first kept label, in the order the source lists its codes (Lens, Espacenet
  and WIPO exports put the main or first-assigned code first);
- `most_frequent`: the record's kept label with the highest support in the corpus (ties: first).

Vectors: as for classification, the view's under the model's clustering prompt where it differs from
the document prompt (`vectors="task"`), else or on request the document vectors.

k is the number of gold classes. Vectors are L2-normalised (k-means on the unit sphere, i.e. cosine).
Each seed runs MiniBatchKMeans(n_init=10, in float64 by default); V-measure, ARI, NMI and AMI
(scikit-learn) are reported per seed and as mean and sample standard deviation (ddof=1). `levels`
(cpc/ipc label sets only) re-runs the whole thing with the label set moved to each code level (section,
class, subclass, ...), the hierarchy-aware view: how well the same vectors separate coarse and fine
technology areas.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from threadpoolctl import threadpool_limits

from evalctl import results_store
from evalctl.corpus.label_sets import LabelSetSpec
from evalctl.evaluators.tasks.classification import labelled_rows, result_identity, summarise
from evalctl.evaluators.vectors.export import ViewVectors, export_vectors
from evalctl.corpus.class_codes import LEVELS
from evalctl.gc_tuning import long_lived_frozen
from evalctl.parameters import param
from evalctl.registry import Registry

# One gold class per record, from its kept labels (record order) and their corpus support.
RULES: Registry = Registry("clustering rule", {
    "first": lambda labels, support: labels[0],
    "most_frequent": lambda labels, support: max(labels, key=lambda lab: support[lab]),  # max keeps the first of ties
})
METRICS = ("v_measure", "ari", "nmi", "ami")


@dataclass(frozen=True)
class ClusterSettings:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    rule: str = param("first", choices=RULES, help="How a multi-label record gets its one gold class.")
    n_init: int = 10
    batch_size: int = 1024
    levels: tuple[str, ...] = param((), choices=LEVELS, comma=True,  # empty: the label set's own level only
                                    help="Code levels to score, e.g. section,class,subclass (cpc/ipc sets).")
    # k-means arithmetic. float64: scikit-learn's float32 path upcasts every block of distances of the
    # k-means++ seeding, 2-4x slower here; labels equal in 18 of 20 quickstart fits, other local optima in 2.
    precision: Literal["float64", "float32"] = "float64"

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r}; known: {', '.join(RULES)}")
        if not self.seeds:
            raise ValueError("at least one seed is needed")


def single_labels(labels: list[list[str]], support: dict[str, int], rule: str) -> list[str]:
    """One gold class per record by `rule` (see the module docstring)."""
    pick = RULES.get(rule)
    return [pick(labs, support) for labs in labels]


def cluster_scores(gold, predicted) -> dict[str, float]:
    from sklearn import metrics  # deferred: sklearn

    return {
        "v_measure": float(metrics.v_measure_score(gold, predicted)),
        "ari": float(metrics.adjusted_rand_score(gold, predicted)),
        "nmi": float(metrics.normalized_mutual_info_score(gold, predicted)),
        "ami": float(metrics.adjusted_mutual_info_score(gold, predicted)),
    }


def cluster(x: np.ndarray, gold: list[str], settings: ClusterSettings, *, copy: bool = True) -> dict:
    """Per-seed scores and their summary for k = number of gold classes. copy=False: `x` (the caller's
    own copy) is normalised in place, so the client holds the vectors once."""
    from sklearn.cluster import MiniBatchKMeans  # deferred: sklearn
    from sklearn.preprocessing import normalize

    x = normalize(np.asarray(x, dtype=np.dtype(settings.precision)), copy=copy)
    k = len(set(gold))
    per_seed = []
    for seed in settings.seeds:
        km = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=settings.n_init,
                             batch_size=settings.batch_size)
        # One OpenMP thread: at a few thousand points, thread synchronisation costs more than it saves
        # (up to 2x slower with 2 threads on a busy 2-core machine); the labels are the same.
        with threadpool_limits(limits=1, user_api="openmp"):
            labels = km.fit_predict(x)
        per_seed.append({"seed": seed, **cluster_scores(gold, labels)})
    return {"k": k, "n": len(gold), "seeds": per_seed,
            "summary": summarise([{m: s[m] for m in METRICS} for s in per_seed])}


def level_specs(spec: LabelSetSpec, levels: tuple[str, ...]) -> list[LabelSetSpec]:
    if not levels:
        return [spec]
    if spec.source == "labels":
        raise ValueError(f"label set {spec.name!r} holds free labels: it has no code levels to score")
    return [dataclasses.replace(spec, level=lv) for lv in levels]


@long_lived_frozen()  # full collections skip the long-lived heap (evalctl.gc_tuning)
def run_clustering(client, of: ViewVectors, spec: LabelSetSpec, settings: ClusterSettings | None = None, *,
                   progress: bool = True):
    """Export (or reuse) the view's vectors (`vectors`: "task" or "document"), cluster them per level,
    store the result (kind "clustering")."""
    import sklearn  # deferred: sklearn

    settings = settings or ClusterSettings()
    rep = export_vectors(client, of, task="clustering", progress=progress)
    exp = rep.export
    t0 = time.perf_counter()
    by_level, dropped = {}, {}
    for lv_spec in level_specs(spec, settings.levels):
        rows = labelled_rows(exp, lv_spec)
        gold = single_labels(rows.labels, rows.support, settings.rule)
        by_level[lv_spec.level or "labels"] = cluster(exp.rows(rows.ids), gold, settings, copy=False)
        dropped[lv_spec.level or "labels"] = rows.dropped
    meta = exp.manifest["index_manifest"]
    identity = result_identity("cluster", exp.manifest["index"], meta, rep.source, spec, asdict(settings))
    summary = {lv: {"k": r["k"], "n": r["n"], **r["summary"]} for lv, r in by_level.items()}
    extra = {"index_manifest": meta, "vectors": rep.source.describe(), "export": str(exp.path),
             "sklearn": sklearn.__version__, "rule": settings.rule, "labels_dropped": dropped,
             "summary": summary, "seconds": round(time.perf_counter() - t0, 3)}
    return results_store.write("clustering", of.corpus.name, identity,
                               {"metrics.json": json.dumps(by_level, indent=2)}, extra=extra)
