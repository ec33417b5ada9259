"""Retrieval throughput: dense, native hybrid and native RRF queries through evalctl vs the engine's own
`took`, and vs exact brute-force similarity with numpy on the same vectors (time and nDCG@10 side by
side). Prints a table.

    python bench/retrieve.py [--docs 150] [--repeat 5] [--k 100] [--model all-minilm-l6-v2]

Corpus: a known-item task from the real USPTO grant sample (tests/data/uspto-grants-2019):
documents are abstracts (view A), queries are titles, each relevant to its own grant (a sanity
task, not a citation task). Query and document vectors come from the embedding cache, warmed
before timing, so only searching is timed. --repeat sends the query set that many times for the
throughput rows. Client overhead ratio = client wall time / sum of `_msearch` `took`, with one
request in flight (target <= 1.25x). The hybrid/RRF rows need the neural-search plugin on the node.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="evalctl-bench-retrieve-"))
    os.environ.setdefault("EVALCTL_CACHE", str(work / "cache"))

    from retrieval_data import write_known_item_beir

    from evalctl.connection import make_client
    from evalctl.corpus_import import import_corpus
    from evalctl.evaluators.retrieve import (
        RetrievalOptions, RetrievalSpec, _bodies, load_query_set, resolve_index, retrieve, search_all,
    )
    from evalctl.evaluators.runs import ranked
    from evalctl.evaluators.scoring import PRIMARY, score
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.qrels import load_qrels
    from evalctl.views import load_views

    client = make_client()
    model = get_model(args.model)
    name = f"bench-retrieve-{os.getpid()}"
    corpus = import_corpus("beir", [write_known_item_beir(work / "beir", args.docs, dev_every=10**9)], name=name).corpus
    view = load_views()["A"]
    try:
        index_corpus(client, corpus, [view], model, progress=False)
        spec = RetrievalSpec(corpus=name, view="A", method="dense", model=args.model, qrels="given", k=args.k)
        qset = load_qrels(corpus, "given")
        queries = load_query_set(corpus, qset, "test", "A")
        qrels = qset.qrels(split="test")
        index, manifest = resolve_index(client, corpus, spec)
        opts = RetrievalOptions(progress=False, batch_size=args.batch_size, concurrency=1, reuse=False)
        bodies, _ = _bodies(client, spec, queries, manifest, model, opts)  # warms the query-vector cache
        retrieve(client, spec, opts)  # warm-up: JVM, HNSW graph in memory
        rows = []

        t0 = time.perf_counter()
        run = retrieve(client, spec, opts)
        e2e = time.perf_counter() - t0
        ann = score(run.ranking, qrels).mean[PRIMARY]
        rows.append(("evalctl retrieve (end to end, 1 query set)", len(bodies), e2e, run.manifest["took_ms"] / 1000, ann))

        from evalctl.evaluators.search_pipelines import FusionSpec, has_neural_search

        if has_neural_search(client):
            for method, fusion in (("hybrid", FusionSpec()), ("rrf", FusionSpec(technique="rrf"))):
                fspec = spec.with_(method=method, fusion=fusion)
                retrieve(client, fspec, opts)  # warm-up: pipeline created, BM25 postings cached
                t0 = time.perf_counter()
                frun = retrieve(client, fspec, opts)
                rows.append((f"evalctl retrieve {method} (native, end to end)", len(bodies), time.perf_counter() - t0,
                             frun.manifest["took_ms"] / 1000, score(frun.ranking, qrels).mean[PRIMARY]))
        else:
            print("no neural-search plugin on this node: no native hybrid/RRF rows")

        many = bodies * args.repeat
        for conc in (1, 2):
            _, st = search_all(client, index, many, batch_size=args.batch_size, concurrency=conc)
            rows.append((f"dense _msearch x{args.repeat}, {conc} in flight", len(many), st.seconds, st.took_ms / 1000, ann))
        exact = retrieve(client, spec.with_(method="exact"), opts)
        rows.append(("exact knn_score (engine brute force)", len(bodies), exact.manifest["search_seconds"],
                     exact.manifest["took_ms"] / 1000, score(exact.ranking, qrels).mean[PRIMARY]))

        docs = [(r.id, view.render(r)) for r in corpus.records()]
        doc_ids = [d for d, _ in docs]
        dvec = get_or_encode(model, "document", "A", doc_ids, [t for _, t in docs], progress=False)
        qids = [q for q in queries.ids if q in queries.texts]
        qvec = get_or_encode(model, "query", "A", qids, [queries.texts[q] for q in qids], progress=False)
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            sims = qvec @ dvec.T  # normalised vectors: cosine
            top = np.argsort(-sims, axis=1)[:, : args.k + 1]
            brute = {q: ranked([(doc_ids[j], float(sims[i, j])) for j in top[i] if doc_ids[j] not in queries.exclude[q]],
                               args.k) for i, q in enumerate(qids)}
        np_s = time.perf_counter() - t0
        rows.append((f"numpy brute force x{args.repeat} (same vectors)", len(qids) * args.repeat, np_s, float("nan"),
                     score(brute, qrels).mean[PRIMARY]))
    finally:
        client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)

    print(f"\n{len(doc_ids)} documents, {len(qids)} title queries, k={args.k}, model {args.model}, "
          f"batch {args.batch_size}\n")
    print(f"{'path':48} {'queries':>7} {'wall s':>8} {'q/s':>8} {'took s':>8} {'wall/took':>9} {'nDCG@10':>8}")
    for label, n, wall, took, ndcg in rows:
        ratio = wall / took if took == took and took > 0 else float("nan")
        print(f"{label:48} {n:7d} {wall:8.3f} {n / wall:8.0f} {took:8.3f} {ratio:9.2f} {ndcg:8.4f}")


if __name__ == "__main__":
    main()
