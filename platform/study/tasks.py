"""The task registry: what a study can ask of a corpus x model x view (retrieval, classification, clustering,
cross-landscape transfer, serving latency).

A task is one module with a `Task` and one line in `TASKS` (docs/extending.md): it owns its spec entry and
its validation, the targets and steps it plans, its metrics and headline metrics, its findings and its report
section; spec loading, the runner's plan, expected-score checks and the report loop over the registry, so a
new task touches no other file. Each task step also leaves a study record in the results store (its scores
and the id of the stored run or result behind them), so `evalctl report` rebuilds from the store alone, with
the cluster stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.finetune.recipes import default_model_id, get_recipe
from evalctl.registry import Registry
from evalctl.study.experiment import ExperimentSpec, Expected, FinetuneEntry, ModelEntry
from evalctl.study.step_ids import IndexId, StepId, Target, TaskStepId, record_name, step_key

if TYPE_CHECKING:
    from evalctl.study.page import Report


class _Identified:
    """What a step's id says, for a planned step and a recorded one alike."""

    id: StepId

    @property
    def key(self) -> str:
        """Readable and unique: "index espacenet-pizza all-minilm-l6-v2 [T]"."""
        return step_key(self.id)

    @property
    def kind(self) -> str:
        return self.id.kind


@dataclass
class Step(_Identified):
    id: StepId  # unique in a plan
    run: Callable[[], str]  # returns a one-line summary
    is_done: Callable[[], bool]
    deps: tuple[StepId, ...] = ()
    scores: Callable[[], dict] | None = None  # the stored scores, for expected-score checks
    ref: Callable[[], str | None] | None = None  # id of the stored run/result behind the scores
    remember: Callable[[], None] | None = None  # a task step: store its study record once done
    # a task step: store why it did not finish (status "failed" or "skipped", a one-line detail) for the report
    note_outcome: Callable[[str, str], None] | None = None

    @property
    def target(self) -> Target | None:
        """A task step's target, for expected-score matching."""
        return self.id.target if isinstance(self.id, TaskStepId) else None


@dataclass(frozen=True)
class Recorded(_Identified):
    """A task step as a report reads it: its id and its study record's scores and ref ({} and None: no
    record yet)."""

    id: TaskStepId
    scores: dict
    ref: str | None

    @property
    def target(self) -> Target:
        return self.id.target


@dataclass(frozen=True)
class Tuning:
    """A model the spec's finetune section trains: from `base` by `recipe` on the entry's corpus."""

    entry: FinetuneEntry
    base: str
    recipe: str
    model: str  # the tuned model's id


@dataclass(frozen=True)
class SpecModels:
    """The models a spec's tasks run: the configured ones and those its finetune section trains."""

    models: tuple[ModelEntry, ...]
    tunings: tuple[Tuning, ...]

    @property
    def base_of(self) -> dict[str, str]:
        """A model fine-tuned by the spec -> its base."""
        return {t.model: t.base for t in self.tunings}

    def of(self, entry) -> list[ModelEntry]:
        """An entry's `models` (default all) and the models tuned from them (unless `include_tuned` is false)."""
        base_of = self.base_of
        return [m for m in self.models if (entry.include_tuned or m.id not in base_of)
                and (not entry.models or m.id in entry.models or base_of.get(m.id) in entry.models)]


def spec_models(spec: ExperimentSpec) -> SpecModels:
    """The spec's models, the fine-tuned ones named as training will name them (nothing is trained or loaded)."""
    tunings = tuple(Tuning(ft, base, r, default_model_id(base, get_recipe(r).id, [ft.corpus], ft.match_size))
                    for ft in spec.finetune for base in ft.models or [m.id for m in spec.models] for r in ft.recipes)
    return SpecModels((*spec.models, *(ModelEntry(t.model) for t in tunings)), tunings)


@dataclass
class PlanContext:
    """What a task's step builder needs from the plan made so far."""

    spec: ExperimentSpec
    steps: list[Step]  # the steps planned before the tasks' (imports, qrels, fine-tuning, indexes)
    models: SpecModels
    index_ids: dict[tuple[str, str | None], IndexId]  # (corpus, model id or None) -> its index step

    def planned(self, sid: StepId) -> tuple[StepId, ...]:
        """(sid,) when the plan has that step (a dependency to wait for), else ()."""
        return (sid,) if any(s.id == sid for s in self.steps) else ()


class Task(Protocol):
    """A study task (as MTEB's AbsTask with its TaskMetadata). Its spec entries (`entry`, a dataclass) have at
    least `corpus`, `views`, `models` and `include_tuned`: the plan builds one index per corpus x model holding
    the views they ask for.

    Optional hooks, with generic ones in the report when a task has none: `headline(report, steps)` (its part
    of the headline table, else a table of its headline metrics per target) and `findings(report, steps,
    pairs) -> list[Finding]` (else the recipe findings of its first headline metric) and `report_scores(step,
    runs) -> dict` (a step's means as the report counts them, when a report setting such as the empty-query policy
    can make them differ from its study record's; else the record's)."""

    name: str  # the spec section and `Expected.task`
    entry: type
    command: str  # the CLI command that runs one step of it by hand, and the first word of its steps' keys
    headline_metrics: tuple[str, ...]  # what the headline and recipe tables show; a target's first one is its main
    percent: bool  # its scores are shares every table shows in percent (F1, V-measure), not as they are (nDCG)

    def validate(self, spec: ExperimentSpec, entry, at: str) -> None:
        """Refuse (SpecError naming `at` and the field) what the generic checks cannot know."""

    def targets(self, models: SpecModels, entry) -> Iterator[TaskStepId]:
        """The entry's task steps, from the spec alone (no node, no store, nothing heavy imported)."""

    def step(self, ctx: PlanContext, entry, sid: TaskStepId) -> Step: ...

    def expected_target(self, e: Expected) -> Target: ...

    def metrics(self, e: Expected, at: str) -> tuple[str, ...]:
        """The metric names an expected score may give (SpecError when the entry lacks what they depend on)."""

    def check_stored(self, spec: ExperimentSpec, entry) -> None:
        """Before a report is written: refuse, naming it, a stored input its section reads that is missing."""

    def report(self, report: Report, spec: ExperimentSpec, steps: list[Recorded], out: Path) -> None:
        """Its report section (and any page of its own in `out`), from the steps' study records."""

    def per_unit(self, step: Recorded, metric: str, runs: dict) -> dict[str, float]:
        """Per-query (or per-split/seed) values of `metric` behind a step's mean, for paired tests."""


def memo(lookup: Callable[[], Any]) -> Callable[[], Any]:
    """`lookup()` once until `.forget()`: a step's is_done, scores, ref and study record read one stored result,
    not one each (every read rebuilds the step's identity from the corpus, qrels and the index manifest)."""
    cache: list = []

    def get():
        if not cache:
            cache.append(lookup())
        return cache[0]

    get.forget = cache.clear
    return get


TASKS: Registry[Task] = Registry("task", {
    "retrieval": "evalctl.study.task_retrieval:TASK",
    "classification": "evalctl.study.task_labels:CLASSIFICATION",
    "clustering": "evalctl.study.task_labels:CLUSTERING",
    "transfer": "evalctl.study.task_transfer:TASK",
    "latency": "evalctl.study.task_latency:TASK",
})


def task_targets(spec: ExperimentSpec, models: SpecModels) -> list[tuple[Task, Any, TaskStepId]]:
    """(task, entry, step id) of every task step of the spec, in plan order: what the runner plans and the report
    reads. Two steps with one key (one target) are refused: they would share a study record."""
    out, planned_by = [], {}
    for name, task in TASKS.items():
        for i, entry in enumerate(spec.entries(name)):
            for sid in task.targets(models, entry):
                key = step_key(sid)
                if key in planned_by:
                    raise SpecError(f"{spec.source_path}: {planned_by[key]} and {name}[{i}] both plan {key} "
                                    f"(target {sid.target}): give each target once")
                planned_by[key] = f"{name}[{i}]"
                out.append((task, entry, sid))
    return out


def main_metric(task: Task, scores: dict) -> str | None:
    """The first of the task's headline metrics a step's scores hold (a clustering step holds its level's)."""
    return next((m for m in task.headline_metrics if m in scores), None)


# --------------------------------------------------------------------------- study records

RECORD_KIND = "study-record"


def _record_identity(spec_name: str, sid: TaskStepId) -> dict:
    return {"name": record_name(spec_name, sid), "spec": spec_name, "step": step_key(sid)}


def remember(spec_name: str, step: Step) -> None:
    """Store a finished task step's scores and ref under the spec's name (rewritten only when they change),
    so the report needs neither the node nor the index manifests that identify the step's result."""
    scores, ref = step.scores(), step.ref()
    if not scores:
        return
    identity = _record_identity(spec_name, step.id)
    old = results_store.find(RECORD_KIND, step.target.corpus, identity)
    if old is None or (old.manifest["scores"], old.manifest["ref"]) != (scores, ref):
        results_store.write(RECORD_KIND, step.target.corpus, identity, {}, extra={"scores": scores, "ref": ref})


def recorded(spec_name: str, sid: TaskStepId) -> Recorded:
    """The step as its study record holds it (no scores and no ref when it has none yet)."""
    record = results_store.find(RECORD_KIND, sid.target.corpus, _record_identity(spec_name, sid))
    return Recorded(sid, dict(record.manifest["scores"]), record.manifest["ref"]) if record else Recorded(sid, {}, None)


OUTCOME_KIND = "study-outcome"


def note_outcome(spec_name: str, step: Step, status: str, detail: str) -> None:
    """Store the latest `evalctl run` outcome of a task step that did not finish, so the report can say which
    systems are missing and why from the store alone."""
    results_store.write(OUTCOME_KIND, step.target.corpus, _record_identity(spec_name, step.id), {},
                        extra={"status": status, "detail": detail})


def last_outcome(spec_name: str, sid: TaskStepId) -> tuple[str, str] | None:
    """(status, detail) of the step's latest unfinished run, or None when no run stored one."""
    res = results_store.find(OUTCOME_KIND, sid.target.corpus, _record_identity(spec_name, sid))
    return (res.manifest["status"], res.manifest["detail"]) if res else None
