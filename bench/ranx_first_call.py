"""The first ranx calls of a fresh process, with a cold numba cache (empty folder) and a warm one (the
folder the cold round filled): import, first score (ranx.evaluate, 6 metrics), first min-max and RRF fusion
(ranx.fuse), first paired randomisation test (numpy, the study's protocol: 10,000 flips) and ranx Report,
each in its own fresh process per round.

    python bench/ranx_first_call.py [--rounds 2] [--queries 500] [--caches cold,warm]

Seconds per step; the data are synthetic rankings of evalctl's sizes (500 queries, depth 100).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from evalctl.paths import numba_cache

STEPS = r"""
import json, random, sys, time
T = time.perf_counter
out, t0 = {}, T()
from evalctl.evaluators.scoring import ranx_engine
ranx_engine.load()
out["import ranx"] = T() - t0
from evalctl.evaluators.fusion.client_fusion import fuse_rankings
from evalctl.evaluators.scoring.runs import ranked
from evalctl.evaluators.scoring.metrics import score
from evalctl.evaluators.fusion.settings import FusionSpec
from evalctl.evaluators.scoring.significance import paired_p_values
from evalctl.evaluators.scoring.significance_params import StatsProtocol
import numpy as np
rng, n = random.Random(1), int(sys.argv[1])
docs = [f"D{i}" for i in range(3000)]
qrels = {f"Q{q}": {d: 1 for d in rng.sample(docs, 4)} for q in range(n)}
runs = [{q: ranked((d, rng.random()) for d in rng.sample(docs, 100)) for q in qrels} for _ in range(2)]
t = T(); s = [score(r, qrels) for r in runs]; out["first score (2 runs, 6 metrics)"] = T() - t
t = T(); fuse_rankings(runs, FusionSpec(), 100); out["first fuse min-max"] = T() - t
t = T(); fuse_rankings(runs, FusionSpec(technique="rrf"), 100); out["first fuse RRF"] = T() - t
values = {i: {"m": np.array(list(s[i].per_query["ndcg@10"].values()))} for i in range(2)}
d = values[1]["m"] - values[0]["m"]
t = T(); paired_p_values([d], StatsProtocol()); out["first randomisation test"] = T() - t
t = T(); paired_p_values([d], StatsProtocol()); out["next randomisation test"] = T() - t
from ranx.data_structures import Report, FrozensetDict
t = T()
Report(["a", "b"], {"a": {"ndcg@10": 0.1}, "b": {"ndcg@10": 0.2}},
       FrozensetDict({frozenset("ab"): {"ndcg@10": {"p_value": 0.01, "significant": True}}}), ["ndcg@10"], 0.05,
       {}).to_latex()
out["first Report.to_latex"] = T() - t
out["process total"] = T() - t0
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--caches", default="cold,warm",
                    help="warm alone: this user's numba cache, as filled by earlier evalctl runs (no compiling)")
    args = ap.parse_args()
    kinds = [k for k in ("cold", "warm") if k in args.caches.split(",")]
    rows: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            # the cold round fills its empty folder, which the warm round then reads
            env = {**os.environ, "NUMBA_CACHE_DIR": cache if "cold" in kinds else
                   os.environ.get("NUMBA_CACHE_DIR") or str(numba_cache())}
            for kind in kinds:
                proc = subprocess.run([sys.executable, "-c", STEPS, str(args.queries)], env=env, capture_output=True,
                                      text=True, check=True)
                rows[kind].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"load {os.getloadavg()[0]:.1f}; seconds, min / max over {args.rounds} rounds")
    print(f"{'step':36}" + "".join(f" {k + ' cache':>16}" for k in kinds))
    for step in rows[kinds[0]][0]:
        cells = [f"{min(r[step] for r in rows[k]):.2f} / {max(r[step] for r in rows[k]):.2f}" for k in kinds]
        print(f"{step:36}" + "".join(f" {c:>16}" for c in cells))


if __name__ == "__main__":
    main()
