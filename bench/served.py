"""Served-model throughput: evalctl's encode through an OpenAI-compatible embeddings API (a spec with `endpoint:`)
next to local encoding of the same model, on the same patent texts, each round into a fresh cache. Prints one
table.

    python bench/served.py [--rows 150] [--rounds 5] [--concurrency 4] [--max-texts 32] [--url URL --served-model NAME]

Without --url it starts infinity-emb (`make infinity`) serving the bundled all-MiniLM-L6-v2 folder on this machine's
CPU (tests/served_server.py), so both sides share the same cores: the ratio says what the HTTP route costs, not
what a GPU server would give. With --url (and --served-model, and the key's variable in --api-key-env), it measures
that server against local encoding here. The texts are US grants 2019 (title, abstract, claims): the dataset
uspto-grants-2019, fetched on first use.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

from benchlib import load, ratio_line, run_rounds, spread  # bench/ is on sys.path: scripts run from it
from encode import patent_texts

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the test server (served_server.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-texts", type=int, default=32)
    ap.add_argument("--device", default="cpu", help="of the local side")
    ap.add_argument("--model", default="all-minilm-l6-v2", help="the local side's registry id")
    ap.add_argument("--url", help="an endpoint already serving the model (default: start infinity-emb here)")
    ap.add_argument("--served-model", help="its served model name (with --url)")
    ap.add_argument("--api-key-env", help="the variable holding its key (with --url)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import Encoder, encode_texts
    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.models import Endpoint, get_model
    from served_server import SERVED_NAME, InfinityServer, missing_reason

    local = get_model(args.model)
    ids, texts = patent_texts(args.rows)
    with tempfile.TemporaryDirectory(prefix="evalctl-bench-served-") as tmp:
        server = None
        if args.url is None:
            if reason := missing_reason():
                sys.exit(reason)
            os.environ["EVALCTL_BENCH_KEY"] = secrets.token_urlsafe(24)
            server = InfinityServer(offline_model_dir(local), Path(tmp) / "infinity",
                                    api_key=os.environ["EVALCTL_BENCH_KEY"]).start()
            url, name, key_env = server.url, SERVED_NAME, "EVALCTL_BENCH_KEY"
        else:
            url, name, key_env = args.url, args.served_model or local.hf_id, args.api_key_env
        endpoint = Endpoint(url=url, model=name, revision="bench", api_key_env=key_env,
                            max_texts=args.max_texts, concurrency=args.concurrency)
        served = dataclasses.replace(local, id=f"{local.id}-served", offline=None, path=None, endpoint=endpoint)
        enc = Encoder(local, device=args.device)  # loaded once, not timed
        load_before = load()
        reports: dict[str, list] = {"local": [], "served": []}

        def measure(side: str, r: int) -> float:
            spec = served if side == "served" else local
            options = EncodeOptions(encoder=enc if side == "local" else None, cache_root=Path(tmp) / f"{side}{r}",
                                    progress=False)
            report = encode_texts(spec, "document", "tac", ids, texts, options)
            assert report.n_encoded == len(set(texts))
            if r >= 0:
                reports[side].append(report)
            return report.seconds

        try:
            times = run_rounds(("local", "served"), args.rounds, measure)  # warms both sides first
        finally:
            if server is not None:
                server.stop()
    n = len(set(texts))
    where = "infinity-emb on this machine's CPU" if server else url
    print(f"model {local.id}: local on {args.device} vs served by {where} ({args.concurrency} requests in flight, "
          f"up to {args.max_texts} texts each); {n} US grant texts (title+abstract+claims), {args.rounds} rounds "
          "(sides alternate, both warmed), a fresh cache each")
    print(f"machine: before {load_before}; after {load()}")
    print()
    print("| side                                   | seconds min / median / max | texts/s (median) |")
    print("|----------------------------------------|----------------------------|-----------------:|")
    for side, label in (("local", f"local encode_texts ({args.device})"), ("served", "served encode_texts (endpoint)")):
        print(f"| {label:38} | {spread(times[side]):>26} | {n / statistics.median(times[side]):16.1f} |")
    print()
    print(ratio_line("served/local throughput", [a / b for a, b in zip(times["local"], times["served"])],
                     "none (same CPU: the HTTP route's cost)"))


if __name__ == "__main__":
    main()
