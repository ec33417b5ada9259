"""The encoding runtime's options, shared by `evalctl index`, `encode` and `run` (evalctl.indexers.runtime)."""

from __future__ import annotations

import functools

import click

from evalctl.indexers.runtime import BACKENDS, PRECISIONS, Runtime, using


def runtime_options(f):
    """--precision, --max-batch-tokens, --attn-implementation, --backend: the command runs with them as the process's
    runtime (each over whatever it sets beneath, e.g. a study spec's section). Commands declare --device."""

    @functools.wraps(f)
    def wrapper(*args, precision, max_batch_tokens, attn_implementation, backend, **kwargs):
        with using(Runtime(precision=precision, max_batch_tokens=max_batch_tokens,
                           attn_implementation=attn_implementation, backend=backend)):
            return f(*args, **kwargs)

    wrapper = click.option("--backend", type=click.Choice(BACKENDS), default=None,
                           help="Inference backend: torch (default), or onnx / openvino on the CPU (an exported copy of "
                           "the model, cached; needs optimum-onnx / optimum-intel). Part of the vectors' identity.")(wrapper)
    wrapper = click.option("--attn-implementation", default=None,
                           help="eager, sdpa or flash_attention_2 (unpadded batches; needs flash-attn or kernels).")(wrapper)
    wrapper = click.option("--max-batch-tokens", type=click.IntRange(min=1), default=None,
                           help="Padded tokens per forward pass (default: from free memory on CUDA, 16384 on CPU).")(wrapper)
    return click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                        help="Encoding precision (default: float32 on CPU, the model spec's dtype on a GPU).")(wrapper)
