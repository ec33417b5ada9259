"""Native fusion (neural-search) vs client-side fusion (ranx) on an imported, indexed corpus: per technique,
the share of queries with an identical top 10, the largest per-query nDCG@10 difference, mean nDCG@10 of
both, and the cause of every differing query (evaluators/fusion/parity.py). Runs already stored are reused.

    python bench/fusion_parity.py --corpus qs-ops-pizza --model all-minilm-l6-v2 --view TA [--qrels citations]
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--view", default="TA")
    ap.add_argument("--query-view", default=None)
    ap.add_argument("--qrels", default="citations")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=100)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from evalctl.opensearch.connection import make_client
    from evalctl.evaluators.fusion.parity import parity
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.evaluators.scoring.metrics import evaluate_run
    from evalctl.evaluators.fusion.settings import FusionSpec

    client, opts = make_client(), RetrievalOptions(progress=False)
    base = RetrievalSpec(corpus=args.corpus, view=args.view, method="dense", model=args.model,
                         query_view=args.query_view, qrels=args.qrels, split=args.split, k=args.k)
    bm25, dense = (retrieve(client, base.with_(method=m), opts) for m in ("bm25", "dense"))
    print(f"{args.corpus} {args.model} {base.qview}->{args.view} {args.qrels}/{args.split} k={args.k}")
    print(f"{'technique':28} {'queries':>7} {'same top10':>10} {'max dNDCG@10':>12} {'native':>7} {'client':>7}  causes")
    for method, fusion in (("hybrid", FusionSpec()), ("rrf", FusionSpec(technique="rrf"))):
        runs = [retrieve(client, base.with_(method=method, fusion=fusion, fusion_mode=mode), opts)
                for mode in ("native", "client")]
        ndcg = {r.id: evaluate_run(r).per_query["ndcg@10"] for r in runs}
        p = parity(*runs, bm25, dense, fusion, ndcg)
        name = "rrf (k=60)" if method == "rrf" else f"{fusion.normalization}/{fusion.combination}"
        causes = ", ".join(f"{c} {len(qs)}" for c, qs in p.causes.items())
        print(f"{name:28} {p.n_queries:7d} {p.identical_share:10.1%} {p.max_ndcg10_diff:12.4f} "
              f"{p.mean_ndcg10['native']:7.4f} {p.mean_ndcg10['client']:7.4f}  {causes}")


if __name__ == "__main__":
    main()
