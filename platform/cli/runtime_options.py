"""The encoding runtime's options, shared by `evalctl index`, `encode` and `run` (evalctl.indexers.runtime)."""

from __future__ import annotations

import functools

import click

from evalctl.indexers.runtime import PRECISIONS, Runtime, using


def runtime_options(f):
    """--precision, --max-batch-tokens, --attn-implementation: the command runs with them as the process's
    runtime (each over whatever it sets beneath, e.g. a study spec's section). Commands declare --device."""

    @functools.wraps(f)
    def wrapper(*args, precision, max_batch_tokens, attn_implementation, **kwargs):
        with using(Runtime(precision=precision, max_batch_tokens=max_batch_tokens,
                           attn_implementation=attn_implementation)):
            return f(*args, **kwargs)

    wrapper = click.option("--attn-implementation", default=None,
                           help="eager, sdpa or flash_attention_2 (unpadded batches; needs flash-attn or kernels).")(wrapper)
    wrapper = click.option("--max-batch-tokens", type=click.IntRange(min=1), default=None,
                           help="Padded tokens per forward pass (default: from free memory on CUDA, 16384 on CPU).")(wrapper)
    return click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                        help="Encoding precision (default auto: bfloat16 on a CPU with native bf16, float32 on "
                        "another, the model spec's dtype on a GPU; int8: dynamic quantisation, CPU only; a spec's "
                        "`precision` pins it). Part of the vectors' identity.")(wrapper)
