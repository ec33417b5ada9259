"""The index contract: what retrieval, vector read-back, `index verify` and the study runner check before they
read a corpus x model index, in one place.

An index can be read for (corpus, model, views) when it exists, was built from this version of the corpus
(its manifest's corpus hash) and holds the views; for a label task on a view, also that task's vectors
when the model's prompt for the task differs from its document prompt (`vector_source`). Its manifest
also says how close its vectors are to the embedding cache they were encoded into (the vector tolerance)
and which cache that is (the cache key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evalctl.config_files import SpecError
from evalctl.errors import BadInput
from evalctl.indexers.byte_vectors import is_byte, tolerance as byte_tolerance
from evalctl.indexers.encoder import cache_key
from evalctl.indexers.index_layout import field_unit, index_name, task_prompts, vector_field
from evalctl.indexers.index_loader import read_manifest
from evalctl.models import get_model

# Which vectors a label task reads: its own prompt's where the model has one ("task"), or the documents'.
VectorChoice = Literal["task", "document"]
VECTOR_CHOICES: tuple[str, ...] = ("task", "document")

# sq_fp16 rounds each component to half precision (|x| <= 1 for normalised vectors).
FP16_TOLERANCE = 1e-3
# An index loaded from this cache reads back bit-identical (max |diff| 0 is printed). A cache filled by
# another run agrees only to ~1e-7 (batch padding changes the float arithmetic: 1.4e-7 seen), while a
# wrong model, prompt or text differs by ~1e-1; so checks against the cache allow this much.
REENCODE_TOLERANCE = 1e-5


class IndexUnavailable(BadInput, LookupError):
    """The index is missing, holds another corpus version, or lacks a view."""


@dataclass(frozen=True)
class IndexState:
    name: str
    manifest: dict  # {} when the index does not exist
    problems: tuple[str, ...]  # the contract's failed checks, each a message saying what to do

    @property
    def exists(self) -> bool:
        return bool(self.manifest)

    @property
    def tolerance(self) -> float:
        """How far a vector read back may be from the cached one (sq_fp16 vs the float32 of flat and of sq, whose
        quantised copy serves the graph only; a byte index's, dequantised: half its step, plus a re-encoding's
        difference, which can move a component across a rounding boundary)."""
        if is_byte(self.manifest):
            return byte_tolerance(self.manifest) + REENCODE_TOLERANCE
        return FP16_TOLERANCE if self.manifest.get("encoder") == "sq_fp16" else REENCODE_TOLERANCE

    def cache_key(self, view: str, model=None, prompt: str | None = None):
        """The embedding cache the index's `view` vectors were loaded from (`model`: the manifest's by
        default; raises SpecError for a model no longer in the registry). `prompt`: a task field's
        prompt instead of the document prompt."""
        m = self.manifest
        return cache_key(model or get_model(m["model"]), "document", view, m["prompt_variant"],
                         prompt=m["document_prompt"] if prompt is None else prompt,
                         precision=m.get("precision", "float32"),
                         versions=m.get("encoding_versions"),  # absent: a format-1 entry
                         corpus=m.get("corpus"))


@dataclass(frozen=True)
class VectorSource:
    """The vectors a label task reads from an index: a view's document vectors (task None) or the view's
    vectors under the task's own prompt."""

    view: str
    task: str | None
    prompt: str | None  # the prompt that made the vectors

    @property
    def unit(self) -> str:
        return field_unit(self.view, self.task)

    @property
    def field(self) -> str:
        return vector_field(self.view, self.task)

    def describe(self) -> dict:
        """For result identities and manifests: which field and prompt."""
        return {"field": self.field, "task": self.task, "prompt": self.prompt}


def expected_task_prompt(manifest: dict, task: str) -> str | None:
    """The task's prompt when it differs from the document prompt, by the index's model spec and prompt
    variant (None: the task reads the document vectors). A model no longer in the registry: what the
    index recorded."""
    try:
        model = get_model(manifest["model"])
    except SpecError:
        return manifest.get("task_vectors", {}).get(task, {}).get("prompt")
    return task_prompts(model, manifest["prompt_variant"], (task,)).get(task)


def vector_source(state: IndexState, view: str, task: str | None, choice: VectorChoice = "task") -> VectorSource:
    """The vectors `task` reads on `view` (task None or choice "document": the document vectors)."""
    m = state.manifest
    prompt = expected_task_prompt(m, task) if task and choice == "task" and m.get("dim") else None
    if prompt is None:
        return VectorSource(view, None, m.get("document_prompt"))
    return VectorSource(view, task, prompt)


def _task_problems(name: str, manifest: dict, label_tasks: Mapping[str, Sequence[str]], how: str) -> list[str]:
    """A label task on a view whose prompt differs from the document prompt needs that prompt's vectors."""
    problems = []
    for task, views in label_tasks.items():
        prompt = expected_task_prompt(manifest, task) if manifest.get("dim") else None
        if prompt is None:
            continue
        have = manifest.get("task_vectors", {}).get(task)
        if have and have["prompt"] != prompt:
            problems.append(f"index {name} holds {task} vectors made with the prompt {have['prompt']!r}, the model's "
                            f"{task} prompt is now {prompt!r}: delete the index (evalctl index delete {name}) "
                            f"and rebuild it, or read the document vectors (--vectors document)")
        elif missing := [v for v in views if v not in (have or {}).get("views", ())]:
            problems.append(f"index {name} has no {task} vectors for view {', '.join(missing)} (the model's {task} "
                            f"prompt {prompt!r} differs from its document prompt); add them with `{how}`, or "
                            f"read the document vectors (--vectors document)")
    return problems


def inspect_index(client, corpus, model_id: str | None, views: Sequence[str] = (),
                  label_tasks: Mapping[str, Sequence[str]] | None = None) -> IndexState:
    """The corpus x model index and which checks of the contract it fails (none: it can be read).
    `label_tasks` ({task: views}): the label tasks to be read with their own prompt's vectors."""
    name = index_name(corpus.name, model_id)
    manifest = read_manifest(client, name)
    how = (f"evalctl index --corpus {corpus.name}" + (f" --model {model_id}" if model_id else "")
           + "".join(f" --view {v}" for v in views))
    if manifest is None:
        return IndexState(name, {}, (f"index {name} does not exist; build it with `{how}`",))
    problems = []
    if manifest.get("corpus_hash") != corpus.content_hash:
        problems.append(f"index {name} was built from corpus hash {manifest.get('corpus_hash')}, corpus "
                        f"{corpus.name} now has {corpus.content_hash}: re-index it")
    have = manifest.get("views", [])
    if missing := [v for v in views if v not in have]:
        problems.append(f"index {name} has no view {', '.join(missing)} (has {', '.join(have)}); "
                        f"add it with `{how}`")
    problems += _task_problems(name, manifest, label_tasks or {}, how)
    return IndexState(name, manifest, tuple(problems))


def open_index(client, corpus, model_id: str | None, views: Sequence[str] = (),
               error: type[Exception] = IndexUnavailable,
               label_tasks: Mapping[str, Sequence[str]] | None = None) -> IndexState:
    """The index, if it meets the contract; else `error` (the caller's error type) with the first problem."""
    state = inspect_index(client, corpus, model_id, views, label_tasks)
    if state.problems:
        raise error(state.problems[0])
    return state
