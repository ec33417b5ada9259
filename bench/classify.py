"""The classification probes at scale without a node (issue 27 item 3): `classify` on the vectors of a
replicated corpus from `bench/scale.py --replicate N --out DIR`, one process, its wall and CPU time and the
growth of its peak RSS inside `classify` against the float32 matrix of the labelled records.

    python bench/scale.py --replicate 113148 --out /tmp/rep113k
    python bench/classify.py /tmp/rep113k [--label-set ipc3] [--seeds 0]

Run it in two checkouts (before / after a change) for an A/B: each side is its own process.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np


def main() -> None:
    from evalctl.corpus.label_sets import load_label_sets
    from evalctl.evaluators.tasks.classification import ClassifySettings, classify, label_indicators, labelled_rows
    from evalctl.evaluators.vectors.export import VectorExport

    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path, help="a bench/scale.py --replicate folder (corpus.jsonl, vecs.npy, ids.txt)")
    ap.add_argument("--label-set", default="ipc3")
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    ids = (args.data / "ids.txt").read_text().split()
    wanted, codes = set(ids), {}
    with open(args.data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["id"] in wanted:
                codes[d["id"]] = {k: d.get(k) or [] for k in ("cpc", "ipc", "labels")}
    vectors = np.load(args.data / "vecs.npy", mmap_mode="r")  # as an export is read
    export = VectorExport(args.data, {}, ids, vectors, [codes[i] for i in ids])
    rows = labelled_rows(export, load_label_sets()[args.label_set])
    y = label_indicators(rows)
    settings = ClassifySettings(seeds=tuple(int(s) for s in args.seeds.split(",")))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    out = classify(export.vectors, y, rows.ids, settings, export.positions(rows.ids))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    matrix = len(rows.ids) * vectors.shape[1] * 4 / 2**20
    summary = {p: {m: round(v["mean"], 4) for m, v in out["probes"][p]["summary"].items()} for p in settings.probes}
    print(json.dumps({"label_set": args.label_set, "records": len(rows.ids), "labels": len(rows.support),
                      "seeds": len(settings.seeds), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                      "rss_growth_mb": round(peak - before), "matrix_mb": round(matrix, 1),
                      "growth_over_matrix": round((peak - before) / matrix, 2), "summary": summary}))


if __name__ == "__main__":
    main()
