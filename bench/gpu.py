"""Forward-pass throughput of the study's largest encoders at bf16, ready for a lent GPU (no weights needed).

Random-initialised models built from the published configurations of Qwen3-Embedding-8B and
KaLM-Embedding-Gemma3-12B (their config.json hyperparameters, written below), in bfloat16, encode
patent-length texts: the USPTO sample's (dataset uspto-grants-2019-60) titles and abstracts repeated to each record's own
title+abstract+claims (TAC) length, tokenised by a BPE trained here on the same text, cut at the
study's 8192 tokens and batched by evalctl's own token budget (indexers.encoder.plan_batches). Printed
per model and attention path: tokens/s (real tokens, padding not counted), model FLOP utilisation
against the H200's dense bf16 peak (989 TFLOP/s; 2 x parameters FLOP per token, attention FLOPs not
counted, as MFU is usually quoted), peak device memory, and texts/s with its extrapolation to hours per
million patents (evalctl.indexers.encode_cost.rates, as `evalctl encode` records them; forward passes only, no
tokenisation or cache writes). Paths: sdpa on padded batches, and
flash_attention_2 on unpadded (packed) batches when flash-attn is installed.

On a machine without CUDA the same measurement runs on a small configuration of each architecture (fp32,
512 tokens) so the script itself is exercised; its MFU is not meaningful there and is not printed.

    python bench/gpu.py                 # both models, both paths, ~6 minutes on an H200
    python bench/gpu.py --seconds 20    # shorter measurement per model x path
"""

from __future__ import annotations

import argparse
import csv
import gc
import resource
import time

import torch

from evalctl.datasets.fetch import dataset_sources
from evalctl.indexers.encode_cost import device_name, rates

SAMPLE = dataset_sources("uspto-grants-2019-60").sources[0]  # fetched on first use (EVALCTL_DATA_MIRROR offline)
H200_BF16_DENSE_FLOPS = 989e12

# config.json of Qwen/Qwen3-Embedding-8B (Qwen3 architecture; 7.57B parameters without an LM head)
QWEN3_EMBEDDING_8B = dict(
    vocab_size=151665, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1_000_000,
)
# config.json (text part) of tencent/KaLM-Embedding-Gemma3-12B-2511 (Gemma3 12B: 11.77B parameters; local
# sliding-window layers of 1024 tokens, one global layer in six)
KALM_GEMMA3_12B = dict(
    vocab_size=262208, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
    num_key_value_heads=8, head_dim=256, max_position_embeddings=131072, rms_norm_eps=1e-6, rope_theta=1_000_000,
    sliding_window=1024, query_pre_attn_scalar=256,
)
# the same architectures, small enough for a CPU
SMALL = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64)


def build(name: str, small: bool, attn: str, device: str | None = None):
    if name == "qwen3-embedding-8b":
        from transformers import Qwen3Config as Config, Qwen3Model as Model

        hp = QWEN3_EMBEDDING_8B
    else:
        from transformers import Gemma3TextConfig as Config, Gemma3TextModel as Model

        hp = KALM_GEMMA3_12B
    config = Config(**{**hp, **(SMALL if small else {})}, attn_implementation=attn)
    dtype = torch.float32 if small else torch.bfloat16
    with torch.device(device or ("cpu" if small else "cuda")):
        torch.set_default_dtype(dtype)
        try:
            model = Model(config).eval()  # random weights: speed does not depend on their values
        finally:
            torch.set_default_dtype(torch.float32)
    return model


def patent_lengths(max_tokens: int, vocab_size: int) -> tuple[list[list[int]], float]:
    """Token ids per text (longest first) and the characters per token of the sample."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    csv.field_size_limit(10**8)
    with open(SAMPLE, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ta = [r["patent_title"] + "\n" + r["abstract"] for r in rows]
    tac_chars = [len(t) + len(r["claims_text"]) for t, r in zip(ta, rows)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(ta, trainers.BpeTrainer(vocab_size=min(vocab_size, 8192), show_progress=False))
    texts = [(t + "\n") * (n // (len(t) + 1) + 1) for t, n in zip(ta, tac_chars)]
    texts = [t[:n] for t, n in zip(texts, tac_chars)]
    ids = [e.ids[:max_tokens] for e in tok.encode_batch(texts)]
    full = sum(len(e.ids) for e in tok.encode_batch(ta))
    return sorted(ids, key=len, reverse=True), sum(map(len, ta)) / full


def batches_of(ids: list[list[int]], budget: int, device: str, packed: bool):
    """(model inputs, real tokens, texts) per batch, planned as evalctl plans them: padded (input_ids,
    attention_mask) or packed into one row with positions restarting per text (flash-attention's unpadded path)."""
    from evalctl.indexers.encoder import plan_batches

    for batch in plan_batches([len(x) for x in ids], budget):
        rows = [ids[i] for i in batch]
        n_real = sum(map(len, rows))
        if packed:
            flat = torch.tensor([[t for r in rows for t in r]], device=device)
            pos = torch.tensor([[p for r in rows for p in range(len(r))]], device=device)
            yield {"input_ids": flat, "position_ids": pos}, n_real, len(rows)
        else:
            width = len(rows[0])
            inp = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            mask = torch.zeros_like(inp)
            for j, r in enumerate(rows):
                inp[j, : len(r)] = torch.tensor(r, device=device)
                mask[j, : len(r)] = 1
            yield {"input_ids": inp, "attention_mask": mask}, n_real, len(rows)


def measure(model, ids, budget: int, device: str, packed: bool, seconds: float) -> dict:
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    inputs = list(batches_of(ids, budget, device, packed))
    tokens = texts = 0
    with torch.inference_mode():
        model(**inputs[0][0])  # warm-up: kernels chosen, memory pools grown
        sync()
        t0 = time.perf_counter()
        rounds = 0
        while time.perf_counter() - t0 < seconds or rounds == 0:
            for x, n, n_texts in inputs:
                model(**x)
                tokens += n
                texts += n_texts
                if time.perf_counter() - t0 > seconds:
                    break
            rounds += 1
        sync()
        elapsed = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {**rates(texts, tokens, elapsed), "seconds": elapsed, "tokens": tokens, "texts": texts,
            "peak_gb": peak / 1e9, "batches": len(inputs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3-embedding-8b", "kalm-gemma3-12b"])
    ap.add_argument("--seconds", type=float, default=45.0, help="Measurement time per model x attention path.")
    ap.add_argument("--max-batch-tokens", type=int, default=None,
                    help="Padded tokens per batch (default 65536 on CUDA, 4096 on CPU).")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device, small = ("cuda", False) if cuda else ("cpu", True)
    max_tokens = 8192 if cuda else 512
    budget = args.max_batch_tokens or (65536 if cuda else 4096)
    paths = [("sdpa", False)]
    try:
        import flash_attn  # noqa: F401

        paths.append(("flash_attention_2", True))
    except ImportError:
        print("flash-attn is not installed: the unpadded flash_attention_2 path is not measured")
    print(f"device {device} ({device_name(device)}), {torch.get_num_threads()} torch threads; "
          f"{'published configs, bf16' if not small else 'small configs of the same architectures, fp32'}; "
          f"texts cut at {max_tokens} tokens, batches of up to {budget} padded tokens; torch {torch.__version__}")
    for name in args.models:  # the published configs' sizes, counted without memory (the meta device)
        meta = build(name, False, "sdpa", device="meta")
        print(f"{name}: {sum(p.numel() for p in meta.parameters()) / 1e9:.2f}B parameters in its published config")
    print()
    print("| model | attention | params | batches | tokens/s | texts/s | h per million patents | MFU "
          "| MFU without embeddings | peak memory |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        for attn, packed in paths:
            started = time.perf_counter()
            model = build(name, small, attn)
            params = sum(p.numel() for p in model.parameters())
            dense = params - model.get_input_embeddings().weight.numel()  # a lookup, no multiply-adds
            ids, _ = patent_lengths(max_tokens, model.config.vocab_size)
            r = measure(model, ids, budget, device, packed, args.seconds)
            mfu = [(f"{100 * f / H200_BF16_DENSE_FLOPS:.1f}%" if cuda else f"n/a ({f / 1e9:.1f} GFLOP/s)")
                   for f in (2 * params * r["tokens_per_s"], 2 * dense * r["tokens_per_s"])]
            print(f"| {name} | {attn}{' (unpadded)' if packed else ' (padded)'} | {params / 1e9:.2f}B | "
                  f"{r['batches']} | {r['tokens_per_s']:,.0f} | {r['texts_per_s']:,.2f} | "
                  f"{r['hours_per_million_patents']:,.1f} | {mfu[0]} | {mfu[1]} | {r['peak_gb']:.1f} GB |",
                  flush=True)
            del model
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            if time.perf_counter() - started > 3 * args.seconds + 120:
                print(f"  ({name} {attn} took {time.perf_counter() - started:.0f} s including the build)")


if __name__ == "__main__":
    main()
