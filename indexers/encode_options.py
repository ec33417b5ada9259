"""How texts are encoded (prompt, device, batches, weights source, cache entry): encode_texts' options, declared
once; `evalctl encode` and `evalctl index` generate their options from these fields. Light to import (no
numpy, no torch): the CLI reads it when it starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from evalctl.indexers.model_loader import Source
from evalctl.indexers.runtime import Runtime
from evalctl.models import Role, TaskType
from evalctl.parameters import param

if TYPE_CHECKING:
    import numpy as np

DEVICE_HELP = "cpu, cuda, cuda:N, a comma list of devices, or 'all' for every local GPU (default: cuda when visible)."
INSTALLED = "installed"  # vectors of the installed packages' versions (encoder.encoding_versions)
IMPORTED = "imported"  # the versions of an entry of `evalctl vectors import` (evalctl.indexers.vectors_import)


@dataclass(frozen=True)
class PromptChoice:
    """Which of a model's prompts made a set of vectors (MTEB's convention): the role, the task whose prompt it is,
    the named variant. `evalctl vectors import` and `vectors merge` generate their options from these fields."""

    role: Role = param("document", help="The texts' role: documents or queries.")
    task_type: TaskType = param("retrieval", flag="--task",
                                help="Whose prompt made them (a label task's own prompt).")
    variant: str | None = param(None, flag="--prompt-variant",
                                help="Named prompt variant of the model (default: the model's).")

    def prompt(self, model) -> str:
        return model.prompt_for(self.role, task_type=self.task_type, variant=self.variant)


@dataclass(frozen=True)
class Encoded:
    vectors: np.ndarray  # float32 [n, dim], in the order of the texts
    n_truncated: int  # texts (with their prompt) cut at the token limit, read off the tokenisation that encoded them


class PartlyEncoded(Exception):
    """An encoder failed after encoding some of its texts: `done` (their positions) and their `vectors` are
    kept in the cache before `cause` is raised on (an endpoint's answered requests are paid for)."""

    def __init__(self, done: list[int], vectors: np.ndarray, cause: BaseException):
        super().__init__(str(cause))
        self.done, self.vectors, self.cause = done, vectors, cause


class TextEncoder(Protocol):
    """What encode_texts needs from an encoder (the real one is Encoder; tests may wrap it)."""

    dim: int
    precision: str

    def encode(self, texts: list[str], prompt: str) -> Encoded: ...


@dataclass(frozen=True)
class EncodeOptions:
    """`runtime` (over the process's, see evalctl.indexers.runtime) says how; `device` alone may be given
    instead. `versions` and `corpus` name the cache entry (see encoder.cache_key): an imported entry's texts
    that lack a vector are encoded into it."""

    variant: str | None = param(None, flag="--prompt-variant",
                                help="Named prompt set of the model (default: its default_variant).")
    task_type: TaskType | None = param("retrieval", help="Selects the prompt together with role and variant.")
    task: str | None = None
    encoder: TextEncoder | None = None  # a loaded encoder to use (default: one made for this call)
    device: str | None = param(None, help=DEVICE_HELP)
    runtime: Runtime | None = None
    batch_size: int | None = param(None, min=1, help="At most this many texts per encoding batch (default: the "
                                   "token budget alone decides).")
    commit_every: int = 512  # texts encoded between two writes to the cache
    source: Source = param("auto", help="Where weights come from; auto prefers an installed offline package.")
    cache_root: Path | None = None
    versions: str | None = INSTALLED
    corpus: str | None = None
    progress: bool = True
