"""ranx as the scorer, in fresh processes: numba's cache under evalctl's cache is written by the first process
and only read by the next, and `evalctl compare` prints the same tables (and ranx's LaTeX and Markdown) in two
processes. The compared runs are made from the OPS pizza dataset without a node: each test query's
candidates ranked by shared IPC codes, shared CPC codes and shared title words (real codes, real titles)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalctl import paths
from evalctl.output_folder import MARK
from real_data import OPS

EVALCTL = str(Path(sys.executable).parent / "evalctl")

SCORE_AND_TEST = """
import time
t = time.perf_counter()
import numpy as np
from evalctl.evaluators.scoring.metrics import score
from evalctl.evaluators.scoring.significance import paired_p
ranking = {"q1": [("d1", 2.0), ("d2", 1.0)], "q2": [("d3", 1.0)]}
print(score(ranking, {"q1": {"d2": 1}, "q2": {"d3": 1}}, ("ndcg@10", "recall@10")).mean)
print(paired_p(np.array([0.1, 0.5, 0.2, 0.9]), np.array([0.3, 0.6, 0.2, 0.4]), "permutation"))
print("seconds", time.perf_counter() - t)
"""


def _fresh(env: dict, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900,
                          check=True)


@pytest.mark.slow  # fresh processes compile ranx's kernels into an empty cache
def test_numba_cache_is_written_once_then_reused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}  # evalctl picks the folder itself
    env.update(EVALCTL_CACHE=str(tmp_path / "cache"), NUMBA_DEBUG_CACHE="1")
    first = _fresh(env, SCORE_AND_TEST)
    folder = tmp_path / "cache" / "numba"
    assert "[cache] data saved to" in first.stdout and str(folder) in first.stdout
    assert any(folder.rglob("*.nbi")) and any(folder.rglob("*.nbc"))
    second = _fresh(env, SCORE_AND_TEST)
    assert "[cache] data loaded from" in second.stdout
    assert "[cache] data saved to" not in second.stdout  # nothing compiled again
    results = lambda out: [ln for ln in out.splitlines() if not ln.startswith(("[cache]", "seconds"))]
    assert results(first.stdout) == results(second.stdout)
    print("cold / warm:", first.stdout.splitlines()[-1], "/", second.stdout.splitlines()[-1])


def _shared(a, b) -> float:
    return float(len(a & b))


@pytest.fixture()
def stored_runs(tmp_path, monkeypatch):
    """Three real-data runs of the OPS pizza sample's test queries (depth 100), stored as evalctl runs."""
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    from evalctl.cli.main import cli
    from evalctl.corpus.qrels import load_qrels
    from evalctl.corpus.query_set import load_query_set
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.scoring.runs import ranked, save_run

    for args in (["corpus", "import", "--format", "ops", "--name", "pz", str(OPS)],
                 ["corpus", "qrels", "pz"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0, res.output
    corpus = load_corpus("pz")
    qset = load_qrels(corpus, "citations")
    records = {r.id: r for r in corpus.records()}
    features = {"ipc": lambda r: set(r.ipc), "cpc": lambda r: set(r.cpc),
                "titlewords": lambda r: set((r.title or "").lower().split())}
    exclude = qset.exclusions()
    queries = load_query_set(corpus, qset, "test", "T").digest()  # what scoring checks a run against
    ids = []
    for name, feature in features.items():
        f = {d: feature(r) for d, r in records.items()}
        ranking = {q: ranked(((d, _shared(f[q], fd)) for d, fd in f.items() if d not in exclude[q] and f[q] & fd), 100)
                   for q in sorted(qset.qrels(split="test"))}
        identity = {"name": f"{name}-test", "corpus_hash": corpus.content_hash, "method": name, "model": None,
                    "view": "T", "qrels": "citations", "split": "test", "query_set": queries}
        ids.append(save_run("pz", identity, ranking).id)
    return tmp_path / "cache", ids


@pytest.mark.slow  # two `evalctl compare` processes
def test_compare_gives_the_same_tables_in_two_processes(stored_runs, tmp_path):
    cache, ids = stored_runs
    env = {**os.environ, "EVALCTL_CACHE": str(cache)}
    outs = []
    for i in (1, 2):
        t = time.perf_counter()
        proc = subprocess.run([EVALCTL, "compare", *ids, "--out", str(tmp_path / f"o{i}")],
                              env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        print(f"compare {i}: {time.perf_counter() - t:.1f} s")
        outs.append((proc.stdout.replace(str(tmp_path / f"o{i}"), "OUT"),
                     {f.name: f.read_text() for f in sorted((tmp_path / f"o{i}").iterdir())}))
    assert outs[0] == outs[1]
    files = outs[0][1]
    assert set(files) == {"comparison.md", "comparison.tex", "comparison.csv", "ranx.tex", "ranx.md", MARK}
    assert "Fisher's paired randomisation test" in files["ranx.tex"] and "NDCG@10" in files["ranx.md"]
    # the tables carry significance letters, the thing two processes used to disagree on
    assert any(ch in files["ranx.md"] for ch in "ᵃᵇᶜ") and "$^{" in files["ranx.tex"]


@pytest.mark.slow  # a fresh process imports ranx and matplotlib
def test_scoring_and_plotting_write_nothing_under_home(tmp_path):
    """ranx imports ir_datasets (~/.ir_datasets) and matplotlib (~/.cache, ~/.config): loading the scorer and
    drawing a report figure keep all of it under EVALCTL_CACHE."""
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {*paths.LIBRARY_DIRS, "XDG_CACHE_HOME", "XDG_CONFIG_HOME"}}
    env.update(HOME=str(home), EVALCTL_CACHE=str(cache))
    _fresh(env, "from evalctl.evaluators.scoring import ranx_engine\n"
                "ranx_engine.load()\n"
                "from evalctl.study.page.document import plt_module\n"
                "plt_module().subplots()\n")
    assert [p.relative_to(home) for p in home.rglob("*")] == []
    assert {p.name for p in cache.iterdir()} >= {"numba", "ir_datasets", "matplotlib", "mteb"}
