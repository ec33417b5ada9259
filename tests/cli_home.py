"""The private home and the CLI helpers of the output-folder cases (issues 25 and 37), shared by
study/test_spec_outputs.py, corpus/test_corpus_export_folders.py and evaluators/test_output_folders.py: every
command goes through the real CLI without a traceback; what evalctl did not write stays byte-identical."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli
from real_data import ESPACENET_SAMPLE

PIZZA = ESPACENET_SAMPLE  # 12 records, 3 citation queries


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private cache inside tmp_path/inside; everything else under tmp_path is 'outside' the cache."""
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "inside" / "cache"))
    monkeypatch.setenv("EVALCTL_CONFIG", str(tmp_path / "inside" / "config.yaml"))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", f"hs{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("EVALCTL_RESULTS", raising=False)
    return tmp_path


def invoke(*args):
    out = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    return out


def listing(root: Path) -> dict[str, str]:
    """Every file under root but the private cache, with its content hash."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")
            if p.is_file() and not str(p.relative_to(root)).startswith("inside")}


@pytest.fixture
def corpus(home):
    """The pizza sample imported as hs-pizza, its citation qrels all in the test split."""
    assert invoke("corpus", "import", "--format", "espacenet", "--name", "hs-pizza", PIZZA).exit_code == 0
    assert invoke("corpus", "qrels", "hs-pizza", "--dev-fraction", "0").exit_code == 0
    return "hs-pizza"


def plant_links(folder: Path, outside: Path, files=(), folders=()) -> dict[str, bytes]:
    """Links named as the output's files and subfolders, pointing outside it; what they point at, as bytes."""
    outside.mkdir(exist_ok=True)
    for name in files:
        (outside / name).write_bytes(b"not yours\n")
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(outside / name)
    for name in folders:
        (outside / name).mkdir()
        (outside / name / "keep.txt").write_bytes(b"not yours\n")
        if (folder / name).is_dir() and not (folder / name).is_symlink():
            shutil.rmtree(folder / name)
        (folder / name).symlink_to(outside / name, target_is_directory=True)
    return {str(p.relative_to(outside)): p.read_bytes() for p in outside.rglob("*") if p.is_file()}


def untouched(outside: Path, before: dict[str, bytes]) -> None:
    assert {str(p.relative_to(outside)): p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
