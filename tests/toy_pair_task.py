"""A toy study task (docs/extending.md, "A new task"): pair similarity over citation pairs. For each cited
pair of the qrels set whose two patents are in the index, is the citing patent's vector closer (cosine) to
the cited one than to a patent drawn at random? The score, `win_rate`, is the fraction of pairs where it
is, and its headline metric (the report's headline shows it with no code here). One module plus one
registry line (`TASKS.register("pairsim", "toy_pair_task:TASK")`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalctl.config_files import SpecError
from evalctl.study.step_ids import QrelsId, Target, TaskStepId, identity_name
from evalctl.study.tasks import Recorded, SpecModels, Step

KIND = "pairsim"


@dataclass(frozen=True)
class PairEntry:
    corpus: str
    views: tuple[str, ...] = ("T",)
    models: tuple[str, ...] = ()
    include_tuned: bool = True
    qrels: str = "citations"
    seed: int = 0


def _step(entry: PairEntry, sid: TaskStepId, deps: tuple) -> Step:
    from evalctl import results_store
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.evaluators.vectors.export import export_vectors
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import IDENTITY, read_manifest
    from evalctl.opensearch.connection import make_client

    model_id, view = sid.target.model, sid.target.view

    def identity() -> dict:
        meta = read_manifest(make_client(), index_name(entry.corpus, model_id)) or {}
        return {"name": identity_name(sid), "index": {k: meta.get(k) for k in IDENTITY}, "view": view,
                "qrels": entry.qrels, "seed": entry.seed}

    def record():
        return results_store.find(KIND, entry.corpus, identity())

    def run() -> str:
        exp = export_vectors(make_client(), load_corpus(entry.corpus), load_views()[view], model_id,
                             progress=False).export
        pos = {d: i for i, d in enumerate(exp.ids)}
        vecs = np.asarray(exp.vectors, dtype=np.float64)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        pairs = [(p.query_id, p.doc_id) for p in load_qrels(entry.corpus, entry.qrels).pairs
                 if p.query_id in pos and p.doc_id in pos]
        others = np.random.default_rng(entry.seed).integers(0, len(exp.ids), len(pairs))
        wins = {f"{q} {d}": float(vecs[pos[q]] @ vecs[pos[d]] > vecs[pos[q]] @ vecs[o])
                for (q, d), o in zip(pairs, others)}
        rate = float(np.mean(list(wins.values())))
        results_store.write(KIND, entry.corpus, identity(), {}, extra={"scores": {"win_rate": rate}, "pairs": wins})
        return f"win rate {rate:.3f} over {len(wins)} cited pairs"

    def scores() -> dict:
        res = record()
        return res.manifest["scores"] if res else {}

    return Step(sid, run, lambda: bool(scores()), deps=deps, scores=scores, ref=lambda: (r := record()) and r.id)


class PairTask:
    name = KIND
    entry = PairEntry
    command = "pairsim"  # (a real task would add its CLI command too)
    headline_metrics = ("win_rate",)
    percent = False  # a win rate as it is (0.5), as nDCG

    def validate(self, spec, entry: PairEntry, at: str) -> None:
        if spec.corpus(entry.corpus).qrels is None:
            raise SpecError(f"{at}: corpus {entry.corpus} builds no qrels set to draw citation pairs from")

    def targets(self, models: SpecModels, entry: PairEntry):
        for m in models.of(entry):
            for view in entry.views:
                yield TaskStepId(self.command, Target(KIND, entry.corpus, m.id, view, entry.qrels))

    def step(self, ctx, entry: PairEntry, sid: TaskStepId) -> Step:
        return _step(entry, sid, (QrelsId(entry.corpus, entry.qrels), ctx.index_ids[(entry.corpus, sid.target.model)]))

    def expected_target(self, e) -> Target:
        return Target(KIND, e.corpus, e.model, e.view, e.method or "citations")

    def metrics(self, e, at: str) -> tuple[str, ...]:
        return ("win_rate",)

    def check_stored(self, spec, entry: PairEntry) -> None:
        """Its results hold everything its section shows."""

    def per_unit(self, step: Recorded, metric: str, runs: dict) -> dict[str, float]:
        from evalctl import results_store

        return next(r for r in results_store.iter_results(KIND, step.target.corpus) if r.id == step.ref).manifest["pairs"]

    def report(self, report, spec, steps: list[Recorded], out: Path) -> None:
        import pandas as pd

        report.h("Pair similarity (citation pairs)")
        done = [s for s in steps if s.scores]  # this task's steps, from their study records
        rows = [{"corpus": s.target.corpus, "model": s.target.model, "view": s.target.view,
                 "win_rate": round(s.scores["win_rate"], 4), "result": s.ref} for s in done]
        report.table(pd.DataFrame(rows) if rows else pd.DataFrame([{"note": "no pair-similarity results yet"}]))


TASK = PairTask()
