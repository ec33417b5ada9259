"""The task registry: what a study can ask of a corpus x model x view (retrieval, classification, clustering,
cross-landscape transfer).

A task is one module with a `Task` and one line in `TASKS` (docs/extending.md): spec validation, the
runner's plan, expected-score checks and the report loop over the registry, so a new task touches no other
file. Each task step also leaves a study record in the results store (its scores and the id of the stored
run or result behind them), so `evalctl report` rebuilds from the store alone, with the cluster stopped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from evalctl.registry import Registry
from evalctl.study.step_ids import IndexId, StepId, Target, TaskStepId, record_name, step_key

if TYPE_CHECKING:
    from evalctl.study.experiment import ExperimentSpec, Expected, ModelEntry
    from evalctl.study.page import Report


@dataclass
class Step:
    id: StepId  # unique in a plan
    run: Callable[[], str]  # returns a one-line summary
    is_done: Callable[[], bool]
    deps: tuple[StepId, ...] = ()
    scores: Callable[[], dict] | None = None  # the stored scores, for expected-score checks and reports
    ref: Callable[[], str | None] | None = None  # id of the stored run/result behind the scores
    remember: Callable[[], None] | None = None  # a task step: store its study record once done
    # a task step: store why it did not finish (status "failed" or "skipped", a one-line detail) for the report
    note_outcome: Callable[[str, str], None] | None = None

    @property
    def key(self) -> str:
        """Readable and unique: "index espacenet-pizza all-minilm-l6-v2 [T]"."""
        return step_key(self.id)

    @property
    def kind(self) -> str:
        return self.id.kind

    @property
    def target(self) -> Target | None:
        """A task step's target, for expected-score matching and the report."""
        return self.id.target if isinstance(self.id, TaskStepId) else None


@dataclass
class PlanContext:
    """What a task's step builder needs from the plan made so far."""

    spec: ExperimentSpec
    steps: list[Step]  # the steps planned before the tasks' (imports, qrels, fine-tuning, indexes)
    models_of: Callable[[Any], list[ModelEntry]]  # an entry's models, fine-tuned ones included
    index_ids: dict[tuple[str, str | None], IndexId]  # (corpus, model id or None) -> its index step
    base_of: dict[str, str] = dataclasses.field(default_factory=dict)  # a model fine-tuned by the spec -> its base

    def planned(self, sid: StepId) -> tuple[StepId, ...]:
        """(sid,) when the plan has that step (a dependency to wait for), else ()."""
        return (sid,) if any(s.id == sid for s in self.steps) else ()


class Task(Protocol):
    """A study task. Its spec entries (`entry`, a dataclass) have at least `corpus`, `views`, `models` and
    `include_tuned`: the plan builds one index per corpus x model holding the views they ask for."""

    name: str  # the spec section and `Expected.task`
    entry: type
    command: str  # the CLI command that runs one step of it by hand

    def validate(self, spec: ExperimentSpec, entry, at: str) -> None:
        """Refuse (SpecError naming `at` and the field) what the generic checks cannot know."""

    def steps(self, ctx: PlanContext, entry) -> Iterator[Step]: ...

    def expected_target(self, e: Expected) -> Target: ...

    def metrics(self, e: Expected, at: str) -> tuple[str, ...]:
        """The metric names an expected score may give (SpecError when the entry lacks what they depend on)."""

    def check_stored(self, spec: ExperimentSpec, entry) -> None:
        """Before a report is written: refuse, naming it, a stored input its section reads that is missing."""

    def report(self, report: Report, spec: ExperimentSpec, steps: list[Step], out: Path) -> None:
        """Its report section, from the steps' stored scores and results."""

    def per_unit(self, step: Step, metric: str, runs: dict) -> dict[str, float]:
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
})


# --------------------------------------------------------------------------- study records

RECORD_KIND = "study-record"


def _record_identity(spec_name: str, step: Step) -> dict:
    return {"name": record_name(spec_name, step.id), "spec": spec_name, "step": step.key}


def remember(spec_name: str, step: Step) -> None:
    """Store a finished task step's scores and ref under the spec's name (rewritten only when they change),
    so the report needs neither the node nor the index manifests that identify the step's result."""
    from evalctl import results_store

    scores, ref = step.scores(), step.ref()
    if not scores:
        return
    identity = _record_identity(spec_name, step)
    old = results_store.find(RECORD_KIND, step.target.corpus, identity)
    if old is None or (old.manifest["scores"], old.manifest["ref"]) != (scores, ref):
        results_store.write(RECORD_KIND, step.target.corpus, identity, {}, extra={"scores": scores, "ref": ref})


def recall(spec_name: str, step: Step) -> None:
    """Point the step's scores and ref at its study record (empty and None when it has none yet)."""
    from evalctl import results_store

    record = results_store.find(RECORD_KIND, step.target.corpus, _record_identity(spec_name, step))
    step.scores = lambda: dict(record.manifest["scores"]) if record else {}
    step.ref = lambda: record.manifest["ref"] if record else None


OUTCOME_KIND = "study-outcome"


def note_outcome(spec_name: str, step: Step, status: str, detail: str) -> None:
    """Store the latest `evalctl run` outcome of a task step that did not finish, so the report can say which
    systems are missing and why from the store alone."""
    from evalctl import results_store

    results_store.write(OUTCOME_KIND, step.target.corpus, _record_identity(spec_name, step), {},
                        extra={"status": status, "detail": detail})


def last_outcome(spec_name: str, step: Step) -> tuple[str, str] | None:
    """(status, detail) of the step's latest unfinished run, or None when no run stored one."""
    from evalctl import results_store

    res = results_store.find(OUTCOME_KIND, step.target.corpus, _record_identity(spec_name, step))
    return (res.manifest["status"], res.manifest["detail"]) if res else None
