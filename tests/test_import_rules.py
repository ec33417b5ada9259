"""The rooms import downwards only: `lint-imports` checks the layers contracts of pyproject.toml
(docs/architecture.md draws them: the rooms, and the sub-packages inside evaluators/), and every room and
core module is placed in a layer, so a new one cannot slip past the contract unplaced (inside evaluators/,
the contract is exhaustive: lint-imports itself fails on an unplaced sub-package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _layered_names() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "rooms"]
    return {name.strip() for layer in contract["layers"] for name in layer.replace("|", ":").split(":")}


def test_import_directions_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    exe = str(exe) if exe.exists() else shutil.which("lint-imports")
    assert exe, "lint-imports is not installed: pip install -e '.[test]'"
    out = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout


def test_every_room_and_core_module_has_a_layer():
    rooms = {f"evalctl.{p.name}" for p in (REPO / "platform").iterdir() if (p / "__init__.py").exists()}
    core = {f"evalctl.{p.stem}" for p in (REPO / "platform").glob("*.py")}
    placed = _layered_names()
    unplaced = sorted((rooms | core | {"evalctl.indexers", "evalctl.evaluators"}) - placed)
    assert not unplaced, f"add {', '.join(unplaced)} to a layer of [tool.importlinter] in pyproject.toml"
    assert not placed - rooms - core - {"evalctl.indexers", "evalctl.evaluators"}, "a layer names no module"
