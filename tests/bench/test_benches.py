"""Every bench runs at its smallest size, so a change that breaks one fails here, not months later on a user's
machine: each script in bench/ as a user types it (a fresh process, its own arguments), on the real node, models,
datasets and embedding server, sized to seconds. What a bench prints is checked for its table, not its numbers
(targets are the benches' business, read by a person)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import real_data

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
pytestmark = [pytest.mark.slow, pytest.mark.models, pytest.mark.data]

# The tiny study quickstart.py profiles (and the runs ranx_parity.py, passage_layouts.py and fusion_parity.py read
# back): 60 grants, each title finding its own abstract.
SMOKE_SPEC = """name: bench-smoke
corpora:
  - name: smoke
    dataset: uspto-grants-2019-60
    qrels: {name: known-item, source: known_item, within_views: [T, A], dev_fraction: 0.0}
models:
  - id: all-minilm-l6-v2
retrieval:
  - corpus: smoke
    qrels: known-item
    query_view: T
    views: [A]
    methods: [bm25, dense, hybrid]
    fusion_mode: auto
"""


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory, os_client):
    """A private cache, results store and index prefix; the session's fetched datasets seen through it."""
    root = tmp_path_factory.mktemp("bench")
    (root / "cache").mkdir()
    real_data.ROOT.mkdir(parents=True, exist_ok=True)
    (root / "cache" / "datasets").symlink_to(real_data.ROOT)
    prefix = f"bsm{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "EVALCTL_CACHE": str(root / "cache"), "EVALCTL_RESULTS": str(root / "results"),
           "EVALCTL_INDEX_PREFIX": prefix, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    yield env, root
    os_client.indices.delete(index=f"{prefix}*", ignore_unavailable=True)


def bench(name: str, *args: str, env: dict) -> str:
    """bench/NAME.py run as a user runs it; its output, or the failure with all of it."""
    proc = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"bench/{name}.py {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def smoke_study(bench_env):
    """quickstart.py's profile of the tiny study, kept (its cache and indexes) for the benches that read a study."""
    env, root = bench_env
    (root / "bench-smoke.yaml").write_text(SMOKE_SPEC)
    out = bench("quickstart", "--spec", str(root / "bench-smoke.yaml"), "--keep", env=env)
    kept = json.loads(out.strip().splitlines()[-1].removeprefix("kept: "))
    yield out, {**env, "EVALCTL_CACHE": kept["cache"]}, kept["corpora"][0]
    shutil.rmtree(Path(kept["cache"]).parent, ignore_errors=True)


def test_quickstart_profiles_a_cold_study(smoke_study):
    out, _, _ = smoke_study
    assert "cold `evalctl run" in out and ": ok" in out, out
    assert "where the time goes" in out and "encode" in out and "rerun (everything done)" in out


def test_ranx_parity_rescores_the_stored_results(smoke_study):
    _, env, _ = smoke_study
    out = bench("ranx_parity", env=env)
    assert "BAD" not in out and "ok  metrics" in out and "ok  fused run" in out, out


def test_passage_layouts(smoke_study):
    _, env, corpus = smoke_study
    out = bench("passage_layouts", "--corpus", corpus, "--view", "A", "--passages", "32:24", env=env)
    assert "32:24" in out, out
    assert "truncated by the model" in out


@pytest.mark.neural_search
def test_fusion_parity(smoke_study):
    _, env, corpus = smoke_study
    out = bench("fusion_parity", "--corpus", corpus, "--view", "A", "--query-view", "T", "--qrels", "known-item",
                "--split", "test", env=env)
    assert "same top10" in out, out


def test_scale_and_classify(bench_env, tmp_path):
    env, _ = bench_env
    small = ["--seed-records", "60", "--view", "T", "--workdir", str(tmp_path / "work")]
    out = bench("scale", "--sizes", "60", "--methods", "bm25", "--query-sample", "20", *small, env=env)
    assert "N = 60 done" in out and "retrieve bm25" in out and "classify:" in out, out
    bench("scale", "--replicate", "120", "--out", str(tmp_path / "rep"), *small, env=env)
    got = json.loads(bench("classify", str(tmp_path / "rep"), env=env).strip().splitlines()[-1])
    assert got["records"] > 0 and got["summary"], got


def test_encode(bench_env):
    out = bench("encode", "--rows", "8", "--rounds", "1", env=bench_env[0])
    assert "evalctl encode_texts, cold cache" in out and "docs/s" in out, out


def test_index(bench_env):
    out = bench("index", "--docs", "40", "--rounds", "1", env=bench_env[0])
    assert "evalctl" in out and "bare" in out, out


def test_readback(bench_env):
    out = bench("readback", "--docs", "40", "--rounds", "1", env=bench_env[0])
    assert "scan" in out, out


def test_retrieve(bench_env):
    out = bench("retrieve", "--docs", "20", "--repeat", "1", "--rounds", "1", env=bench_env[0])
    assert "nDCG@10" in out, out


def test_served(bench_env, infinity_server):
    env = {**bench_env[0], "EVALCTL_BENCH_SMOKE_KEY": infinity_server.api_key}
    from served_server import SERVED_NAME

    out = bench("served", "--rows", "8", "--rounds", "1", "--url", infinity_server.url, "--served-model", SERVED_NAME,
                "--api-key-env", "EVALCTL_BENCH_SMOKE_KEY", env=env)
    assert "| served" in out and "| local" in out, out


def test_gpu_script_runs_its_cpu_configuration(bench_env):
    out = bench("gpu", "--seconds", "1", env=bench_env[0])
    assert "| qwen3-embedding-8b | sdpa" in out and "| kalm-gemma3-12b | sdpa" in out, out


def test_ann_reproducible(bench_env):
    from conftest import free_port_pair

    out = bench("ann_reproducible", "--rounds", "1", "--docs", "200", "--modes", "simd",
                "--port", str(free_port_pair()), env=bench_env[0])
    assert json.loads(out.strip().splitlines()[-1])["docs"] == 200


def test_ranx_first_call(bench_env):
    out = bench("ranx_first_call", "--rounds", "1", "--queries", "20", "--caches", "warm", env=bench_env[0])
    assert "warm cache" in out and "first score" in out, out  # the cold column: minutes of compiling


def test_import_memory(bench_env):
    out = bench("import_memory", "--rows", "2000", "--dim", "8", env=bench_env[0])
    assert out.count("bad row") == 2 and "peak RSS" in out, out


def test_code_shape(bench_env):
    out = bench("code_shape", env=bench_env[0])
    assert "functions with more than" in out, out


def test_every_bench_has_a_smallest_run():
    """A new bench comes with its smallest run here (benchlib is their shared library, no bench)."""
    source = Path(__file__).read_text()
    for script in sorted(BENCH.glob("*.py")):
        if script.stem != "benchlib":
            assert f'bench("{script.stem}"' in source, f"bench/{script.name} has no smallest run in {__file__}"
