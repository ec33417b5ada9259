"""A study step's identity as data: what an import, qrels, fine-tuning, index or task step makes. From it one
function each derives the step's key (the readable name a run prints and a dependency names), the name of its
study-step identity and the name of its study record; nothing reads a key or a name back into parts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Union

from evalctl.evaluators.scoring.runs import view_pair
from evalctl.indexers.passages import PassageSpec, passage_unit


@dataclass(frozen=True)
class Target:
    """What one task step scores, as an expected score names it."""

    task: str
    corpus: str
    model: str  # "bm25" for a text-only retrieval run
    view: str
    what: str  # the retrieval method, the label set, or the task's own kind of system
    query_view: str | None = None  # retrieval: the queries' view (the document view when they are the same)
    passages: PassageSpec | None = None  # a passage method's setting
    query_chunks: str | None = None  # a chunked query's fusion (query_chunks.FUSION); None: the query encoded whole

    @property
    def view_label(self) -> str:
        return view_pair(self.query_view, self.view)

    @property
    def setting_words(self) -> list[str]:
        """The passage setting and "chunked", as a step key and the report's method column write them."""
        return [*([self.passages.name] if self.passages else []), *(["chunked"] if self.query_chunks else [])]

    def __str__(self) -> str:
        values = (getattr(self, f.name) for f in dataclasses.fields(self))
        return "/".join(v.name if isinstance(v, PassageSpec) else str(v) for v in values if v is not None)


@dataclass(frozen=True)
class ImportId:
    kind: ClassVar[str] = "import"
    corpus: str


@dataclass(frozen=True)
class QrelsId:
    kind: ClassVar[str] = "qrels"
    corpus: str
    qrels: str  # the qrels set's name


@dataclass(frozen=True)
class FinetuneId:
    kind: ClassVar[str] = "finetune"
    model: str  # the fine-tuned model's id


@dataclass(frozen=True)
class IndexId:
    kind: ClassVar[str] = "index"
    corpus: str
    model: str | None  # None: a text-only (BM25) index
    views: tuple[str, ...]
    passages: tuple[tuple[str, PassageSpec], ...] = ()  # (view, setting) of each passage field
    # (task, its views) of each task whose own prompt's vectors the index holds (not in the key: one index per
    # corpus x model, whatever its fields)
    prompt_tasks: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class TaskStepId:
    """A task step: its target, the word its key opens with (the task's CLI command) and whether the key names
    the target's `what` (a transfer step's key leaves its method out)."""

    verb: str
    target: Target
    what_in_key: bool = True

    @property
    def kind(self) -> str:
        return self.target.task


StepId = Union[ImportId, QrelsId, FinetuneId, IndexId, TaskStepId]


def step_key(sid: StepId) -> str:
    """"import C", "qrels C Q", "finetune M", "index C M [V,...]" ("bm25" for a text-only index; its passage
    fields follow as "[V@wWsS,...]"), or a task's verb, corpus, model, view, what, passage setting and "chunked", with
    "(queries V)" when the queries read another view."""
    match sid:
        case ImportId(corpus):
            return f"import {corpus}"
        case QrelsId(corpus, qrels):
            return f"qrels {corpus} {qrels}"
        case FinetuneId(model):
            return f"finetune {model}"
        case IndexId(corpus, model, views, passages, _):
            units = ",".join(passage_unit(v, p) for v, p in passages)
            return f"index {corpus} {model or 'bm25'} [{','.join(views)}]" + (f" [{units}]" if units else "")
        case TaskStepId(verb, t, what_in_key):
            words = [verb, t.corpus, t.model, t.view, *([t.what] if what_in_key else []), *t.setting_words]
            queries = f" (queries {t.query_view})" if t.query_view not in (None, t.view) else ""
            return " ".join(words) + queries
    raise TypeError(f"not a step id: {sid!r}")


def identity_name(sid: StepId) -> str:
    """The "name" of the step's study-step identity (results store), e.g. "retrieve_pizza_bm25_T_bm25"."""
    return step_key(sid).replace(" ", "_")


def record_name(spec_name: str, sid: StepId) -> str:
    """The "name" of a task step's study record under a spec."""
    return f"{spec_name}-{step_key(sid)}".replace(" ", "_")
