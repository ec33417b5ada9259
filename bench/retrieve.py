"""Retrieval throughput: dense, native hybrid and native RRF queries through evalctl vs the engine's own
`took`, and vs exact brute-force similarity with numpy on the same vectors (time and nDCG@10 side by
side). Prints a table.

    python bench/retrieve.py [--workload known-item|quickstart] [--docs 150] [--repeat 5] [--rounds 5] [--k 100]
                             [--model all-minilm-l6-v2]

Workloads: `known-item` (default), from the real USPTO grant sample (the dataset uspto-grants-2019):
--docs abstracts (view A), queries are titles, each relevant to its own grant (a sanity task, not a
citation task); `quickstart`, the quickstart's retrieval: its OPS corpus (2,973 patents), its
citation qrels, the test split's queries on titles (view T). Query and document vectors come from the
embedding cache, warmed before timing, so only searching is timed. Every side runs once untimed, then --rounds times in rotating
order. Targets: `evalctl retrieve` wall / sum of `_msearch` `took` with one request in flight <= 1.15x;
evalctl's sender (search_all) >= 0.9x the queries/s of a bare `_msearch` of the same pre-built bytes on
one connection (--repeat copies of the query set). The hybrid/RRF rows need the neural-search plugin.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import numpy as np
from benchlib import load, ratio_line, run_rounds, spread  # bench/ is on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=["known-item", "quickstart"], default="known-item")
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="evalctl-bench-retrieve-"))
    os.environ.setdefault("EVALCTL_CACHE", str(work / "cache"))

    from retrieval_data import write_known_item_beir

    from evalctl.opensearch.connection import load_settings, make_client, resolve_url
    from evalctl.corpus.importer import import_corpus
    from evalctl.evaluators.retrieval.retrieve import (
        RetrievalOptions, RetrievalSpec, Sending, search_bodies, resolve_index, retrieve, search_all,
    )
    from evalctl.evaluators.scoring.runs import ranked
    from evalctl.corpus.query_set import load_query_set
    from evalctl.evaluators.scoring.metrics import PRIMARY, score
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.views import load_views

    client, url = make_client(), resolve_url(load_settings())
    model = get_model(args.model)
    name = f"bench-retrieve-{os.getpid()}"
    if args.workload == "quickstart":
        from evalctl.corpus.qrels import build_qrels
        from evalctl.study.plan.loading import load_experiment

        study = load_experiment("quickstart")
        entry = study.corpora[0]
        corpus = import_corpus(entry.format, [study.resolve_source(s) for s in entry.sources], name=name,
                               labels=entry.labels, documents=entry.documents).corpus
        qname, view, split = build_qrels(corpus, entry.qrels).name, load_views()["T"], "test"
    else:
        corpus = import_corpus("beir", [write_known_item_beir(work / "beir", args.docs, dev_every=10**9)],
                               name=name).corpus
        qname, view, split = "given", load_views()["A"], "test"
    try:
        index_corpus(client, corpus, [view], model, progress=False)
        spec = RetrievalSpec(corpus=name, view=view.name, method="dense", model=args.model, qrels=qname, split=split,
                             k=args.k)
        qset = load_qrels(corpus, qname)
        queries = load_query_set(corpus, qset, split, view.name)
        qrels = qset.qrels(split=split)
        state = resolve_index(client, corpus, spec)
        index, manifest = state.name, state.manifest
        opts = RetrievalOptions(progress=False, batch_size=args.batch_size, concurrency=1, reuse=False)
        bodies, _ = search_bodies(client, spec, queries, manifest, model, opts)  # warms the query-vector cache
        docs = [(r.id, t) for r in corpus.records() if (t := view.render(r))]
        doc_ids = [d for d, _ in docs]
        dvec = get_or_encode(model, "document", view.name, doc_ids, [t for _, t in docs], progress=False)
        qids = [q for q in queries.ids if q in queries.texts]
        qvec = get_or_encode(model, "query", view.name, qids, [queries.texts[q] for q in qids], progress=False)
        many = bodies * args.repeat
        ndjson = msearch_ndjson(client, index, many, args.batch_size)
        methods = {"dense": spec, "exact": spec.with_(method="exact")}

        from evalctl.evaluators.fusion.search_pipelines import has_neural_search
        from evalctl.evaluators.fusion.settings import FusionSpec

        if has_neural_search(client):
            methods["hybrid"] = spec.with_(method="hybrid", fusion=FusionSpec())
            methods["rrf"] = spec.with_(method="rrf", fusion=FusionSpec(technique="rrf"))
        else:
            print("no neural-search plugin on this node: no native hybrid/RRF rows")
        samples: dict[str, list[tuple[float, float]]] = {}  # side -> [(wall s, took s)] per round
        ndcg: dict[str, float] = {}

        def measure(side: str, r: int) -> float:
            t0 = time.perf_counter()
            if side in methods:  # the command path end to end: bodies, search, run stored
                run = retrieve(client, methods[side], opts)
                wall, took = time.perf_counter() - t0, run.manifest["took_ms"] / 1000
                ndcg[side] = score(run.ranking, qrels).mean[PRIMARY]
            elif side == "search_all":  # evalctl's sender alone, on bodies built once
                _, st, _ = search_all(client, index, many, Sending(batch_size=args.batch_size, concurrency=1))
                wall, took = st.seconds, st.took_ms / 1000
            elif side == "bare":  # the same bytes, pre-built, on one kept-alive connection
                wall, took = bare_msearch(url, ndjson)
            else:  # numpy brute force on the same vectors
                for _ in range(args.repeat):
                    sims = qvec @ dvec.T  # normalised vectors: cosine
                    top = np.argsort(-sims, axis=1)[:, : args.k + 1]
                    brute = {q: ranked([(doc_ids[j], float(sims[i, j])) for j in top[i]
                                        if doc_ids[j] not in queries.exclude[q]], args.k) for i, q in enumerate(qids)}
                wall, took = time.perf_counter() - t0, float("nan")
                ndcg[side] = score(brute, qrels).mean[PRIMARY]
            if r >= 0:
                samples.setdefault(side, []).append((wall, took))
            return wall

        load_before = load()
        run_rounds((*methods, "search_all", "bare", "numpy"), args.rounds, measure)  # every side warmed first
    finally:
        client.indices.delete(index=f"{corpus_alias(name)}--*", ignore_unavailable=True)
        shutil.rmtree(work, ignore_errors=True)

    n_q = {**{m: len(bodies) for m in methods}, "search_all": len(many), "bare": len(many),
           "numpy": len(qids) * args.repeat}
    labels = {"dense": "evalctl retrieve dense (end to end)",
              "exact": "evalctl retrieve exact (engine brute force)",
              "hybrid": "evalctl retrieve hybrid (native, end to end)",
              "rrf": "evalctl retrieve rrf (native, end to end)",
              "search_all": f"evalctl search_all x{args.repeat}, 1 in flight",
              "bare": f"bare _msearch x{args.repeat}, 1 in flight",
              "numpy": f"numpy brute force x{args.repeat} (same vectors)"}
    print(f"\n{args.workload}: {len(doc_ids)} documents, {len(qids)} title queries, k={args.k}, model {args.model}, batch "
          f"{args.batch_size}, {args.rounds} rounds (sides rotate, all warmed)")
    print(f"machine: before {load_before}; after {load()}")
    print(f"{'path':46} {'queries':>7} {'wall s min / median / max':>26} {'q/s':>7} {'took s':>7} {'wall/took':>9} "
          f"{'nDCG@10':>8}")
    for side, xs in samples.items():
        walls, tooks = [w for w, _ in xs], [t for _, t in xs]
        wall, took = statistics.median(walls), statistics.median(tooks)
        ratio = statistics.median([w / t for w, t in xs]) if took == took and took > 0 else float("nan")
        print(f"{labels[side]:46} {n_q[side]:7d} {spread(walls):>26} {n_q[side] / wall:7.0f} {took:7.3f} {ratio:9.2f} "
              f"{ndcg.get(side, ndcg['dense']):8.4f}")
    print(ratio_line("evalctl retrieve dense wall / engine took", [w / t for w, t in samples["dense"]], "<= 1.15"))
    print(ratio_line("evalctl search_all / bare _msearch q/s",
                     [b[0] / e[0] for e, b in zip(samples["search_all"], samples["bare"])], ">= 0.9"))


def msearch_ndjson(client, index: str, bodies: list, batch_size: int) -> list[bytes]:
    """The `_msearch` request bodies evalctl sends for `bodies`, serialised once."""
    dumps = client.transport.serializer.dumps
    todo = [b for b in bodies if b is not None]
    header = dumps({"index": index})
    return ["".join(f"{header}\n{dumps(b)}\n" for b in todo[s:s + batch_size]).encode()
            for s in range(0, len(todo), batch_size)]


def bare_msearch(url: str, batches: list[bytes]) -> tuple[float, float]:
    """Post pre-built `_msearch` bodies one after another on one connection: (wall s, summed took s)."""
    parts = urllib.parse.urlsplit(url)
    conn = (http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection)(
        parts.hostname, parts.port)
    took = 0
    t0 = time.perf_counter()
    for body in batches:
        conn.request("POST", "/_msearch", body=body, headers={"Content-Type": "application/x-ndjson"})
        resp = json.loads(conn.getresponse().read())
        if any("error" in item for item in resp["responses"]):
            raise RuntimeError("bare _msearch: a query failed")
        took += resp["took"]
    wall = time.perf_counter() - t0
    conn.close()
    return wall, took / 1000


if __name__ == "__main__":
    main()
