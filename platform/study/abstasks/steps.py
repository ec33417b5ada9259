"""What the plan and the report know of a task step: a planned `Step` (its id, how to run it, whether it is
done), a `Recorded` one (its study record's scores and ref), and the models a spec's tasks run (the configured
ones and those its finetune section trains)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from evalctl.finetune.recipes import default_model_id, get_recipe
from evalctl.study.spec.experiment import ExperimentSpec, FinetuneEntry, ModelEntry
from evalctl.study.spec.step_ids import IndexId, StepId, Target, TaskStepId, step_key


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
