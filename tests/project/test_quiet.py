"""Quiet by default (platform/quiet.py): an evalctl command shows its own messages and progress, not the libraries'
(transformers' "Loading weights" bar, their warnings); `evalctl --verbose` shows those too. Run as a user runs it:
`evalctl` processes with the user's environment, on a real model encoding real grant titles."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalctl.quiet import QUIET_ENVIRONMENT
from real_data import USPTO_SAMPLE

FIXTURE = USPTO_SAMPLE
EVALCTL = Path(sys.executable).parent / "evalctl"


def _evalctl(env: dict, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(EVALCTL), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.models
def test_library_noise_only_with_verbose(tmp_path, monkeypatch):
    from evalctl.corpus.importer import import_corpus

    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}
    env.update(EVALCTL_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    monkeypatch.setenv("EVALCTL_CACHE", env["EVALCTL_CACHE"])
    import_corpus("uspto", [FIXTURE], name="quiet")
    quiet = _evalctl(env, "encode", "--corpus", "quiet", "--model", "all-minilm-l6-v2", "--view", "T")
    # a second view, so the model is loaded again (the first view's vectors are cached)
    loud = _evalctl(env, "--verbose", "encode", "--corpus", "quiet", "--model", "all-minilm-l6-v2", "--view", "A")
    assert "Loading weights" in loud.stderr  # transformers' own bar, when the model loads
    assert "Loading weights" not in quiet.stderr
    assert "encode all-minilm-l6-v2" in quiet.stderr + quiet.stdout  # evalctl's own progress stays


@pytest.mark.parametrize("verbose", [False, True])
def test_a_library_bar_is_quiet_unless_verbose(verbose):
    """A bar a library draws with tqdm's defaults (sentence-transformers' while fine-tuning): tqdm reads TQDM_DISABLE
    once, when first imported, so the `evalctl` program decides before its commands import it."""
    args = ["evalctl", *(["--verbose"] if verbose else []), "models", "list"]
    script = (f"import sys; sys.argv = {args!r}\nfrom evalctl.cli import main\ntry:\n    main()\nexcept SystemExit:\n"
              "    pass\nfrom tqdm import tqdm\nfor _ in tqdm(range(3), desc='a library bar'):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("a library bar" in done.stderr) == verbose
