"""A study task from outside evalctl (docs/extending.md, "A new task"): pair similarity over citation pairs. For
each cited pair of the qrels set whose two patents are in the index, is the citing patent's vector closer (cosine)
to the cited one than to a patent drawn at random? The score, `win_rate`, is the fraction of pairs where it is, and
its main score: the report's headline shows it with no code here. Its package declares it as an entry point
(tests/plugin_task/pyproject.toml); installed, it joins specs, `evalctl run` and the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.qrels import load_qrels
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.evaluators.vectors.export import ViewVectors, export_vectors
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.opensearch.connection import make_client
from evalctl.study.abstasks.base import AbsTask, Computed, TaskMetadata
from evalctl.study.spec.step_ids import Target, TaskStepId

KIND = "pairsim"


@dataclass(frozen=True)
class PairEntry:
    corpus: str
    views: tuple[str, ...] = ("T",)
    models: tuple[str, ...] = ()
    include_tuned: bool = True
    qrels: str = "citations"
    seed: int = 0


class PairTask(AbsTask):
    metadata = TaskMetadata(name=KIND, command="pairsim", entry=PairEntry, title="Pair similarity (citation pairs)",
                            main_score="win_rate")  # a win rate as it is (0.5), as nDCG: not in percent

    def check_entry(self, spec, entry: PairEntry, at: str) -> None:
        if spec.corpus(entry.corpus).qrels is None:
            raise SpecError(f"{at}: corpus {entry.corpus} builds no qrels set to draw citation pairs from")

    def targets(self, models, entry: PairEntry):
        for m in models.of(entry):
            for view in entry.views:
                yield TaskStepId(self.command, Target(KIND, entry.corpus, m.id, view, entry.qrels))

    def identity(self, ctx, entry: PairEntry, sid: TaskStepId) -> dict:
        meta = read_manifest(make_client(), index_name(entry.corpus, sid.target.model)) or {}
        return {"index": result_identity(meta), "view": sid.target.view, "qrels": entry.qrels, "seed": entry.seed}

    def compute(self, ctx, entry: PairEntry, sid: TaskStepId) -> Computed:
        of = ViewVectors(load_corpus(entry.corpus), load_views()[sid.target.view], sid.target.model)
        exp = export_vectors(make_client(), of, progress=False).export
        pos = {d: i for i, d in enumerate(exp.ids)}
        vecs = np.asarray(exp.vectors, dtype=np.float64)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        pairs = [(p.query_id, p.doc_id) for p in load_qrels(entry.corpus, entry.qrels).pairs
                 if p.query_id in pos and p.doc_id in pos]
        others = np.random.default_rng(entry.seed).integers(0, len(exp.ids), len(pairs))
        wins = {f"{q} {d}": float(vecs[pos[q]] @ vecs[pos[d]] > vecs[pos[q]] @ vecs[o])
                for (q, d), o in zip(pairs, others)}
        rate = float(np.mean(list(wins.values())))
        res = results_store.write(KIND, entry.corpus, {"name": KIND, **self.identity(ctx, entry, sid)}, {},
                                  extra={"pairs": wins})
        return Computed({"win_rate": rate}, res.id, f"win rate {rate:.3f} over {len(wins)} cited pairs")

    def expected_target(self, e) -> Target:
        return Target(KIND, e.corpus, e.model, e.view, e.method or "citations")

    def per_unit(self, step, metric: str, runs) -> dict[str, float]:
        return results_store.get(step.target.corpus, step.ref).manifest["pairs"]

    def section(self, report, spec, steps, out: Path) -> None:
        import pandas as pd

        report.h(self.metadata.title)
        rows = [{"corpus": s.target.corpus, "model": s.target.model, "view": s.target.view,
                 "win_rate": round(s.scores["win_rate"], 4), "result": s.ref} for s in steps if s.scores]
        report.table(pd.DataFrame(rows) if rows else pd.DataFrame([{"note": "no pair-similarity results yet"}]))


TASK = PairTask()
