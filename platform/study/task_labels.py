"""The label tasks, classification and clustering: one result per corpus x model x view x label set from
the vectors read back from the index, their spec entry, expected-score and headline metrics and report
sections."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Literal

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.class_codes import LEVELS
from evalctl.corpus.label_sets import load_label_sets
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.evaluators.tasks import classification, clustering
from evalctl.indexers.index_contract import IndexState, vector_source
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest
from evalctl.opensearch.connection import make_client
from evalctl.study.display_names import model_title
from evalctl.study.step_ids import Target, TaskStepId
from evalctl.study.tasks import Recorded, SpecModels, Step, memo


@dataclass(frozen=True)
class LabelTaskEntry:
    """Classification or clustering of one corpus's vectors against label sets."""

    corpus: str
    views: tuple[str, ...] = ("TAC",)
    label_sets: tuple[str, ...] = ("cpc_subclass",)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    include_tuned: bool = True
    # task: the vectors of the model's classification/clustering prompt where it differs from the document
    # prompt (MTEB's convention; the index gets that field); document: the document vectors
    vectors: Literal["task", "document"] = "task"


def label_task_step(task: LabelTask, sid: TaskStepId, deps: tuple, vectors: str = "task") -> Step:
    """A classification or clustering result for one corpus x model x view x label set (`vectors`: the
    task's own prompt's vectors where the model has one, or the document vectors)."""
    t = sid.target
    kind, corpus_name, model_id, view = t.task, t.corpus, t.model, t.view
    spec = load_label_sets()[t.what]
    settings = task.settings()

    @memo
    def record():
        """The stored result for the index as it is now (same model revision, vectors, view)."""
        idx = index_name(corpus_name, model_id)
        meta = read_manifest(make_client(), idx)
        if not meta:
            return None
        source = vector_source(IndexState(idx, meta, ()), view, kind, vectors)
        return results_store.find(kind, corpus_name, classification.result_identity(
            task.command, idx, meta, source, spec, asdict(settings)))

    def stored() -> dict:
        """Mean scores as "<probe or level>/<metric>", e.g. logreg/micro_f1, subclass/v_measure."""
        res = record()
        if res is None:
            return {}
        return {f"{group}/{metric}": v["mean"] for group, metrics in res.manifest["summary"].items()
                for metric, v in metrics.items() if isinstance(v, dict)}

    def run() -> str:
        res = task.runner(make_client(), load_corpus(corpus_name), load_views()[view], model_id, spec, settings,
                     vectors=vectors, progress=False)
        record.forget()
        summary = res.manifest["summary"]
        if kind == "classification":
            return "; ".join(f"{p} micro-F1 {100 * v['micro_f1']['mean']:.1f}" for p, v in summary.items())
        return "; ".join(f"{lv} V {100 * v['v_measure']['mean']:.1f} ARI {100 * v['ari']['mean']:.1f}"
                         for lv, v in summary.items())

    return Step(sid, run, lambda: bool(stored()), deps=deps, scores=stored, ref=lambda: (r := record()) and r.id)


@dataclass(frozen=True)
class LabelTask:
    name: str  # classification | clustering
    command: str
    title: str  # its report section's heading
    runner: Callable  # evaluators/tasks' run_classification or run_clustering
    settings: type  # its settings
    headline_metrics: tuple[str, ...]
    entry: type = LabelTaskEntry
    percent: bool = True  # F1, V-measure and ARI are shown in percent, as the study gives them

    def validate(self, spec, entry: LabelTaskEntry, at: str) -> None:
        """Label sets are checked by the generic loop; nothing else is task-specific."""

    def check_stored(self, spec, entry: LabelTaskEntry) -> None:
        """Its results name their label sets and corpora; nothing else is read."""

    def targets(self, models: SpecModels, entry: LabelTaskEntry):
        for m in models.of(entry):
            for view in entry.views:
                for label_set in entry.label_sets:
                    yield TaskStepId(self.command, Target(self.name, entry.corpus, m.id, view, label_set))

    def step(self, ctx, entry: LabelTaskEntry, sid: TaskStepId) -> Step:
        return label_task_step(self, sid, (ctx.index_ids[(entry.corpus, sid.target.model)],), entry.vectors)

    def expected_target(self, e) -> Target:
        return Target(self.name, e.corpus, e.model, e.view, e.label_set)

    def metrics(self, e, at: str) -> tuple[str, ...]:
        """The score names a step stores: "<probe>/<metric>" for each probe (classification), "<level>/<metric>"
        for the label set's own level ("labels" for free labels) (clustering)."""
        label_sets = load_label_sets()
        if e.label_set not in label_sets:
            raise SpecError(f"{at}: a {self.name} score needs a label_set, one of {', '.join(label_sets)} "
                            f"(got {e.label_set!r})")
        if self.name == "classification":
            return tuple(f"{p}/{m}" for p in classification.PROBES for m in classification.METRICS)
        return tuple(f"{label_sets[e.label_set].level or 'labels'}/{m}" for m in clustering.METRICS)

    def per_unit(self, step: Recorded, metric: str, runs: dict) -> dict[str, float]:
        group, name = metric.split("/")
        res = next(r for r in results_store.iter_results(step.kind, step.target.corpus) if r.id == step.ref)
        body = res.read_json("metrics.json")[group]
        return {str(i): unit[name] for i, unit in enumerate(body.get("splits") or body.get("seeds"))}

    def report(self, report, spec, steps: list[Recorded], out: Path) -> None:
        from evalctl.study.task_tables import percent_table, task_table  # pandas, scipy

        report.h(self.title)
        mine = [s for s in steps if s.kind == self.name]
        ids = {s.ref for s in mine if s.ref}  # this spec's results, not older ones of the same corpus
        rows = [r for c in sorted({s.target.corpus for s in mine})
                for r in task_table(self.name, c, ids=ids, protocol=report.statistics)]
        if not rows:
            report.p(f"No {self.name} results yet (`evalctl run`; one by hand: `evalctl {self.command}`).")
            return
        report.table(percent_table(rows, self.name, names=model_title))
        produced = [f"{s.key} ({s.ref})" for s in mine if s.ref]
        report.p("Mean [bootstrap 95% CI over splits/seeds]. Produced by: " + "; ".join(produced))
        if any(r["view"].endswith(" prompt)") for r in rows):
            report.p(f"A view marked ({self.name} prompt) holds the vectors the model encoded with its {self.name} "
                     "prompt (MTEB's convention), the others its document vectors; each result's manifest records "
                     "the prompt (vectors.prompt).")


CLASSIFICATION = LabelTask("classification", "classify", "Classification (F1, %)", classification.run_classification,
                           classification.ClassifySettings, ("logreg/micro_f1", "knn/micro_f1"))
# a clustering step scores its label set's level ("labels": a set of free labels)
CLUSTERING = LabelTask("clustering", "cluster", "Clustering (%)", clustering.run_clustering, clustering.ClusterSettings,
                       tuple(f"{level}/v_measure" for level in (*LEVELS, "labels")))
