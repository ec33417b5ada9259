"""Peak memory of `evalctl vectors import`'s checks on a large `.npy`: a 768 MB float32 matrix (500,000 x 384,
MiniLM's dim) whose row 0 (then its last row) is not unit-norm, read and checked as the import does
(memory-mapped, a block at a time) in a fresh process each; prints the peak RSS of each and where it refused.

    python bench/import_memory.py [--rows 500000] [--dim 384]

The third probe of issue 37 measured 3.8 GB for a bad row 0 before the checks went by block.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHECK = """
import sys
from pathlib import Path
from evalctl.indexers.vectors_import import VectorsImportError, check_rows, read_npy
src = read_npy(Path(sys.argv[1]), Path(sys.argv[2]))
try:
    check_rows(src, int(sys.argv[3]), True, "bench")
    said = "accepted"
except VectorsImportError as e:
    said = "refused at " + str(e).split(" (id", 1)[0].rsplit("/", 1)[-1]
# VmHWM: this process's own peak (ru_maxrss would carry over the parent's, which wrote the file, across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(f"peak RSS {peak / 1024:.0f} MB; {said}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        vectors, ids = Path(tmp) / "v.npy", Path(tmp) / "ids.txt"
        ids.write_text("".join(f"US{i:07d}\n" for i in range(args.rows)))
        matrix = np.lib.format.open_memmap(vectors, mode="w+", dtype=np.float32, shape=(args.rows, args.dim))
        step = 50_000
        for start in range(0, args.rows, step):
            block = np.random.default_rng(start).normal(size=(min(step, args.rows - start), args.dim))
            matrix[start:start + step] = block / np.linalg.norm(block, axis=1, keepdims=True)
        print(f"{vectors.stat().st_size / 2**20:.0f} MB .npy, {args.rows} x {args.dim} float32")
        for bad in (0, args.rows - 1):
            matrix[bad] *= 2
            matrix.flush()
            out = subprocess.run([sys.executable, "-c", CHECK, str(vectors), str(ids), str(args.dim)],
                                 capture_output=True, text=True, check=True).stdout.strip()
            print(f"bad row {bad}: {out}")
            matrix[bad] /= 2


if __name__ == "__main__":
    main()
