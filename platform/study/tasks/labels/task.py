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
from evalctl.errors import BadInput
from evalctl.evaluators.tasks import classification, clustering
from evalctl.evaluators.vectors.export import ViewVectors
from evalctl.indexers.index_contract import IndexState, vector_source
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest
from evalctl.opensearch.connection import make_client
from evalctl.study.abstasks.base import AbsTask, Computed, IndexNeeds, TaskMetadata
from evalctl.study.abstasks.steps import Recorded, SpecModels
from evalctl.study.page.names import model_title
from evalctl.study.spec.step_ids import Target, TaskStepId


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


@dataclass(frozen=True)
class LabelTask(AbsTask):
    """Classification or clustering: `runner` (evaluators/tasks' run_classification or run_clustering) with its
    `settings` on the index's vectors of one view, scored per probe or per code level."""

    metadata: TaskMetadata
    runner: Callable
    settings: type
    unit_metrics: tuple[str, ...]  # what a result holds per split or seed, and each probe or level summarises

    def index_needs(self, entry: LabelTaskEntry) -> IndexNeeds:
        return IndexNeeds(tuple(entry.views), prompt_vectors=entry.vectors == "task")

    def targets(self, models: SpecModels, entry: LabelTaskEntry):
        for m in models.of(entry):
            for view in entry.views:
                for label_set in entry.label_sets:
                    yield TaskStepId(self.command, Target(self.name, entry.corpus, m.id, view, label_set))

    def identity(self, ctx, entry: LabelTaskEntry, sid: TaskStepId) -> dict:
        """The identity of its result for the index as it is now (same model revision, vectors, view)."""
        t = sid.target
        idx = index_name(t.corpus, t.model)
        meta = read_manifest(make_client(), idx)
        if not meta:
            raise BadInput(f"no index {idx} yet")
        source = vector_source(IndexState(idx, meta, ()), t.view, self.name, entry.vectors)
        return {"result": classification.result_identity(self.command, idx, meta, source, load_label_sets()[t.what],
                                                         asdict(self.settings()))}

    def adopt(self, ctx, entry: LabelTaskEntry, sid: TaskStepId) -> Computed | None:
        res = results_store.find(self.name, sid.target.corpus, self.identity(ctx, entry, sid)["result"])
        return Computed(_scores(res), res.id) if res else None

    def compute(self, ctx, entry: LabelTaskEntry, sid: TaskStepId) -> Computed:
        t = sid.target
        of = ViewVectors(load_corpus(t.corpus), load_views()[t.view], t.model, entry.vectors)
        res = self.runner(make_client(), of, load_label_sets()[t.what], self.settings(), progress=False)
        summary = res.manifest["summary"]
        if self.name == "classification":
            text = "; ".join(f"{p} micro-F1 {100 * v['micro_f1']['mean']:.1f}" for p, v in summary.items())
        else:
            text = "; ".join(f"{lv} V {100 * v['v_measure']['mean']:.1f} ARI {100 * v['ari']['mean']:.1f}"
                             for lv, v in summary.items())
        return Computed(_scores(res), res.id, text)

    def expected_target(self, e) -> Target:
        return Target(self.name, e.corpus, e.model, e.view, e.label_set)

    def main_score(self, target: Target) -> str:
        """Classification: the logistic-regression probe's micro-F1; clustering: the V-measure at its label set's
        level."""
        if self.name == "classification":
            return self.metadata.main_score
        return _metric(load_label_sets()[target.what].level or "labels", self.metadata.main_score)

    def metrics(self, e, at: str) -> tuple[str, ...]:
        """The score names a step stores: "<probe>/<metric>" for each probe (classification), "<level>/<metric>"
        for the label set's own level ("labels" for free labels) (clustering)."""
        label_sets = load_label_sets()
        if e.label_set not in label_sets:
            raise SpecError(f"{at}: a {self.name} score needs a label_set, one of {', '.join(label_sets)} "
                            f"(got {e.label_set!r})")
        if self.name == "classification":
            return tuple(_metric(p, m) for p in classification.PROBES for m in classification.METRICS)
        return tuple(_metric(label_sets[e.label_set].level or "labels", m) for m in clustering.METRICS)

    def per_unit(self, step: Recorded, metric: str, runs) -> dict[str, float]:
        """Per split (classification) or per seed (clustering)."""
        res = results_store.get(step.target.corpus, step.ref)
        for group, body in res.read_json("metrics.json").items():
            units = body.get("splits") or body.get("seeds")
            for name in units[0]:
                if _metric(group, name) == metric:
                    return {str(i): unit[name] for i, unit in enumerate(units)}
        raise KeyError(f"{metric} is not among the scores of result {step.ref}")

    def section(self, report, spec, steps: list[Recorded], out: Path) -> None:
        from evalctl.study.tasks.labels.tables import percent_table, task_table  # pandas, scipy

        report.h(self.metadata.title)
        mine = [s for s in steps if s.kind == self.name]
        ids = {s.ref for s in mine if s.ref}  # this spec's results, not older ones of the same corpus
        rows = [r for c in sorted({s.target.corpus for s in mine})
                for r in task_table(self.name, self.unit_metrics, c, ids=ids, protocol=report.statistics)]
        if not rows:
            report.p(f"No {self.name} results yet (`evalctl run`; one by hand: `evalctl {self.command}`).")
            return
        report.table(percent_table(rows, names=model_title))
        produced = [f"{s.key} ({s.ref})" for s in mine if s.ref]
        report.p("Mean [bootstrap 95% CI over splits/seeds]. Produced by: " + "; ".join(produced))
        if any(r["view"].endswith(" prompt)") for r in rows):
            report.p(f"A view marked ({self.name} prompt) holds the vectors the model encoded with its {self.name} "
                     "prompt (MTEB's convention), the others its document vectors; each result's manifest records "
                     "the prompt (vectors.prompt).")


def _metric(group: str, metric: str) -> str:
    """A stored score's name: the probe or code level, then the metric (logreg/micro_f1, subclass/v_measure)."""
    return f"{group}/{metric}"


def _scores(res) -> dict[str, float]:
    """A result's mean scores by their names."""
    return {_metric(group, metric): v["mean"] for group, metrics in res.manifest["summary"].items()
            for metric, v in metrics.items() if isinstance(v, dict)}


CLASSIFICATION = LabelTask(TaskMetadata("classification", "classify", LabelTaskEntry, "Classification (F1, %)",
                                        "logreg/micro_f1", ("logreg/micro_f1", "knn/micro_f1"), percent=True),
                           classification.run_classification, classification.ClassifySettings, classification.METRICS)
# a clustering step scores its label set's level ("labels": a set of free labels)
CLUSTERING = LabelTask(TaskMetadata("clustering", "cluster", LabelTaskEntry, "Clustering (%)", "v_measure",
                                    tuple(f"{level}/v_measure" for level in (*LEVELS, "labels")), percent=True),
                       clustering.run_clustering, clustering.ClusterSettings, clustering.METRICS)
