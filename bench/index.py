"""Load throughput: `evalctl index` vs posting the same pre-serialised NDJSON to `_bulk` with a bare
HTTP client, on the same node, side by side. Prints a small table.

    python bench/index.py [--docs 8000] [--rounds 5] [--model all-minilm-l6-v2] [--view TAC]

The corpus is the real USPTO grant sample (the dataset uspto-grants-2019), repeated with suffixed
ids up to --docs documents; vectors come from the embedding cache, warmed before timing, so both sides
send identical documents and only the loading path is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import resource
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from evalctl.datasets.fetch import dataset_sources
from benchlib import load, ratio_line, run_workers, serve, spread  # bench/ is on sys.path

USPTO = dataset_sources("uspto-grants-2019").sources[0]  # fetched on first use (EVALCTL_DATA_MIRROR offline)


def build_corpus(workdir: Path, n_docs: int):
    from evalctl.corpus.importer import import_corpus

    base = import_corpus("uspto", [USPTO], out=workdir / "base").corpus
    records = list(base.records())
    lines = []
    for i in range(n_docs):
        r = records[i % len(records)]
        lines.append(json.dumps(dataclasses.replace(r, id=f"{r.id}-r{i // len(records)}").to_dict()))
    (workdir / "bench.jsonl").write_text("\n".join(lines) + "\n")
    return import_corpus("native", [workdir / "bench.jsonl"], name=f"bench-index-{os.getpid()}").corpus


def bare_bulk(url: str, index: str, ndjson_chunks: list[bytes]) -> None:
    for body in ndjson_chunks:
        req = urllib.request.Request(f"{url}/{index}/_bulk", data=body, method="POST",
                                     headers={"Content-Type": "application/x-ndjson"})
        with urllib.request.urlopen(req) as r:
            if json.loads(r.read())["errors"]:
                raise RuntimeError("bare _bulk reported errors")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def side_runner(side: str, corpus_dir: str, model_id: str, view_name: str):
    """One loading path, run in a worker process of its own (its peak memory is its own); returns a
    function that loads once into a fresh index and deletes it."""
    from evalctl.opensearch.connection import load_settings, make_client, resolve_url
    from evalctl.corpus.store import load_corpus
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.indexers.index_layout import index_body, index_name, load_index_settings
    from evalctl.indexers.index_loader import _relax, _restore, document, index_corpus, index_manifest
    from evalctl.models import get_model
    from evalctl.corpus.views import load_views

    client, url = make_client(), resolve_url(load_settings())
    corpus, model, view = load_corpus(corpus_dir), get_model(model_id), load_views()[view_name]
    settings = load_index_settings()

    def evalctl_load() -> dict:  # the whole command path: cache lookup, documents, JSON, bulk with retries
        t0 = time.perf_counter()
        rep = index_corpus(client, corpus, [view], model, progress=False)
        seconds = time.perf_counter() - t0
        client.indices.delete(index=rep.index)
        return {"seconds": seconds, "docs": rep.n_loaded, "peak_mb": peak_rss_mb(), "url": url}

    if side == "evalctl":
        return evalctl_load
    # bare: identical documents, serialised before the clock starts, posted in the same chunk size
    records = [r for r in corpus.records() if view.render(r)]
    texts = [view.render(r) for r in records]
    vectors = get_or_encode(model, "document", view.name, [r.id for r in records], texts, progress=False)
    bare = f"{index_name(corpus.name, model.id)}-bare"
    meta = index_manifest(corpus, model, [view.name], settings)
    dumps = client.transport.serializer.dumps  # the same bytes evalctl sends
    lines = []
    for r, t, v in zip(records, texts, vectors):
        lines.append(dumps({"index": {"_id": r.id}}))
        lines.append(dumps(document(r, {view.name: t}, {view.name: v}, [view.name])))
    step = settings.bulk.max_docs * 2
    chunks = [("\n".join(lines[i:i + step]) + "\n").encode() for i in range(0, len(lines), step)]
    del lines

    def bare_load() -> dict:
        # The clock covers what evalctl's load also does around the bulk requests: create the index,
        # relax refresh/replicas, restore them and refresh; so the ratio measures the client path.
        t0 = time.perf_counter()
        client.indices.create(index=bare, body=index_body([view.name], model.dim, model.similarity, settings, meta))
        _relax(client, bare)
        bare_bulk(url, bare, chunks)
        _restore(client, bare, settings)
        seconds = time.perf_counter() - t0
        docs = client.count(index=bare)["count"]
        client.indices.delete(index=bare)
        return {"seconds": seconds, "docs": docs, "peak_mb": peak_rss_mb(), "url": url}

    return bare_load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=8000)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--view", default="TAC")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--serve", choices=["evalctl", "bare"], help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.serve:
        load_once = side_runner(args.serve, args.corpus, args.model, args.view)
        serve(lambda _: load_once())
        return
    if args.corpus is None:
        # Linux carries a parent's peak RSS into its children: keep the parent light and prepare the
        # corpus and the warm cache in a child of their own.
        tmp = Path(tempfile.mkdtemp(prefix="evalctl-bench-"))
        os.environ["EVALCTL_CACHE"] = str(tmp / "cache")
        out = subprocess.run([sys.executable, __file__, "--corpus", f"prepare:{tmp}", "--docs", str(args.docs),
                              "--model", args.model, "--view", args.view], capture_output=True, text=True,
                             check=True).stdout
        corpus_path = out.strip().splitlines()[-1]
    else:  # the preparing child
        from evalctl.indexers.encoder import get_or_encode
        from evalctl.models import get_model
        from evalctl.corpus.views import load_views

        model, view = get_model(args.model), load_views()[args.view]
        corpus = build_corpus(Path(args.corpus.split(":", 1)[1]), args.docs)
        records = [r for r in corpus.records() if view.render(r)]
        get_or_encode(model, "document", view.name, [r.id for r in records], [view.render(r) for r in records],
                      progress=False)  # warm the cache: only loading is timed
        print(corpus.path)
        return
    load_before = load()
    try:
        times, results = run_workers(__file__, ("evalctl", "bare"), args.rounds, "--corpus", corpus_path,
                                     "--model", args.model, "--view", args.view)
    finally:
        if args.corpus is None:
            shutil.rmtree(tmp, ignore_errors=True)
    ev, bare = results["evalctl"][-1], results["bare"][-1]
    print(f"\nindex load, {ev['docs']} docs x 1 view ({args.view}, {args.model}), node {ev['url']}, "
          f"{args.rounds} rounds (sides alternate, both warmed)")
    print(f"machine: before {load_before}; after {load()}")
    print(f"{'path':<36}{'seconds min / median / max':>28}{'docs/s (median)':>17}{'peak client RSS MB':>20}")
    for label, side, r in (("evalctl index (cache warm)", "evalctl", ev),
                           ("bare _bulk, pre-serialised NDJSON", "bare", bare)):
        print(f"{label:<36}{spread(times[side], '{:.2f}'):>28}{r['docs'] / statistics.median(times[side]):>17.0f}"
              f"{r['peak_mb']:>20.0f}")
    print(ratio_line("evalctl / bare throughput", [b / e for b, e in zip(times["bare"], times["evalctl"])], ">= 0.90"))
    print("(peak RSS of each process includes its imports: torch for evalctl, which can encode)")


if __name__ == "__main__":
    sys.exit(main())
