"""How encoding runs: device(s), precision, tokens per forward pass, attention implementation.

Set by `evalctl index|encode|run` options or a study spec's `runtime:` section. `using(runtime)` makes one the
process's for a command, so every encoder made meanwhile (documents, the queries of retrieval steps, label
tasks; some in loader threads) runs alike: precision is part of a vector's identity (the embedding-cache key),
and a study's query and document vectors must agree.

Precision `auto` (the default) is bfloat16 on a CPU with native bf16 instructions (avx512_bf16, amx_bf16, Arm's
bf16), float32 on another CPU (torch emulates bf16 there, several times slower than float32), the model spec's
dtype on an accelerator; a model spec's own `precision` pins it whatever the runtime asks. int8 is dynamic
quantisation of the linear layers (CPU only). Measured trade: bench/encode.py --precisions.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from evalctl.models import ModelSpec

Precision = Literal["auto", "float32", "float16", "bfloat16", "int8"]
PRECISIONS: tuple[str, ...] = ("auto", "float32", "float16", "bfloat16", "int8")
# CPU: batches past a few thousand tokens buy nothing, and 16k tokens of a small model fit any machine.
CPU_BATCH_TOKENS = 16384
# CUDA: beyond this many tokens a forward pass is no faster per token (and one OOM costs more).
MAX_CUDA_BATCH_TOKENS = 262144
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 flags, Arm Features


@dataclass(frozen=True)
class Runtime:
    """Unset fields (None) take the defaults: device cuda when visible else cpu; precision auto (above);
    max_batch_tokens from free device memory on CUDA, CPU_BATCH_TOKENS on a CPU; attn_implementation the spec's
    model_kwargs, else transformers' choice."""

    device: str | None = None  # cpu, cuda, cuda:N, mps, a comma list of these, or "all": every visible GPU
    precision: Precision | None = None
    max_batch_tokens: int | None = None  # padded tokens (texts x longest) per forward pass
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2 (flash: unpadded batches)

    def __post_init__(self) -> None:
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ValueError(f"runtime max_batch_tokens must be positive, got {self.max_batch_tokens}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"runtime precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")

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


def cpu_native_bf16() -> bool:
    """Whether this machine's CPU has bf16 instructions: EVALCTL_CPU_BF16=1 or 0 says so (a test suite that must
    not depend on its runner's CPU; vectors made to match a bf16 machine's), else Linux's /proc/cpuinfo flags
    (elsewhere: no)."""
    said = os.environ.get("EVALCTL_CPU_BF16", "")
    if said not in ("", "0", "1"):
        raise ValueError(f"EVALCTL_CPU_BF16={said!r}: set 1 (the CPU has native bf16), 0 (it has not) "
                         "or leave it unset")
    return said == "1" if said else _cpuinfo_bf16()


@functools.cache
def _cpuinfo_bf16() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = {f for line in text.splitlines() if line.startswith(("flags", "Features"))
             for f in line.split(":", 1)[1].split()}
    return bool(flags & _BF16_FLAGS)


def resolve_precision(spec: ModelSpec, device: str, precision: str | None) -> str:
    """The precision a model runs at on `device`: its spec's pin, else the one asked for, else (None, auto) the
    module docstring's default. Refused, naming the setting: int8 off a CPU, bfloat16 on a CPU without native
    bf16."""
    on_cpu = device.startswith("cpu")
    chosen = spec.precision or precision
    if chosen in (None, "auto"):
        chosen = ("bfloat16" if cpu_native_bf16() else "float32") if on_cpu else spec.dtype
    pinned = f" (pinned by model {spec.id}'s spec)" if spec.precision else ""
    if chosen == "int8" and not on_cpu:
        raise ValueError(f"precision int8{pinned} is dynamic quantisation for a CPU, not for device {device}: "
                         "use float16 or bfloat16 there")
    if chosen == "bfloat16" and on_cpu and not cpu_native_bf16():
        raise ValueError(f"precision bfloat16{pinned}: this CPU has no native bf16 instructions (avx512_bf16, "
                         "amx_bf16), so torch emulates them, several times slower than float32 (bench/encode.py "
                         "--precisions measures it); use precision auto (float32 here) or int8")
    return chosen


def precision_line(runtime: Runtime) -> str:
    """What the runtime's precision is on this machine, said before a command encodes anything."""
    device = resolve_devices(runtime.device)[0]
    pins = "a model spec's own `precision` pins that model's"
    if runtime.precision not in (None, "auto"):
        return f"encoding precision {runtime.precision} on {device} ({pins})"
    if not device.startswith("cpu"):
        return f"encoding precision auto on {device}: each model spec's dtype ({pins})"
    native = cpu_native_bf16()
    return (f"encoding precision auto on {device}: {'bfloat16' if native else 'float32'} (this CPU has "
            f"{'native bf16 instructions' if native else 'no native bf16 instructions'}; {pins})")
