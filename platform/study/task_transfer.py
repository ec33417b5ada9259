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
from evalctl.evaluators.retrieval.methods import MAX_K
from evalctl.evaluators.scoring.metrics import METRICS, evaluate_run
from evalctl.evaluators.scoring.significance_params import PAIRED_TESTS
from evalctl.evaluators.tasks.transfer_params import METHODS, TransferParams
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.opensearch.connection import make_client
from evalctl.parameters import parameters
from evalctl.study.display_names import model_title
from evalctl.study.experiment import check_spec_name
from evalctl.study.retrieval_groups import stored_run
from evalctl.study.step_ids import QrelsId, Target, TaskStepId, identity_name
from evalctl.study.tasks import Recorded, SpecModels, Step, memo

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


def transfer_step(entry: TransferEntry, sid: TaskStepId, base: str, deps: tuple) -> Step:
    """Done when a study-step record for the same corpus version, both indexes and the settings holds its scores."""
    tuned, view = sid.target.model, sid.target.view

    def identity() -> dict:
        client, corpus = make_client(), load_corpus(entry.corpus)
        indexes = {m: result_identity(read_manifest(client, index_name(entry.corpus, m)) or {}) for m in (base, tuned)}
        return {"name": identity_name(sid), "corpus_hash": corpus.content_hash, "view": view, "indexes": indexes,
                "settings": _settings(entry), "qrels_spec": qrels_manifest(corpus, entry.qrels).get("spec")}

    record = memo(lambda: results_store.find("study-step", entry.corpus, identity()))

    def stored() -> dict:
        res = record()
        return res.manifest["scores"] if res else {}

    def run() -> str:
        from evalctl.evaluators.tasks.transfer import save_report, transfer  # pandas, scipy

        rep = transfer(make_client(), [tuned], TransferParams(entry.corpus, view, **_settings(entry)), base=base,
                       progress=False)
        row = rep.rows[0]
        scores = {"delta": row.delta, "base_score": row.base_score, "tuned_score": row.tuned_score, "p": row.p}
        res = save_report(rep)
        results_store.write("study-step", entry.corpus, identity(), {}, extra={"scores": scores, "result": res.id})
        record.forget()
        return (f"{entry.metric} {row.base_score:.4f} -> {row.tuned_score:.4f} ({row.delta:+.4f}, p {row.p:.3g}, "
                f"{row.n_queries} queries)")

    return Step(sid, run, lambda: bool(stored()), deps=deps, scores=stored,
                ref=lambda: (r := record()) and r.manifest["result"])


def _stored_report(step: Recorded) -> dict:
    res = next(r for r in results_store.iter_results(KIND, step.target.corpus) if r.id == step.ref)
    return res.read_json("report.json")


class TransferTask:
    name = KIND
    entry = TransferEntry
    command = "transfer"
    headline_metrics = ("delta",)
    percent = False

    def validate(self, spec, entry: TransferEntry, at: str) -> None:
        check_spec_name(entry.qrels, "qrels", at)
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
        if not 1 <= entry.k <= MAX_K:
            raise SpecError(f"{at}: k {entry.k} is outside the allowed range 1-{MAX_K}")

    def targets(self, models: SpecModels, entry: TransferEntry):
        for m in models.of(entry):
            if m.id not in models.base_of:
                continue  # a base model: the other side of every comparison
            for view in entry.views:  # the key leaves the method out
                yield TaskStepId(self.command, Target(KIND, entry.corpus, m.id, view, entry.method), what_in_key=False)

    def step(self, ctx, entry: TransferEntry, sid: TaskStepId) -> Step:
        tuned = sid.target.model
        base = ctx.models.base_of[tuned]
        deps = (*ctx.planned(QrelsId(entry.corpus, entry.qrels)), ctx.index_ids[(entry.corpus, base)],
                ctx.index_ids[(entry.corpus, tuned)])
        return transfer_step(entry, sid, base, deps)

    def expected_target(self, e) -> Target:
        return Target(KIND, e.corpus, e.model, e.view, e.method or "exact")

    def metrics(self, e, at: str) -> tuple[str, ...]:
        return SCORES

    def check_stored(self, spec, entry: TransferEntry) -> None:
        """Its results hold everything its section shows."""

    def per_unit(self, step: Recorded, metric: str, runs: dict) -> dict[str, float]:
        """Per query: the base's or the tuned model's score, or their difference (`p` has none)."""
        rep = _stored_report(step)
        (row,) = rep["rows"]
        base, tuned = (evaluate_run(stored_run(rep["runs"][m], runs)).per_query[rep["metric"]]
                       for m in (row["base"], row["tuned"]))
        if metric == "p":
            raise ValueError("p is one value per comparison, not per query")
        return {"base_score": base, "tuned_score": tuned, "delta": {q: tuned[q] - base[q] for q in base}}[metric]

    def report(self, report, spec, steps: list[Recorded], out: Path) -> None:
        import pandas as pd

        from evalctl.evaluators.scoring.significance import holm  # scipy

        if not spec.entries(KIND):
            return  # a section only for a spec that asks for transfer
        report.h("Cross-landscape transfer")
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
