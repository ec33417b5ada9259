"""Stored metrics and client-fused runs against what ranx computes now: every stored metrics result of a
results store (EVALCTL_CACHE) is scored again from its stored run and qrels (scoring.evaluate_run, ranx),
every client-fused run fused again from its stored BM25 and dense runs (fusion.fuse_rankings, ranx.fuse).
The stored values were written by whichever code made them (e.g. the plain-Python metrics before issue 30).

    EVALCTL_CACHE=... python bench/ranx_parity.py [--tolerance 1e-9]

Prints one line per result and the largest difference; exits 1 when any value differs by more than the
tolerance, or a fused run's order differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from evalctl import results_store
from evalctl.evaluators.fusion.client_fusion import fuse_rankings
from evalctl.evaluators.scoring.runs import load_run
from evalctl.evaluators.scoring.metrics import evaluate_run
from evalctl.evaluators.fusion.settings import FusionSpec


def metrics_parity(tolerance: float) -> tuple[int, float, list[str]]:
    n, worst, bad = 0, 0.0, []
    for res in results_store.iter_results("metrics"):
        run = load_run(res.manifest["run"])
        stored = json.loads(res.file("per_query.json").read_text())
        mean = json.loads(res.file("metrics.json").read_text())["mean"]
        now = evaluate_run(run, domain=res.manifest.get("domain"), metrics=tuple(stored))
        diff = max([abs(now.mean[m] - mean[m]) for m in stored]
                   + [abs(now.per_query[m][q] - v) for m, per in stored.items() for q, v in per.items()])
        same_queries = all(list(now.per_query[m]) == list(per) for m, per in stored.items())
        n, worst = n + 1, max(worst, diff)
        ok = diff <= tolerance and same_queries
        print(f"{'ok ' if ok else 'BAD'} metrics {res.id} ({run.label}, domain {res.manifest.get('domain')}): "
              f"{len(stored)} metrics x {now.n_queries} queries, largest difference {diff:.2e}")
        if not ok:
            bad.append(res.id)
    return n, worst, bad


def fusion_parity(tolerance: float) -> tuple[int, float, list[str]]:
    n, worst, bad = 0, 0.0, []
    for res in results_store.iter_results("run"):
        m = res.manifest
        if m.get("fusion_mode") != "client":
            continue
        stored = load_run(res.path)
        spec = FusionSpec(**{f.name: m["fusion"][f.name] for f in fields(FusionSpec) if f.name in m["fusion"]})
        now = fuse_rankings([load_run(c).ranking for c in m["components"]], spec, m["k"])
        same_order = all([d for d, _ in now[q]] == [d for d, _ in docs] for q, docs in stored.ranking.items())
        diff = max((abs(a - b) for q, docs in stored.ranking.items() for (_, a), (_, b) in zip(docs, now[q])),
                   default=0.0)
        n, worst = n + 1, max(worst, diff)
        ok = same_order and diff <= tolerance and list(now) == list(stored.ranking)
        print(f"{'ok ' if ok else 'BAD'} fused run {res.id}: {len(now)} queries, same order {same_order}, "
              f"largest score difference {diff:.2e}")
        if not ok:
            bad.append(res.id)
    return n, worst, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tolerance", type=float, default=1e-9)
    args = ap.parse_args()
    n_m, worst_m, bad_m = metrics_parity(args.tolerance)
    n_f, worst_f, bad_f = fusion_parity(args.tolerance)
    print(f"{n_m} metrics results (largest difference {worst_m:.2e}), {n_f} client-fused runs (largest "
          f"{worst_f:.2e}); {len(bad_m) + len(bad_f)} beyond {args.tolerance:g}")
    return 1 if bad_m or bad_f else 0


if __name__ == "__main__":
    sys.exit(main())
