"""Vector read-back throughput: `evalctl vectors export` (point-in-time + search_after into an on-disk
array, with its corpus and cache checks) vs reading the same vectors from the local embedding cache, vs
a naive `opensearchpy.helpers.scan` of `_source` collected in memory. Each side runs in a worker process
of its own, so its peak RSS (ru_maxrss) is its own. Prints a small table and the ratio to the scan.

    python bench/readback.py [--docs 4000] [--rounds 5] [--model all-minilm-l6-v2] [--view T]

The corpus is the real USPTO grant sample, repeated with suffixed ids up to --docs documents (as in
bench/index.py); vectors are encoded once into a private cache and indexed before anything is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import load, ratio_line, run_workers, serve, spread  # bench/ is on sys.path

BENCH = Path(__file__).resolve().parent
SIDES = ("export", "cache", "scan")


def build_corpus(workdir: Path, n_docs: int):
    """bench/index.py's corpus builder (repeated real USPTO grants)."""
    spec = importlib.util.spec_from_file_location("bench_index", BENCH / "index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_corpus(workdir, n_docs)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_side(side: str, client, corpus, view, model_id: str) -> dict:
    """One read of every vector, by one path (called in that path's own worker process)."""
    t0 = time.perf_counter()
    if side == "export":  # the command path: PIT pages into a memmap, then the corpus and cache checks
        from evalctl.evaluators.vectors.export import ViewVectors, export_vectors

        rep = export_vectors(client, ViewVectors(corpus, view, model_id), force=True, progress=False)
        n, dim, stream = len(rep.export.ids), rep.export.vectors.shape[1], rep.seconds
    elif side == "cache":  # the embedding cache, by text, as encoding would return them
        from evalctl.indexers.encoder import get_or_encode
        from evalctl.models import get_model

        records = [r for r in corpus.records() if view.render(r)]
        vectors = get_or_encode(get_model(model_id), "document", view.name, [r.id for r in records],
                                [view.render(r) for r in records], progress=False)
        n, dim, stream = vectors.shape[0], vectors.shape[1], None
    else:  # naive: scroll every _source into Python lists, then one array
        from opensearchpy import helpers

        from evalctl.indexers.index_layout import index_name, vector_field

        field = vector_field(view.name)
        hits = list(helpers.scan(client, index=index_name(corpus.name, model_id), size=1000,
                                 query={"query": {"exists": {"field": field}}, "_source": ["doc_id", field]}))
        ids = [h["_source"]["doc_id"] for h in hits]
        vectors = np.array([h["_source"][field] for h in hits], dtype=np.float32)
        n, dim, stream = len(ids), vectors.shape[1], None
    return {"seconds": time.perf_counter() - t0, "stream_seconds": stream, "n": n, "dim": dim,
            "peak_mb": peak_rss_mb()}


def setup(workdir: Path, n_docs: int, model_id: str, view_name: str) -> dict:
    """Corpus, vectors and index, in a process of its own: the model it loads must not count in the
    sides' peak RSS (Linux keeps ru_maxrss across fork and exec)."""
    from evalctl.opensearch.connection import make_client
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model
    from evalctl.corpus.views import load_views

    corpus = build_corpus(workdir, n_docs)
    rep = index_corpus(make_client(), corpus, [load_views()[view_name]], get_model(model_id), progress=False)
    return {"corpus": str(corpus.path), "index": rep.index}


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, check=True,
                         env=os.environ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--view", default="T")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--side", choices=["setup"], help=argparse.SUPPRESS)
    ap.add_argument("--serve", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.side == "setup":
        print(json.dumps(setup(Path(args.corpus), args.docs, args.model, args.view)))
        return
    if args.serve:
        from evalctl.opensearch.connection import make_client
        from evalctl.corpus.store import load_corpus
        from evalctl.corpus.views import load_views

        client, corpus, view = make_client(), load_corpus(args.corpus), load_views()[args.view]
        serve(lambda _: run_side(args.serve, client, corpus, view, args.model))
        return
    tmp = Path(tempfile.mkdtemp(prefix="evalctl-bench-readback-"))
    os.environ["EVALCTL_CACHE"] = str(tmp / "cache")
    common = ("--model", args.model, "--view", args.view)
    made = _child("--side", "setup", "--corpus", str(tmp), "--docs", str(args.docs), *common)
    load_before = load()
    try:
        times, results = run_workers(__file__, SIDES, args.rounds, "--corpus", made["corpus"], *common)
    finally:
        from evalctl.opensearch.connection import make_client

        make_client().indices.delete(index=made["index"])
        shutil.rmtree(tmp, ignore_errors=True)
    first = results["export"][0]
    stream = [r["stream_seconds"] for r in results["export"]]
    print(f"\nvector read-back, {first['n']} docs x {first['dim']}-d ({args.model}, view {args.view}), "
          f"index {made['index']}, {args.rounds} rounds (sides rotate, all warmed)")
    print(f"machine: before {load_before}; after {load()}")
    print(f"{'path':<52}{'seconds min / median / max':>28}{'vectors/s (median)':>20}{'peak RSS MB':>13}")
    rows = (("evalctl vectors export (PIT+search_after, checks)", times["export"], results["export"]),
            ("  of which streaming into the .npy", stream, None),
            ("embedding cache (get_or_encode, all cached)", times["cache"], results["cache"]),
            ("naive helpers.scan of _source, in memory", times["scan"], results["scan"]))
    for label, xs, res in rows:
        peak = f"{max(r['peak_mb'] for r in res):>13.0f}" if res else f"{'':>13}"
        print(f"{label:<52}{spread(xs, '{:.2f}'):>28}{first['n'] / statistics.median(xs):>20.0f}{peak}")
    print(ratio_line("export / naive scan throughput", [s / e for s, e in zip(times["scan"], times["export"])],
                     ">= 1.2"))
    print(ratio_line("export streaming part / naive scan throughput",
                     [s / e for s, e in zip(times["scan"], stream)], "(no target; where the export's time goes)"))


if __name__ == "__main__":
    sys.exit(main())
