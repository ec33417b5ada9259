"""Do two builds of one HNSW index give the same k-NN hits? (issue 27 item 4) With Lucene's SIMD vector code and
with its plain Java code (configs/opensearch.yaml `simd_vectors`), on a private node (a copy of the managed node's
distribution) started afresh for each round: per round three builds of the same vectors, one after another, each
ending in one segment; it prints how many of the queries' top 10 (ids and scores) differ between the first and
second build (the first runs on code the JIT has not compiled yet) and between the second and third, the
build seconds (client included) and the last build's search time per query.

    python bench/ann_reproducible.py [--rounds 2] [--docs 3000] [--modes simd,plain]

The vectors: unit vectors around 30 random centres (seeded), 384 dimensions; the queries are 60 of them, perturbed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from opensearchpy import OpenSearch, helpers

DIM, QUERIES = 384, 60


def vectors(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(30, DIM))
    x = (centres[rng.integers(0, 30, n)] + 0.7 * rng.normal(size=(n, DIM))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, x[rng.choice(n, QUERIES, replace=False)] + 0.05 * rng.normal(size=(QUERIES, DIM)).astype(np.float32)


def build(client, name: str, x: np.ndarray, queries: np.ndarray) -> tuple[list, int, float, float]:
    """(hits, segments, build seconds, search ms per query) of a new index loaded in order, 500 per request."""
    method = {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
              "parameters": {"m": 16, "ef_construction": 100}}
    client.indices.create(index=name, body={
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": -1}},
        "mappings": {"properties": {"v": {"type": "knn_vector", "dimension": DIM, "method": method}}}})
    t0 = time.perf_counter()
    for s in range(0, len(x), 500):
        helpers.bulk(client, ({"_index": name, "_id": str(i), "v": x[i].tolist()} for i in range(s, min(len(x), s + 500))))
    client.indices.refresh(index=name)
    seconds = time.perf_counter() - t0
    shards = client.indices.segments(index=name)["indices"][name]["shards"].values()
    segments = sum(len(copy["segments"]) for copies in shards for copy in copies)
    t0, hits = time.perf_counter(), []
    for q in queries:
        body = {"size": 10, "query": {"knn": {"v": {"vector": q.tolist(), "k": 10, "method_parameters": {"ef_search": 100}}}}}
        hits.append([(h["_id"], h["_score"]) for h in client.search(index=name, body=body)["hits"]["hits"]])
    return hits, segments, seconds, (time.perf_counter() - t0) / len(queries) * 1000


def main() -> None:
    from evalctl.opensearch.cluster_info import simd_vectors
    from evalctl.opensearch.node import ManagedNode

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="node starts per mode")
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--modes", default="simd,plain")
    ap.add_argument("--port", type=int, default=9277)
    args = ap.parse_args()
    x, queries = vectors(args.docs)
    shared = ManagedNode()
    home = Path(tempfile.mkdtemp(prefix="evalctl-private-node-ann-"))
    try:
        shutil.copytree(shared.dist, home / "dist" / shared.dist.name, symlinks=True)
        for mode in args.modes.split(","):
            spec = dataclasses.replace(shared.spec, node=dataclasses.replace(shared.spec.node, simd_vectors=mode == "simd"))
            node = ManagedNode(spec=spec, home=home, http_port=args.port, heap="512m")
            for r in range(args.rounds):
                node.start(echo=lambda *_: None)
                try:
                    client = OpenSearch(node.url, timeout=300)
                    builds = [build(client, f"ann-{i}", x, queries) for i in range(3)]
                    differ = lambda a, b: sum(p != q for p, q in zip(a[0], b[0]))  # noqa: E731
                    print(json.dumps({
                        "mode": mode, "round": r, "node_simd_vectors": simd_vectors(client), "docs": args.docs,
                        "segments": [b[1] for b in builds], "build_s": [round(b[2], 1) for b in builds],
                        "differ_first_second": differ(builds[0], builds[1]),
                        "differ_second_third": differ(builds[1], builds[2]),
                        "search_ms_per_query": round(builds[2][3], 1)}), flush=True)
                    client.indices.delete(index="ann-*")
                finally:
                    node.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
