"""How evalctl's costs grow with the corpus (issue 27 items 2-3): every step a user runs, through the
`evalctl` CLI itself, on replicated corpora of N records built from the quickstart's OPS pizza dataset.

    python bench/scale.py [--sizes 10000,30000] [--full] [--noise 0.005] [--view TA] [--query-sample 2000] [--keep]
                          [--seed-records N]

Corpus of size N: replica 0 is the sample itself (2,973 records, or its first --seed-records: the smallest run
tests/bench/test_benches.py makes); replica k >= 1 copies every record
with id `r<k>-<id>` (not a publication number, so the native import keeps it as written), family
`r<k>-<family>`, the token `zr<k>` appended to title and abstract (BM25 and the embedding cache see
distinct texts), no aliases, and its citations mapped into replica k (a citation of a record the replica
lacks is dropped), so each replica holds the sample's citation graph; the last replica is cut to reach
N. Vectors: the sample's texts are encoded once with the real model (kept under --workdir per model, view and
sample size, and reused by later runs); a replica's vector is its seed's plus Gaussian noise of standard deviation
--noise per component (one draw per distinct text of the replica: records sharing a text share a vector), renormalised (0.005 on 384-d MiniLM: cosine to the seed about 0.995). They enter
through `evalctl vectors import` (document and query role), so nothing else is encoded.

Timed steps, each one `evalctl` process (its wall time and peak RSS from wait4): corpus import, vectors
import (document, query), qrels, index, retrieve bm25 / dense / exact / hybrid / rrf (a seeded
sample of --query-sample test queries of each size: per-query costs without hours of search),
vectors export (read-back), classify and cluster (--task-seeds); with --variants (e.g. encoder=sq,data_type=byte)
the corpus is indexed again per configs/index.yaml setting and its dense run scored against the float32 exact
run (nDCG@10, recall of the exact top 10). Then the node's JVM heap and the bench's
index store size. Between consecutive sizes it prints each step's growth exponent log(t2/t1)/log(n2/n1)
(per query for the retrieval steps, also of the run's own search time; per seed for the label tasks), and
each step's peak-RSS growth over the float32 matrix's growth (the imports' RSS cancels out). Also timed:
retrieve's query set (load_query_set) and `evalctl run --dry-run` of the same steps as a study spec,
whose plan shows whether the runner takes the CLI's runs as done. Everything runs under a private
EVALCTL_CACHE, EVALCTL_RESULTS and EVALCTL_INDEX_PREFIX; the bench's indexes are deleted at the end
unless --keep. ranx's numba kernels are read from this user's evalctl cache (NUMBA_CACHE_DIR), so a
one-off compile does not land in whichever step scores first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalctl.datasets.fetch import dataset_sources
from benchlib import load  # bench/ is on sys.path
from evalctl.paths import numba_cache

REPO = Path(__file__).resolve().parents[1]
FULL_SIZE = 113148  # the study's landscape
METHODS = ("bm25", "dense", "exact", "hybrid", "rrf")


# ---- children (run in processes of their own: numpy, torch and the model never count in the steps' RSS)

def prepare_seed(workdir: Path, sample: Path | None, model_id: str, view_name: str, records: int | None) -> None:
    """The sample's records (its first `records`, or all) and their real vectors under the view, encoded once
    (cached in workdir)."""
    import numpy as np

    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.encoder import get_or_encode
    from evalctl.models import get_model

    if (workdir / "seed.npy").exists():
        return
    os.environ["EVALCTL_CACHE"] = str(workdir / "seed-cache")
    corpus = import_corpus("ops", [sample or sample_pages()], out=workdir / "seed-corpus", overwrite=True).corpus
    view = load_views()[view_name]
    records = list(corpus.records())[:records]
    rows = [r for r in records if view.render(r)]
    vectors = get_or_encode(get_model(model_id), "document", view.name, [r.id for r in rows],
                            [view.render(r) for r in rows], progress=False)
    with open(workdir / "seed.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_dict()) + "\n")
    (workdir / "seed-ids.txt").write_text("\n".join(r.id for r in rows) + "\n")
    np.save(workdir / "seed.npy.tmp.npy", np.asarray(vectors, dtype=np.float32))
    os.replace(workdir / "seed.npy.tmp.npy", workdir / "seed.npy")


def sample_pages() -> Path:
    return dataset_sources("ops-pizza-1990-2015").sources[0]


def _suffixed(text: str | None, token: str) -> str | None:
    return f"{text} {token}" if text else text


def replicate(workdir: Path, n: int, noise: float, out: Path) -> None:
    """corpus.jsonl, vecs.npy and ids.txt of the N-record corpus (see the module docstring)."""
    import numpy as np

    from evalctl.corpus.patent_record import PatentRecord

    seeds = [PatentRecord.from_dict(json.loads(line)) for line in open(workdir / "seed.jsonl", encoding="utf-8")]
    seed_vecs = np.load(workdir / "seed.npy")
    row_of = {rid: i for i, rid in enumerate((workdir / "seed-ids.txt").read_text().split())}
    resolve = {}
    for r in seeds:
        for key in (r.id, *r.aliases):
            resolve.setdefault(key, r.id)
    out.mkdir(parents=True, exist_ok=True)
    ids, vec_rows, noisy = [], [], []
    rng = np.random.default_rng(0)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for k in range(math.ceil(n / len(seeds))):
            members = seeds[: min(len(seeds), n - k * len(seeds))]
            present = {r.id for r in members}
            for r in members:
                if k:
                    cites = tuple(dataclasses.replace(c, target=f"r{k}-{resolve[c.target]}")
                                  for c in r.citations if resolve.get(c.target) in present)
                    token = f"zr{k}"
                    r2 = dataclasses.replace(
                        r, id=f"r{k}-{r.id}", family_id=r.family_id and f"r{k}-{r.family_id}",
                        title=_suffixed(r.title, token), abstract=_suffixed(r.abstract, token), aliases=(),
                        citations=cites)
                else:
                    r2 = r
                f.write(json.dumps(r2.to_dict()) + "\n")
                if r.id in row_of:
                    ids.append(r2.id)
                    vec_rows.append(row_of[r.id])
                    noisy.append((k, r2.title, r2.abstract) if k else None)
    vecs = seed_vecs[vec_rows]
    # one noise per distinct text of a replica: records that share a text share its vector, as the product requires
    # (replica 0 keeps the real vectors)
    texts = {key: i for i, key in enumerate(dict.fromkeys(key for key in noisy if key is not None))}
    draws = rng.normal(0.0, noise, size=(len(texts), vecs.shape[1])).astype(np.float32)
    moved = np.array([key is not None for key in noisy])
    vecs[moved] += draws[[texts[key] for key in noisy if key is not None]]
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    np.save(out / "vecs.npy", vecs.astype(np.float32))
    (out / "ids.txt").write_text("\n".join(ids) + "\n")
    print(json.dumps({"records": sum(1 for _ in open(out / "corpus.jsonl")), "vectors": len(ids),
                      "dim": int(vecs.shape[1])}))


def query_set(corpus_name: str, view: str, split: str = "test") -> dict:
    """The test split's size, and how long retrieve's query set takes to build (item 3: <= 1 s at 113k,
    without reading the whole corpus)."""
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.query_set import load_query_set

    corpus = load_corpus(corpus_name)
    qset = load_qrels(corpus, "citations")
    t0 = time.perf_counter()
    queries = load_query_set(corpus, qset, split, view)
    return {"queries": len(queries.ids), "seconds": time.perf_counter() - t0}


def ann_fidelity(ann_run: str, exact_run: str) -> dict:
    """nDCG@10 of a run on a variant index and its recall of the float32 exact top 10 (item 5)."""
    from evalctl.evaluators.scoring.metrics import ann_loss
    from evalctl.evaluators.scoring.runs import load_run

    return ann_loss(load_run(ann_run), load_run(exact_run))


# ---- the parent: times each evalctl process

def seed_args(args) -> list[str]:
    """What names the seed a child reads (see main)."""
    return ["--workdir", str(args.workdir), "--model", args.model, "--view", args.view,
            *(["--sample", str(args.sample)] if args.sample else []),
            *(["--seed-records", str(args.seed_records)] if args.seed_records else [])]


def child(*args: str) -> str:
    return subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, check=True,
                          env=os.environ).stdout.strip().splitlines()[-1]


def timed(argv: list[str], env: dict | None = None) -> dict:
    """One evalctl process: wall seconds and its peak RSS (wait4's ru_maxrss, this child alone)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{out[-3000:]}")
    return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "out": out}


def node_get(path: str):
    from evalctl.opensearch.connection import make_client

    return make_client().transport.perform_request("GET", path)


def node_state(prefix: str) -> dict:
    """JVM heap of every node, and the store size of the bench's indexes."""
    nodes = node_get("/_nodes/stats/jvm")["nodes"].values()
    heap_used = sum(n["jvm"]["mem"]["heap_used_in_bytes"] for n in nodes)
    heap_max = sum(n["jvm"]["mem"]["heap_max_in_bytes"] for n in nodes)
    indices = node_get(f"/_cat/indices/{prefix}*?format=json&bytes=b")
    return {"heap_used_mb": heap_used / 2**20, "heap_max_mb": heap_max / 2**20,
            "store_mb": {i["index"]: int(i["store.size"]) / 2**20 for i in indices}}


def delete_indexes(prefix: str) -> None:
    from evalctl.opensearch.connection import make_client

    client = make_client()
    for i in node_get(f"/_cat/indices/{prefix}*?format=json"):
        client.indices.delete(index=i["index"])


def run_size(n: int, args, tmp: Path, prefix: str) -> dict:
    evalctl = [str(Path(sys.executable).with_name("evalctl"))]
    data = tmp / f"data-{n}"
    made = json.loads(child("--replicate", str(n), *seed_args(args), "--out", str(data), "--noise", str(args.noise)))
    name = f"scale-{n}"
    model = ["--corpus", name, "--model", args.model, "--view", args.view]
    vec = ["--npy", str(data / "vecs.npy"), "--ids", str(data / "ids.txt"), "--precision", "float32"]
    steps: dict[str, dict] = {}
    steps["corpus import"] = timed(evalctl + ["corpus", "import", "--format", "native", "--name", name,
                                              str(data / "corpus.jsonl")])
    steps["vectors import (document)"] = timed(evalctl + ["vectors", "import", *model, *vec])
    steps["vectors import (query)"] = timed(evalctl + ["vectors", "import", *model, *vec, "--role", "query"])
    steps["qrels"] = timed(evalctl + ["corpus", "qrels", name])
    steps["index"] = timed(evalctl + ["index", *model])
    qs = json.loads(child("--query-set", name, "--view", args.view))
    queries = qs["queries"]
    for method in args.methods:
        steps[f"retrieve {method}"] = retrieve_step(method, evalctl, model, args, tmp, name, queries)
    steps["read-back (vectors export)"] = timed(evalctl + ["vectors", "export", *model, "--force"])
    seeds = ["--label-set", args.label_set, "--seeds", args.task_seeds]
    n_seeds = len(args.task_seeds.split(","))
    steps["classify"] = timed(evalctl + ["classify", *model, *seeds])
    steps["cluster"] = timed(evalctl + ["cluster", *model, *seeds])
    for s in ("classify", "cluster"):
        steps[s]["units"] = n_seeds
    exact_run = newest_run(tmp, name, "exact") if args.variants else None  # variants need exact among --methods
    for variant in args.variants:
        steps.update(run_variant(variant, evalctl, model, args, tmp, prefix, name, queries, exact_run))
    spec = study_spec(data / "study.yaml", name, data / "corpus.jsonl", args, args.query_sample)
    steps["run --dry-run"] = timed(evalctl + ["run", str(spec), "--dry-run"])
    state = node_state(prefix)
    return {"n": made["records"], "vectors": made["vectors"], "dim": made["dim"], "queries": queries,
            "query_set_seconds": qs["seconds"], "steps": steps, "node": state, "load": load()}


def newest_run(tmp: Path, corpus: str, method: str) -> Path:
    return sorted((tmp / "results" / corpus / "run").glob(f"{method}-*/manifest.json"), key=os.path.getmtime)[-1].parent


def retrieve_step(method: str, evalctl: list[str], model: list[str], args, tmp: Path, name: str, queries: int,
                  env: dict | None = None) -> dict:
    # hybrid and RRF fused by the node where it has neural-search, else by ranx (their fused run has no search of
    # its own: its searches are the BM25 and dense runs')
    fusion = ["--fusion", args.fusion] if method in ("hybrid", "rrf") else []
    step = timed(evalctl + ["retrieve", "--method", method, *model, *fusion, "--query-sample", str(args.query_sample)],
                 env)
    step["units"] = min(queries, args.query_sample)
    # the run's own search time (its _msearch batches), without the process's fixed costs
    manifest = json.loads((newest_run(tmp, name, method) / "manifest.json").read_text())
    if "search_seconds" in manifest:
        step["search_seconds"] = manifest["search_seconds"]
    return step


def run_variant(variant: str, evalctl: list[str], model: list[str], args, tmp: Path, prefix: str, name: str,
                queries: int, exact_run: Path) -> dict[str, dict]:
    """`key=value` of configs/index.yaml (encoder=sq, data_type=byte): the same corpus indexed again with it
    (its own configs folder and index prefix; the embedding cache is shared), its dense run on the same
    query sample, and that run's nDCG@10 and recall of the float32 exact top 10."""
    import yaml

    key, _, value = variant.partition("=")
    configs = tmp / f"configs-{key}-{value}"
    if not configs.exists():
        shutil.copytree(REPO / "configs", configs)
        settings = yaml.safe_load((configs / "index.yaml").read_text())
        settings[key] = yaml.safe_load(value)
        (configs / "index.yaml").write_text(yaml.safe_dump(settings))
    env = {**os.environ, "EVALCTL_CONFIGS": str(configs), "EVALCTL_INDEX_PREFIX": f"{prefix}{key[:1]}{value[:1]}"}
    index = timed(evalctl + ["index", *model], env)
    dense = retrieve_step("dense", evalctl, model, args, tmp, name, queries, env)
    dense["fidelity"] = json.loads(child("--ann-fidelity", str(newest_run(tmp, name, "dense")), str(exact_run)))
    return {f"index {variant}": index, f"retrieve dense {variant}": dense}


def study_spec(path: Path, name: str, corpus_file: Path, args, query_sample: int) -> Path:
    """The same steps as a study spec, for `evalctl run --dry-run` (item 3: <= 5 s at 113k, and the plan
    should find the CLI's runs done: one identity for both)."""
    model, label_set = args.model, args.label_set
    who = f"corpus: {name}\n    models: [{model}]\n    views: [{args.view}]"
    path.write_text(f"""name: {name}
corpora:
  - name: {name}
    format: native
    sources: [{corpus_file}]
    qrels: {{name: citations}}
models:
  - id: {model}
retrieval:
  - {who}
    methods: [{", ".join(args.methods)}]
    query_sample: {query_sample}
classification:
  - {who}
    label_sets: [{label_set}]
clustering:
  - {who}
    label_sets: [{label_set}]
""")
    return path


def cost(step: dict) -> float:
    """Seconds per unit: per query for retrieval, per seed for the label tasks, else the whole step."""
    return step["seconds"] / step.get("units", 1)


def report(results: list[dict]) -> None:
    for res in results:
        matrix_mb = res["vectors"] * res["dim"] * 4 / 2**20
        print(f"\nN = {res['n']} records ({res['vectors']} vectors x {res['dim']}, float32 matrix "
              f"{matrix_mb:.1f} MB; {res['queries']} test queries); machine after: {res['load']}")
        print(f"{'step':<30}{'seconds':>10}{'per unit':>14}{'search s/query':>16}{'records/s':>12}{'peak RSS MB':>13}")
        for label, s in res["steps"].items():
            unit = f"{cost(s):.4f}/{'query' if 'retrieve' in label else 'seed'}" if "units" in s else ""
            search = f"{s['search_seconds'] / s['units']:.4f}" if "search_seconds" in s else ""
            print(f"{label:<30}{s['seconds']:>10.1f}{unit:>14}{search:>16}{res['n'] / s['seconds']:>12.0f}"
                  f"{s['peak_mb']:>13.0f}")
        plan = res["steps"]["run --dry-run"]["out"]
        print(f"run --dry-run's plan: {plan.count(': done')} steps done, {plan.count(': to run')} to run "
              "(the CLI made every step before; a spec's classify and cluster take 5 seeds, the bench's --task-seeds "
              "may differ): " + "; ".join(line.strip() for line in plan.splitlines() if ": to run" in line))
        print(f"retrieve's query set (load_query_set, test split) built in {res['query_set_seconds']:.2f} s "
              "(target at 113k: <= 1 s)")
        if "retrieve exact" in res["steps"]:
            print("exact vs dense (HNSW) on the sample: " + " | ".join(
                line.strip() for line in res["steps"]["retrieve exact"]["out"].splitlines() if "ANN vs exact" in line))
        for label, step in res["steps"].items():
            if "fidelity" in step:
                print(f"{label} vs float32 exact: " + "  ".join(f"{k}={v:.4f}" for k, v in step["fidelity"].items()))
        for label in ("classify", "cluster"):
            print(f"{label}: " + " | ".join(line.strip() for line in res["steps"][label]["out"].splitlines()
                                             if line.strip() and not line.startswith("->")))
        node = res["node"]
        stores = ", ".join(f"{k} {v:.1f} MB" for k, v in node["store_mb"].items())
        print(f"node: JVM heap used {node['heap_used_mb']:.0f} of {node['heap_max_mb']:.0f} MB; store: {stores}")
    for a, b in zip(results, results[1:]):
        print(f"\ngrowth exponent {a['n']} -> {b['n']}: log(cost ratio) / log({b['n'] / a['n']:.2f}) "
              "(per query for retrieval, per seed for classify/cluster)")
        # Peak RSS also holds the imports (torch, sklearn): what grows with N is the part that counts.
        matrix_growth = (b["vectors"] - a["vectors"]) * a["dim"] * 4 / 2**20
        print(f"  {'step':<30}{'exponent':>9}{'peak RSS growth / float32 matrix growth':>42}")
        for label in a["steps"]:
            e = math.log(cost(b["steps"][label]) / cost(a["steps"][label])) / math.log(b["n"] / a["n"])
            rss = (b["steps"][label]["peak_mb"] - a["steps"][label]["peak_mb"]) / matrix_growth
            print(f"  {label:<30}{e:>9.2f}{rss:>42.2f}")
            if "search_seconds" in a["steps"][label] and "search_seconds" in b["steps"][label]:
                per_q = [r["steps"][label]["search_seconds"] / r["queries"] for r in (a, b)]
                print(f"  {'  its search time per query':<30}{math.log(per_q[1] / per_q[0]) / math.log(b['n'] / a['n']):>9.2f}")
        print(f"  (the matrix grows by {matrix_growth:.1f} MB; target for classify and cluster: <= 2)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,30000")
    ap.add_argument("--full", action="store_true", help=f"also N = {FULL_SIZE}")
    ap.add_argument("--noise", type=float, default=0.005, help="std-dev per component of a replica's noise")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--view", default="TA")
    ap.add_argument("--label-set", default="cpc_subclass")
    ap.add_argument("--methods", type=lambda v: [x for x in v.split(",") if x], default=list(METHODS),
                    help=f"retrieval methods timed (default {','.join(METHODS)})")
    ap.add_argument("--task-seeds", default="0", help="classify/cluster --seeds")
    ap.add_argument("--query-sample", type=int, default=2000,
                    help="every retrieve searches this seeded sample of the test queries (per-query costs)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "evalctl-bench-scale",
                    help="keeps the sample's encoded vectors between runs")
    ap.add_argument("--variants", type=lambda v: [x for x in v.split(",") if x], default=[],
                    help="configs/index.yaml settings to index again and compare, e.g. encoder=sq,data_type=byte")
    ap.add_argument("--seed-records", type=int, help="replicate only the sample's first N records (a smallest run)")
    ap.add_argument("--keep", action="store_true", help="keep the bench's indexes and data")
    ap.add_argument("--replicate", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--query-set", help=argparse.SUPPRESS)
    ap.add_argument("--ann-fidelity", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sample", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # the seed's vectors are kept per model, view and sample size
    seed = args.workdir / f"{args.model}-{args.view}-{args.seed_records or 'all'}"
    if args.prepare or args.replicate:
        prepare_seed(seed, args.sample, args.model, args.view, args.seed_records)
    if args.replicate:
        return replicate(seed, args.replicate, args.noise, args.out)
    if args.prepare:
        return
    if args.ann_fidelity:
        print(json.dumps(ann_fidelity(*args.ann_fidelity)))
        return
    if args.query_set:
        print(json.dumps(query_set(args.query_set, args.view)))
        return
    sizes = [int(s) for s in args.sizes.split(",")] + ([FULL_SIZE] if args.full else [])
    args.workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="evalctl-bench-scale-"))
    prefix = f"bscale{os.getpid()}"
    # the sample's pages from this user's dataset cache (fetched on first use), found before EVALCTL_CACHE is
    # pointed at the bench's private folder: the children read the same pages, never convert them again
    args.sample = sample_pages()
    # ranx's compiled kernels stay where this user's evalctl keeps them: a cold numba cache would put
    # minutes of one-off compiling into whichever retrieve runs first.
    os.environ.setdefault("NUMBA_CACHE_DIR", str(numba_cache()))
    os.environ.update(EVALCTL_CACHE=str(tmp / "cache"), EVALCTL_RESULTS=str(tmp / "results"),
                      EVALCTL_INDEX_PREFIX=prefix)
    from evalctl.evaluators.fusion.search_pipelines import has_neural_search
    from evalctl.opensearch.connection import make_client

    args.fusion = "native" if has_neural_search(make_client()) else "client"
    print(f"hybrid and rrf: {args.fusion} fusion", flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--prepare", *seed_args(args)], check=True)
    print(f"seed vectors ready in {time.perf_counter() - t0:.0f} s; machine: {load()}", flush=True)
    results = []
    try:
        for n in sizes:
            results.append(run_size(n, args, tmp, prefix))
            print(f"N = {n} done; machine: {load()}", flush=True)
            if not args.keep:  # the node holds one size at a time
                delete_indexes(prefix)
    finally:
        if not args.keep:
            delete_indexes(prefix)
            shutil.rmtree(tmp, ignore_errors=True)
    report(results)
    if args.keep:
        print(f"kept: indexes {prefix}*, data {tmp}")


if __name__ == "__main__":
    sys.exit(main())
