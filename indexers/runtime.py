"""How encoding runs: device(s), precision, tokens per forward pass, attention implementation, inference backend.

Set by `evalctl index|encode|run` options or a study spec's `runtime:` section. `using(runtime)` makes one the
process's for a command, so every encoder made meanwhile (documents, the queries of retrieval steps, label
tasks; some in loader threads) runs alike: precision is part of a vector's identity (the embedding-cache key),
and a study's query and document vectors must agree. So is the backend: torch, or onnx / openvino (CPU inference of an
exported copy of the model, evalctl.indexers.backends).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

Precision = Literal["float32", "float16", "bfloat16"]
PRECISIONS: tuple[str, ...] = ("float32", "float16", "bfloat16")
Backend = Literal["torch", "onnx", "openvino"]
BACKENDS: tuple[str, ...] = ("torch", "onnx", "openvino")
# CPU: batches past a few thousand tokens buy nothing, and 16k tokens of a small model fit any machine.
CPU_BATCH_TOKENS = 16384
# CUDA: beyond this many tokens a forward pass is no faster per token (and one OOM costs more).
MAX_CUDA_BATCH_TOKENS = 262144


@dataclass(frozen=True)
class Runtime:
    """Unset fields (None) take the defaults: device cuda when visible else cpu; precision float32 on a CPU,
    the model spec's dtype on an accelerator; max_batch_tokens from free device memory on CUDA,
    CPU_BATCH_TOKENS on a CPU; attn_implementation the spec's model_kwargs, else transformers' choice."""

    device: str | None = None  # cpu, cuda, cuda:N, mps, a comma list of these, or "all": every visible GPU
    precision: Precision | None = None
    max_batch_tokens: int | None = None  # padded tokens (texts x longest) per forward pass
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2 (flash: unpadded batches)
    backend: Backend | None = None  # torch (default); onnx, openvino: float32 on the CPU, through optimum

    def __post_init__(self) -> None:
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ValueError(f"runtime max_batch_tokens must be positive, got {self.max_batch_tokens}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"runtime precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"runtime backend {self.backend!r} is not one of {', '.join(BACKENDS)}")

    def over(self, base: Runtime) -> Runtime:
        """This runtime's set fields over `base`'s (a command-line option over a spec's section)."""
        return dataclasses.replace(base, **{k: v for k, v in dataclasses.asdict(self).items() if v is not None})


_current = Runtime()
_lock = threading.Lock()


def current() -> Runtime:
    return _current


@contextmanager
def using(runtime: Runtime | None, *, beneath: bool = False) -> Iterator[Runtime]:
    """The process's runtime for the block: `runtime`'s set fields over the current one's (beneath: under them,
    as a study spec's section under command-line options). A plain global, not a context variable: the index
    loader encodes in a producer thread, which would not inherit a context."""
    global _current
    with _lock:
        before = _current
        if runtime:
            _current = before.over(runtime) if beneath else runtime.over(before)
    try:
        yield _current
    finally:
        with _lock:
            _current = before


def backend_of(runtime: Runtime) -> str:
    return runtime.backend or "torch"


def runtime_devices(runtime: Runtime) -> list[str]:
    """The devices of `runtime` (resolve_devices); an onnx or openvino backend runs on the CPU alone, in float32
    (the exported graph's own), so it refuses another device or precision, naming the setting."""
    backend = backend_of(runtime)
    if backend == "torch":
        return resolve_devices(runtime.device)
    if runtime.device not in (None, "cpu"):
        raise ValueError(f"runtime backend {backend} runs on the CPU only, not on device {runtime.device!r}: "
                         "set device cpu (or leave it unset), or backend torch")
    if runtime.precision not in (None, "float32"):
        raise ValueError(f"runtime backend {backend} runs in float32 only, not precision {runtime.precision}: "
                         "leave precision unset, or set backend torch")
    return ["cpu"]


def resolve_devices(device: str | None) -> list[str]:
    """The devices an encoder uses, one model replica each: a comma list as given, `all` -> every visible GPU,
    None -> cuda when visible, else mps, else cpu."""
    if device not in (None, "all"):
        return [d.strip() for d in device.split(",")]
    import torch  # deferred: torch

    if device == "all":
        gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if not gpus:
            raise ValueError("device all: no CUDA GPU is visible on this machine")
        return gpus
    if torch.cuda.is_available():
        return ["cuda"]
    if torch.backends.mps.is_available():
        return ["mps"]
    return ["cpu"]


def resolve_precision(spec_dtype: str, device: str, precision: str | None) -> str:
    """The precision asked for, else float32 on a CPU (its half-precision kernels are slow and the spec's dtype
    is an accelerator's economy), else the model spec's dtype."""
    if precision:
        return precision
    return "float32" if device.startswith("cpu") else spec_dtype
