"""The cross-landscape transfer task: does a model fine-tuned on one corpus retrieve worse than its base on
another? One step per corpus x view x fine-tuned model: both models' runs (exact k-NN by default, so ANN noise
cannot decide it) and a paired test over the queries (evaluators/tasks/transfer.py). The report corrects the
p-values with Holm's step-down over every fine-tuned model of a corpus and view, as the study does ("5 of 8
combinations significantly worse", study notes section 12). `evalctl transfer` runs one by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.qrels import SPLITS, qrels_manifest
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.scoring.metrics import METRICS, evaluate_run
from evalctl.evaluators.scoring.significance_params import PAIRED_TESTS
from evalctl.evaluators.tasks.transfer_params import METHODS, TransferParams
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.opensearch.connection import make_client
from evalctl.parameters import parameters
from evalctl.study.abstasks.base import AbsTask, Computed, TaskMetadata
from evalctl.study.abstasks.steps import Recorded, SpecModels
from evalctl.study.page.names import model_title
from evalctl.study.spec.step_ids import QrelsId, StepId, Target, TaskStepId

KIND = "transfer"
SCORES = ("delta", "base_score", "tuned_score", "p")  # the tuned model's mean minus its base's, both means, p


@dataclass(frozen=True)
class TransferEntry:
    corpus: str  # the other landscape: where fine-tuned models meet their bases
    views: tuple[str, ...] = ("T",)
    models: tuple[str, ...] = ()  # base models whose fine-tuned versions are compared (default: all)
    include_tuned: bool = True  # the task compares fine-tuned models: it must stay true
    method: str = "exact"  # one of METHODS
    qrels: str = "citations"
    split: str = "test"
    metric: str = "ndcg@10"
    test: str = "wilcoxon"  # one of PAIRED_TESTS
    alpha: float = 0.05
    k: int = 100


def _settings(entry: TransferEntry) -> dict:
    """The entry's TransferParams but corpus and view (a step's target holds those)."""
    return {p.name: getattr(entry, p.name) for p in parameters(TransferParams) if p.name not in ("corpus", "view")}


def _stored_report(step: Recorded) -> dict:
    return results_store.get(step.target.corpus, step.ref).read_json("report.json")


class TransferTask(AbsTask):
    metadata = TaskMetadata(KIND, "transfer", TransferEntry, "Cross-landscape transfer", "delta")

    def check_entry(self, spec, entry: TransferEntry, at: str) -> None:
        if not entry.include_tuned:
            raise SpecError(f"{at}: include_tuned: false leaves a transfer nothing to compare")
        if not spec.finetune:
            raise SpecError(f"{at}: the spec fine-tunes no model (a finetune section) to compare with its base")
        if entry.corpus in {ft.corpus for ft in spec.finetune}:  # its qrels would not guard the training pairs
            raise SpecError(f"{at}: corpus {entry.corpus} is where the spec fine-tunes; a transfer compares on another "
                            "landscape (a retrieval entry compares tuned and base models on the training corpus)")
        if entry.method not in METHODS:
            raise SpecError(f"{at}: method {entry.method!r}: a transfer compares two models' runs, {' or '.join(METHODS)}")
        if entry.metric not in METRICS:
            raise SpecError(f"{at}: unknown metric {entry.metric!r} (one of {', '.join(METRICS)})")
        if entry.test not in PAIRED_TESTS:
            raise SpecError(f"{at}: unknown test {entry.test!r} ({', '.join(PAIRED_TESTS[:-1])} or {PAIRED_TESTS[-1]})")
        if not 0 < entry.alpha < 1:
            raise SpecError(f"{at}: alpha {entry.alpha} must be between 0 and 1")
        if entry.split not in SPLITS:
            raise SpecError(f"{at}: unknown split {entry.split!r} (one of {', '.join(SPLITS)})")

    def targets(self, models: SpecModels, entry: TransferEntry):
        for m in models.of(entry):
            if m.id not in models.base_of:
                continue  # a base model: the other side of every comparison
            for view in entry.views:  # the key leaves the method out
                yield TaskStepId(self.command, Target(KIND, entry.corpus, m.id, view, entry.method), what_in_key=False)

    def deps(self, ctx, entry: TransferEntry, sid: TaskStepId) -> tuple[StepId, ...]:
        tuned = sid.target.model
        return (*ctx.planned(QrelsId(entry.corpus, entry.qrels)),
                ctx.index_ids[(entry.corpus, ctx.models.base_of[tuned])], ctx.index_ids[(entry.corpus, tuned)])

    def identity(self, ctx, entry: TransferEntry, sid: TaskStepId) -> dict:
        client, corpus = make_client(), load_corpus(entry.corpus)
        indexes = {m: result_identity(read_manifest(client, index_name(entry.corpus, m)) or {})
                   for m in (ctx.models.base_of[sid.target.model], sid.target.model)}
        return {"corpus_hash": corpus.content_hash, "view": sid.target.view, "indexes": indexes,
                "settings": _settings(entry), "qrels_spec": qrels_manifest(corpus, entry.qrels).get("spec")}

    def compute(self, ctx, entry: TransferEntry, sid: TaskStepId) -> Computed:
        from evalctl.evaluators.tasks.transfer import save_report, transfer  # pandas, scipy

        tuned = sid.target.model
        rep = transfer(make_client(), [tuned], TransferParams(entry.corpus, sid.target.view, **_settings(entry)),
                       base=ctx.models.base_of[tuned], progress=False)
        row = rep.rows[0]
        scores = {"delta": row.delta, "base_score": row.base_score, "tuned_score": row.tuned_score, "p": row.p}
        return Computed(scores, save_report(rep).id, f"{entry.metric} {row.base_score:.4f} -> {row.tuned_score:.4f} "
                                                     f"({row.delta:+.4f}, p {row.p:.3g}, {row.n_queries} queries)")

    def expected_target(self, e) -> Target:
        return Target(KIND, e.corpus, e.model, e.view, e.method or "exact")

    def metrics(self, e, at: str) -> tuple[str, ...]:
        return SCORES

    def per_unit(self, step: Recorded, metric: str, runs) -> dict[str, float]:
        """Per query: the base's or the tuned model's score, or their difference (`p` has none)."""
        rep = _stored_report(step)
        (row,) = rep["rows"]
        base, tuned = (evaluate_run(runs.stored(rep["runs"][m])).per_query[rep["metric"]]
                       for m in (row["base"], row["tuned"]))
        if metric == "p":
            raise ValueError("p is one value per comparison, not per query")
        return {"base_score": base, "tuned_score": tuned, "delta": {q: tuned[q] - base[q] for q in base}}[metric]

    def section(self, report, spec, steps: list[Recorded], out: Path) -> None:
        import pandas as pd

        from evalctl.evaluators.scoring.significance import holm  # scipy

        if not spec.entries(KIND):
            return  # a section only for a spec that asks for transfer
        report.h(self.metadata.title)
        done = [s for s in steps if s.kind == KIND and s.scores]
        if not done:
            report.p("No transfer results yet (`evalctl run`; one by hand: `evalctl transfer`).")
            return
        for (corpus, view), group in pd.DataFrame([
                {"corpus": s.target.corpus, "view": s.target.view, "step": s} for s in done]).groupby(["corpus", "view"]):
            mine = list(group["step"])
            adjusted = holm([s.scores["p"] for s in mine])
            rows = []
            for s, p_holm in zip(mine, adjusted):
                rep, sc = _stored_report(s), s.scores
                alpha = rep["alpha"]
                verdict = "n.s." if p_holm >= alpha else ("degrades" if sc["delta"] < 0 else "improves")
                rows.append({"model": model_title(s.target.model), "base": model_title(rep["rows"][0]["base"]),
                             "recipe": rep["rows"][0]["recipe"] or "-", f"base {rep['metric']}": round(sc["base_score"], 4),
                             f"tuned {rep['metric']}": round(sc["tuned_score"], 4), "delta": round(sc["delta"], 4),
                             "p": f"{sc['p']:.3g}", "p (Holm)": f"{p_holm:.3g}", "verdict": verdict, "result": s.ref})
            report.p(f"Corpus {corpus}, view {view}: each fine-tuned model against its base ({rep['test']} test per "
                     f"query, Holm-corrected over the {len(mine)} model(s), alpha {alpha}).")
            report.table(pd.DataFrame(rows))


TASK = TransferTask()
