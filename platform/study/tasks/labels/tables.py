"""`evalctl tables`: classification and clustering results across models, views and label sets.

One row per stored result x probe (classification) or x code level (clustering): corpus, model (a
fine-tuned model appears under its own model id, so recipes sit next to their base model), view (marked
"(clustering prompt)" etc. when the vectors are those of the model's task prompt, not its document vectors),
label set, n, and for each metric the mean over splits/seeds with a 95% confidence interval.

The CI is a percentile bootstrap of the mean over the per-split (classification) or per-seed
(clustering) values, 10,000 resamples (scipy.stats.bootstrap), fixed random state. It therefore covers
the variation between splits or k-means seeds only, not document sampling; with 5 values it is coarse.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from evalctl import results_store
from evalctl.corpus.class_codes import LEVELS
from evalctl.evaluators.scoring.compare import run_ci
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.study.page.names import score_with_ci


def view_label(manifest: dict) -> str:
    """The view, marked when the vectors are the task prompt's rather than the document vectors."""
    task = (manifest.get("vectors") or {}).get("task")
    return f"{manifest['view']} ({task} prompt)" if task else manifest["view"]


def _rows_of(result) -> list[tuple[dict, list[dict]]]:
    """(row keys, per-split or per-seed metric dicts) for each probe or level of one result."""
    m, metrics = result.manifest, result.read_json("metrics.json")
    base = {"corpus": m["corpus"], "model": m["model"], "view": view_label(m), "label_set": m["label_set"]["name"]}
    if m["kind"] == "classification":
        return [({**base, "probe": probe, "n": m["n_records"], "labels": m["n_labels"]}, body["splits"])
                for probe, body in metrics.items()]
    return [({**base, "level": level, "rule": m["rule"], "n": body["n"], "k": body["k"]}, body["seeds"])
            for level, body in metrics.items()]


def task_table(task: str, metrics: tuple[str, ...], corpus: str | None = None, root=None, ids: set[str] | None = None,
               protocol: StatsProtocol = StatsProtocol()) -> list[dict]:
    """Rows of the stored results of `task` (a label task's name; `metrics`: those its results hold per split or seed)
    sorted by corpus, label set, view and model; each metric as mean, ci_low, ci_high (under `protocol`, as every
    table's CI), runs. `ids`: only these stored results (a report's own), not every result kept for the corpus."""
    rows = []
    for result in results_store.iter_results(task, corpus, root=root):
        if ids is not None and result.id not in ids:
            continue
        for keys, runs in _rows_of(result):
            row = dict(keys, runs=len(runs))
            for metric in metrics:
                values = [r[metric] for r in runs]
                lo, hi = run_ci(values, protocol)
                row.update({metric: float(np.mean(values)), f"{metric}_lo": lo, f"{metric}_hi": hi})
            rows.append(row)
    order = ("corpus", "label_set", "level", "probe", "view", "model")
    # code levels coarse to fine (section, class, subclass ...), everything else alphabetically
    return sorted(rows, key=lambda r: tuple(
        f"{LEVELS.index(r[k]):02d}" if r.get(k) in LEVELS else str(r.get(k, "")) for k in order))


def to_csv(rows: list[dict]) -> str:
    return pd.DataFrame(rows).to_csv(index=False, lineterminator="\n", na_rep="nan") if rows else ""


def percent_table(rows: list[dict], names: Callable[[str], str] = str) -> pd.DataFrame:
    """Metrics (the columns with a CI) as `mean [lo, hi]` in percent; `names`: the model column as a reader knows it
    (a report's)."""
    metrics = [k.removesuffix("_lo") for k in rows[0] if k.endswith("_lo")]
    keys = [k for k in rows[0] if k not in metrics and not k.endswith(("_lo", "_hi"))]
    return pd.DataFrame([{**{k: names(r[k]) if k == "model" else r[k] for k in keys},
                          **{m: score_with_ci(r[m], r[m + "_lo"], r[m + "_hi"], percent=True) for m in metrics}}
                         for r in rows])


def to_markdown(rows: list[dict], task: str) -> str:
    if not rows:
        return f"(no {task} results)"
    return percent_table(rows).to_markdown(index=False, disable_numparse=True)
