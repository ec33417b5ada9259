"""What a study task is (as MTEB's `AbsTask` with its `TaskMetadata`): declared metadata (its spec section, CLI
command, entry type, main score, headline metrics, report title, the tasks it reads) over a base class that owns
the common story, so a task writes only its own computation and report section.

The base validates the fields an entry declares, plans one step per target and makes it resumable: a step is done
when a study-step record for the same identity (what the task says makes a result this step's: the corpus
version, the index, the settings) names an intact stored result, or when the task adopts one made by hand;
running it computes, stores the record and forgets what it read. The report's hooks have one signature each
(checked when a task registers, registry.py) with defaults: a headline table of the task's headline metrics, the
recipe findings of its main score, no limitations.
"""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.errors import BadInput
from evalctl.evaluators.retrieval.methods import MAX_K
from evalctl.indexers.passages import PassageSpec
from evalctl.study.abstasks.steps import PlanContext, Recorded, SpecModels, Step, memo
from evalctl.study.page.names import model_title, score_text
from evalctl.study.spec.experiment import Expected, ExperimentSpec, check_spec_name
from evalctl.study.spec.step_ids import QrelsId, StepId, Target, TaskStepId, identity_name

if TYPE_CHECKING:
    from evalctl.study.page.document import Report, RunCache
    from evalctl.study.page.findings import Finding

STEP_KIND = "study-step"  # the record naming a step's stored result, found by the step's identity
# where a record names its result: "ref"; records of the tasks before this base: "run" (retrieval), "result" (the
# others), read so that a store's finished steps stay done
REF_KEYS = ("ref", "run", "result")
ENTRY_FIELDS = ("corpus", "views", "models", "include_tuned")  # the plan builds one index per corpus x model


@dataclass(frozen=True)
class TaskMetadata:
    """What a task declares, read by spec loading, the plan and the report."""

    name: str  # its spec section, `task:` of an expected score, the kind of its steps
    command: str  # the CLI command that runs one step by hand, and the first word of its steps' keys
    entry: type  # its spec entry: a dataclass with at least ENTRY_FIELDS
    title: str  # its report section's heading
    main_score: str  # a step's main metric (what findings test and the recipe table marks), unless main_score()
    headline_metrics: tuple[str, ...] = ()  # what the headline and recipe tables show (default: the main score)
    percent: bool = False  # its scores are shares every table shows in percent (F1, V-measure), not as they are
    reads: tuple[str, ...] = ()  # other tasks whose steps its findings and section read

    def __post_init__(self):
        if not self.headline_metrics:
            object.__setattr__(self, "headline_metrics", (self.main_score,))
        fields = {f.name for f in dataclasses.fields(self.entry)} if dataclasses.is_dataclass(self.entry) else set()
        if missing := [f for f in ENTRY_FIELDS if f not in fields]:
            raise TypeError(f"task {self.name}: its entry {self.entry.__name__} lacks {', '.join(missing)} "
                            f"(a dataclass with at least {', '.join(ENTRY_FIELDS)})")


@dataclass(frozen=True)
class IndexNeeds:
    """What an entry's steps read from each of its models' indexes: the plan builds one index per corpus x model
    holding what every entry needs."""

    views: tuple[str, ...]
    passages: tuple[PassageSpec, ...] = ()  # passage fields of each of the views, one per setting
    prompt_vectors: bool = False  # the vectors of the task's own prompt too (MTEB's convention), where it has one


@dataclass(frozen=True)
class Computed:
    """What a step's computation gives: its scores, the id of the stored run or result behind them, a summary."""

    scores: dict[str, float]
    ref: str
    summary: str = ""


class AbsTask(ABC):
    """A study task: its metadata, and the methods the base calls (abstract: targets, identity, compute, per_unit,
    section; hooks with defaults: the others)."""

    metadata: ClassVar[TaskMetadata]

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def command(self) -> str:
        return self.metadata.command

    @property
    def entry(self) -> type:
        return self.metadata.entry

    @property
    def headline_metrics(self) -> tuple[str, ...]:
        return self.metadata.headline_metrics

    @property
    def percent(self) -> bool:
        return self.metadata.percent

    # ------------------------------------------------------------------ the spec

    def validate(self, spec: ExperimentSpec, entry, at: str) -> None:
        """Refuse (SpecError naming `at` and the field) what the generic checks of spec loading cannot know: the
        fields every task's entry shares where it declares them (a qrels set's name, the depth k), then
        `check_entry`."""
        if hasattr(entry, "qrels"):
            check_spec_name(entry.qrels, "qrels", at)
        if hasattr(entry, "k") and not 1 <= entry.k <= MAX_K:
            raise SpecError(f"{at}: k {entry.k} is outside the allowed range 1-{MAX_K}")
        self.check_entry(spec, entry, at)

    def check_entry(self, spec: ExperimentSpec, entry, at: str) -> None:
        """The task's own checks of an entry."""

    @abstractmethod
    def targets(self, models: SpecModels, entry) -> Iterator[TaskStepId]:
        """The entry's task steps, from the spec alone (no node, no store, nothing heavy imported)."""

    def index_needs(self, entry) -> IndexNeeds:
        """What its steps read from the indexes: the entry's views."""
        return IndexNeeds(tuple(entry.views))

    # ------------------------------------------------------------------ a step

    def deps(self, ctx: PlanContext, entry, sid: TaskStepId) -> tuple[StepId, ...]:
        """The steps it waits for: the qrels set it reads (where the spec builds it) and its model's index."""
        t = sid.target
        qrels = ctx.planned(QrelsId(t.corpus, entry.qrels)) if hasattr(entry, "qrels") else ()
        return (*qrels, ctx.index_ids[(t.corpus, None if t.model == "bm25" else t.model)])

    @abstractmethod
    def identity(self, ctx: PlanContext, entry, sid: TaskStepId) -> dict:
        """What makes a stored result this step's (corpus version, index identity, settings); may read the node
        and the store, and raise BadInput while they lack what it reads (the step is then not done)."""

    @abstractmethod
    def compute(self, ctx: PlanContext, entry, sid: TaskStepId) -> Computed:
        """Run the step: compute, store the result, give its scores and id."""

    def adopt(self, ctx: PlanContext, entry, sid: TaskStepId) -> Computed | None:
        """A result of the same inputs made by hand (`evalctl <command>`), which the step then takes as its own."""
        return None

    def step(self, ctx: PlanContext, entry, sid: TaskStepId) -> Step:
        """The planned step: done when its study-step record names an intact result (or one is adopted)."""
        corpus = sid.target.corpus

        def identity() -> dict:
            return {"name": identity_name(sid), **self.identity(ctx, entry, sid)}

        def keep(c: Computed) -> None:
            results_store.write(STEP_KIND, corpus, identity(), {}, extra={"scores": c.scores, "ref": c.ref})

        @memo
        def record():
            try:
                res = results_store.find(STEP_KIND, corpus, identity())
                if res and (ref := _ref(res.manifest)) and results_store.intact(corpus, ref):
                    return res
                adopted = self.adopt(ctx, entry, sid)  # none, or its result is gone: adopt or redo
            except BadInput:  # no corpus, qrels or index yet
                return None
            if adopted is None:
                return None
            keep(adopted)
            return results_store.find(STEP_KIND, corpus, identity())

        def stored() -> dict:
            res = record()
            return res.manifest["scores"] if res else {}

        def run() -> str:
            c = self.compute(ctx, entry, sid)
            keep(c)
            record.forget()
            return c.summary

        return Step(sid, run, lambda: bool(stored()), deps=self.deps(ctx, entry, sid), scores=stored,
                    ref=lambda: (r := record()) and _ref(r.manifest))

    # ------------------------------------------------------------------ scores

    def main_score(self, target: Target) -> str:
        """A step's main metric."""
        return self.metadata.main_score

    def expected_target(self, e: Expected) -> Target:
        """The target an expected score names."""
        return Target(self.name, e.corpus, e.model, e.view, e.method)

    def metrics(self, e: Expected, at: str) -> tuple[str, ...]:
        """The metric names an expected score may give (SpecError when the entry lacks what they depend on)."""
        return self.headline_metrics

    @abstractmethod
    def per_unit(self, step: Recorded, metric: str, runs: RunCache) -> dict[str, float]:
        """Per-query (or per-split/seed) values of `metric` behind a step's mean, for paired tests."""

    def report_scores(self, step: Recorded, runs: RunCache) -> dict[str, float]:
        """A step's means as the report counts them (a report setting such as the empty-query policy can make them
        differ from its study record's)."""
        return step.scores

    # ------------------------------------------------------------------ the report

    def check_stored(self, spec: ExperimentSpec, entry) -> None:
        """Before a report is written: refuse, naming it, a stored input its section reads that is missing."""

    def headline(self, report: Report, steps: list[Recorded], out: Path) -> None:
        """Its part of the headline (it may draw a chart into `out`): a row per target with stored scores, its
        headline metrics."""
        import pandas as pd

        done = [s for s in steps if s.kind == self.name and self.main_score(s.target) in s.scores]
        if not done:
            return
        metrics = [m for m in self.headline_metrics if any(m in s.scores for s in done)]
        unit = " (%)" if self.percent else ""
        report.p(f"{self.name}: {', '.join(metrics)}{unit} per target (its section below has the details).")
        report.table(pd.DataFrame([{"corpus": s.target.corpus, "model": model_title(s.target.model),
                                    "view": s.target.view_label, "what": s.target.what,
                                    **{m: score_text(s.scores[m], self.percent) if m in s.scores else "-"
                                       for m in metrics}} for s in done]))

    def findings(self, report: Report, spec: ExperimentSpec, steps: list[Recorded], pairs: list[dict]) -> list[Finding]:
        """Its short claims (`steps`: its own and those of the tasks it reads; `pairs`: its recipe comparisons):
        the recipe findings of its main score."""
        from evalctl.study.page.findings import FindingTests, recipe_findings  # scipy

        return recipe_findings([p for p in pairs if p["main"]], FindingTests(report.statistics))

    @abstractmethod
    def section(self, report: Report, spec: ExperimentSpec, steps: list[Recorded], out: Path) -> None:
        """Its report section (and any page of its own in `out`), from the steps' study records."""

    def limitations(self, report: Report, spec: ExperimentSpec, steps: list[Recorded]) -> list[str]:
        """Facts of what ran that qualify its results (sentences for the report's limitations)."""
        return []


def _ref(manifest: dict) -> str | None:
    return next((manifest[k] for k in REF_KEYS if manifest.get(k)), None)


def check_task(name: str, task) -> None:
    """Refuse a registered task that is no AbsTask, is registered under another name than its own, or overrides a
    method with another signature than the base's (a task written from other docs would fail mid-report)."""
    if not isinstance(task, AbsTask):
        raise TypeError(f"task {name}: {task!r} is not an AbsTask (platform/study/abstasks/base.py)")
    if task.name != name:
        raise TypeError(f"task {name}: registered under another name than its metadata's ({task.name})")
    for attr, base in vars(AbsTask).items():
        mine = getattr(type(task), attr)
        if attr.startswith("_") or not inspect.isfunction(base) or mine is base:
            continue
        want, got = inspect.signature(base), inspect.signature(mine)
        if list(want.parameters) != list(got.parameters):
            raise TypeError(f"task {name}: {attr}{got} does not match the base's {attr}{want}")
