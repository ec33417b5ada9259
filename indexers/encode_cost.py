"""What encoding costs: texts and tokens encoded, wall seconds, texts/s, tokens/s, where it ran (device and its
name, precision, torch threads, batch settings) and the extrapolation to hours per million patents.

Each run that encodes texts keeps its measurement in its run record (the embedding cache entry's
runs/<time>-<pid>.json, key `cost`); a run whose texts all came from the cache records nothing, so the earlier
measurement stands. An entry's cost (`entry_cost`) sums its runs per setting: a resumed or extended encode adds
to the runs before it (`runs` counts them). Cost is a measurement about runs, never part of the entry's key
(embedding_cache.CacheKey): the same vectors measured twice are the same vectors.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from evalctl.host import cpu_name
from evalctl.indexers.runtime import cpu_native_bf16

if TYPE_CHECKING:
    from evalctl.indexers.embedding_cache import CacheKey

# What is summed across runs; the rest of a measurement says how it ran, and runs of the same setting add up.
_SUMMED = ("texts", "tokens", "seconds")
_SETTING = ("device", "device_name", "native_bf16", "precision", "torch_threads", "batch_size")
EXTRAPOLATION = ("hours_per_million_patents: seconds / texts x 1e6 / 3600, extrapolated from the measured runs for "
                 "this model, view and prompt on this device; one text per patent; model loading not counted")


def device_name(device: str) -> str:
    """The hardware behind a torch device string: the CPU's model name, a GPU's name."""
    if device.startswith("cuda"):
        import torch  # deferred: torch

        return torch.cuda.get_device_name(torch.device(device))
    if device.startswith("mps"):
        return f"Apple MPS ({platform.machine()})"
    return cpu_name()


def rates(texts: int, tokens: int | None, seconds: float) -> dict:
    """texts/s, tokens/s and hours per million patents of `texts` (and `tokens`) encoded in `seconds`."""
    return {"texts_per_s": round(texts / seconds, 3) if seconds > 0 else None,
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 and tokens is not None else None,
            "hours_per_million_patents": round(seconds / texts * 1e6 / 3600, 3) if texts else None}


@dataclass(frozen=True)
class EncodeCost:
    """One run's measurement. tokens: as the model's tokenizer made them (prompt and special tokens included,
    cut at max_seq_length), or for a served model the `usage` tokens the server answered (None: it answered
    none). seconds: wall time from the first batch sent to the last vector committed to the cache."""

    texts: int
    tokens: int | None
    seconds: float
    device: str  # cpu, cuda:0 (several: a comma list), or "served" for a model behind an endpoint
    device_name: str | None
    native_bf16: bool | None  # a CPU's bf16 instructions (runtime.cpu_native_bf16); None off a CPU
    precision: str
    torch_threads: int | None  # torch's intra-op threads (a CPU's parallelism); None for a served model
    batch_size: int | None  # at most this many texts per batch; None: the token budget alone decides
    max_batch_tokens: int | None  # the token budget per batch at the end of the run

    def record(self) -> dict:
        """The measurement as stored: its rates from the seconds it states, so the record agrees with itself."""
        seconds = round(self.seconds, 3)
        return {**asdict(self), "seconds": seconds, **rates(self.texts, self.tokens, seconds)}


def measured(encoder, key: CacheKey, batch_size: int | None, texts: int, tokens: int | None,
             seconds: float) -> EncodeCost:
    """The measurement of a run of `encoder` (an Encoder, ServedEncoder or a loaded LazyEncoder) into the cache entry
    `key` (its precision)."""
    devices = list(getattr(encoder, "devices", None) or [])
    endpoint = getattr(encoder, "shown", None)
    bf16 = None
    if endpoint is not None:
        device, name, threads = "served", endpoint, None
    elif devices:
        import torch  # deferred: torch (loaded already: the encoder ran)

        device, name, threads = ",".join(devices), ", ".join(dict.fromkeys(map(device_name, devices))), \
            torch.get_num_threads()
        bf16 = cpu_native_bf16() if all(d.startswith("cpu") for d in devices) else None
    else:  # an encoder that says nothing of where it runs (a test's stand-in)
        device, name, threads = "unknown", None, None
    return EncodeCost(texts=texts, tokens=tokens, seconds=seconds, device=device, device_name=name,
                      native_bf16=bf16, precision=key.precision, torch_threads=threads, batch_size=batch_size,
                      max_batch_tokens=getattr(encoder, "max_batch_tokens", None))


def entry_cost(runs: list[dict]) -> list[dict]:
    """An entry's cost from its run records (EmbeddingCache.runs()): per setting, the texts, tokens and seconds
    of every run that encoded (summed: `runs` of them, the first and last `at`), and their rates. Tokens are
    None when a run of the setting did not count them."""
    by_setting: dict[tuple, dict] = {}
    for run in runs:
        cost = run.get("cost")
        if not cost:
            continue
        key = tuple(cost.get(k) for k in _SETTING)
        total = by_setting.get(key)
        if total is None:
            by_setting[key] = {**{k: cost.get(k) for k in _SETTING}, **{k: cost[k] for k in _SUMMED},
                               "max_batch_tokens": cost.get("max_batch_tokens"), "runs": 1,
                               "first_at": run.get("at"), "last_at": run.get("at")}
            continue
        total["texts"] += cost["texts"]
        total["seconds"] = round(total["seconds"] + cost["seconds"], 3)
        counted = total["tokens"] is not None and cost["tokens"] is not None
        total["tokens"] = total["tokens"] + cost["tokens"] if counted else None
        total.update(runs=total["runs"] + 1, last_at=run.get("at"), max_batch_tokens=cost.get("max_batch_tokens"))
    return [{**t, **rates(t["texts"], t["tokens"], t["seconds"])} for t in by_setting.values()]


def cost_line(cost: dict) -> str:
    """One measurement (a run's, or entry_cost's) in a line."""
    tokens = f"{cost['tokens']} tokens" if cost.get("tokens") is not None else "tokens not counted"
    per_s = f", {cost['tokens_per_s']:,.0f} tokens/s" if cost.get("tokens_per_s") is not None else ""
    runs = f" over {cost['runs']} runs" if cost.get("runs", 1) > 1 else ""
    threads = f", {cost['torch_threads']} threads" if cost.get("torch_threads") is not None else ""
    bf16 = {True: " (native bf16)", False: " (no native bf16)"}.get(cost.get("native_bf16"), "")
    return (f"{cost['texts']} texts, {tokens} in {cost['seconds']:.1f}s{runs} ({cost['texts_per_s'] or 0:.1f} texts/s"
            f"{per_s}) on {cost['device']} ({cost['device_name']}), {cost['precision']}{bf16}{threads}: "
            f"{cost['hours_per_million_patents']:.1f} h per million patents (extrapolated)")
