"""Cross-landscape transfer: does a fine-tuned model retrieve worse than its base on another corpus?

For each tuned model (its base from its lineage, or given), both models' runs on the same corpus,
view and split come from evaluators.retrieval.retrieve (exact k-NN by default, so ANN noise cannot decide the
test); ranx scores each query (nDCG@10 by default); a paired test per (model, recipe) combination
(evaluators/scoring/significance.py, scipy) gives a p-value; Holm's step-down correction controls the
family-wise error over all combinations (docs/study.md: "5 of 8 combinations significantly worse").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from evalctl import results_store
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, retrieval_spec, retrieve
from evalctl.evaluators.scoring.runs import Ranking
from evalctl.evaluators.scoring.metrics import score
from evalctl.evaluators.scoring.significance import holm, paired_p
from evalctl.evaluators.tasks.transfer_params import TransferParams
from evalctl.models import get_model
from evalctl.corpus.qrels import load_qrels

KIND = "transfer"


def per_query(qrels: dict[str, dict[str, int]], ranking: Ranking, metric: str) -> dict[str, float]:
    """ranx's per-query scores; a query the run misses scores 0."""
    return score(ranking, qrels, (metric,)).per_query[metric]


@dataclass(frozen=True)
class TransferRow:
    tuned: str
    base: str
    recipe: str | None
    n_queries: int
    base_score: float
    tuned_score: float
    delta: float
    relative: float | None
    wins: int
    ties: int
    losses: int
    p: float
    p_holm: float
    verdict: str  # "degrades", "improves" or "n.s." at alpha after Holm


@dataclass(frozen=True)
class TransferReport:
    corpus: str
    view: str
    metric: str
    test: str
    alpha: float
    rows: list[TransferRow]
    runs: dict[str, str]  # model -> stored run id

    def table(self) -> str:
        columns = ["tuned", "base", "recipe", "n", f"base {self.metric}", "tuned", "delta", "rel.", "W/T/L", "p",
                   "p (Holm)", "verdict"]
        cells = [[r.tuned, r.base, r.recipe or "-", str(r.n_queries), f"{r.base_score:.4f}", f"{r.tuned_score:.4f}",
                  f"{r.delta:+.4f}", "-" if r.relative is None else f"{100 * r.relative:+.1f}%",
                  f"{r.wins}/{r.ties}/{r.losses}", f"{r.p:.3g}", f"{r.p_holm:.3g}", r.verdict] for r in self.rows]
        return pd.DataFrame(cells, columns=columns).to_markdown(index=False, disable_numparse=True) + "\n"

    @property
    def degraded(self) -> list[str]:
        return [r.tuned for r in self.rows if r.verdict == "degrades"]


def transfer(client, tuned: list[str], params: TransferParams, *, base: str | None = None,
             progress: bool = True) -> TransferReport:
    """Paired comparison of every tuned model with its base on the params' corpus, Holm-corrected across them."""
    qset = load_qrels(params.corpus, params.qrels)
    truth = qset.qrels(None if params.split == "all" else params.split)
    opts = RetrievalOptions(progress=progress)
    runs: dict[str, str] = {}
    scores: dict[str, dict[str, float]] = {}

    def scored(model_id: str) -> dict[str, float]:
        if model_id not in scores:
            asked = RetrievalParams(params.corpus, params.view, params.method, model_id, qrels=params.qrels,
                                    split=params.split, k=params.k)
            run = retrieve(client, retrieval_spec(asked), opts)
            runs[model_id] = run.id
            scores[model_id] = per_query(truth, run.ranking, params.metric)
        return scores[model_id]

    raw = []
    for t in tuned:
        lineage = get_model(t).lineage or {}
        b = base or lineage.get("base_model")
        if b is None:
            raise ValueError(f"model {t} has no lineage naming its base; pass --base")
        qs = sorted(truth)
        a = np.array([scored(b)[q] for q in qs])
        c = np.array([scored(t)[q] for q in qs])
        diff = c - a
        raw.append((t, b, lineage.get("recipe", {}).get("id"), a, c, diff, paired_p(c, a, params.test)))
    adjusted = holm([r[-1] for r in raw])
    rows = []
    for (t, b, recipe, a, c, diff, pv), ph in zip(raw, adjusted):
        verdict = "n.s." if ph >= params.alpha else ("degrades" if diff.mean() < 0 else "improves")
        rows.append(TransferRow(t, b, recipe, len(a), float(a.mean()), float(c.mean()), float(diff.mean()),
                                float(diff.mean() / a.mean()) if a.mean() else None,
                                int((diff > 0).sum()), int((diff == 0).sum()), int((diff < 0).sum()), pv, ph, verdict))
    return TransferReport(params.corpus, params.view, params.metric, params.test, params.alpha, rows, runs)


def save_report(report: TransferReport) -> results_store.Result:
    identity = {"name": f"transfer-{report.view}", "view": report.view, "metric": report.metric, "test": report.test,
                "alpha": report.alpha, "runs": report.runs}
    files = {"report.json": json.dumps({**asdict(report), "degraded": report.degraded}, indent=1),
             "table.md": report.table()}
    return results_store.write(KIND, report.corpus, identity, files)
