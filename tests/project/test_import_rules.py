"""The rooms import downwards only: `lint-imports` checks the layers contracts of pyproject.toml
(docs/architecture.md draws them: the rooms, the sub-packages inside evaluators/ and the modules inside
study/), and every room and core module is placed in a layer, so a new one cannot slip past the contract
unplaced (inside evaluators/ and study/, the contracts are exhaustive: lint-imports itself fails on an
unplaced sub-package or module). The study contract is shown to break when a circle comes back, and the
graph it is checked on to hold deferred and TYPE_CHECKING imports (the ones that once hid the circle)."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from importlinter import api
from importlinter.contracts.layers import LayersContract

from conftest import REPO



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
    assert "3 kept, 0 broken" in out.stdout


def test_every_room_and_core_module_has_a_layer():
    rooms = {f"evalctl.{p.name}" for p in (REPO / "platform").iterdir() if (p / "__init__.py").exists()}
    core = {f"evalctl.{p.stem}" for p in (REPO / "platform").glob("*.py")}
    placed = _layered_names()
    unplaced = sorted((rooms | core | {"evalctl.indexers", "evalctl.evaluators"}) - placed)
    assert not unplaced, f"add {', '.join(unplaced)} to a layer of [tool.importlinter] in pyproject.toml"
    assert not placed - rooms - core - {"evalctl.indexers", "evalctl.evaluators"}, "a layer names no module"


@pytest.fixture(scope="module")
def study_contract():
    """The study contract as pyproject.toml writes it, and the real import graph lint-imports checks it on."""
    config = api.read_configuration(str(REPO / "pyproject.toml"))
    (options,) = [c for c in config["contracts_options"] if c["id"] == "study"]
    session = config["session_options"]
    contract = LayersContract(name=options["name"], session_options=session, contract_options=options)
    return contract, grimp.build_graph(*session["root_packages"], cache_dir=None)


@pytest.mark.parametrize("importer, imported", [
    ("page", "report"),  # the page model tasks draw with, importing the report that runs the tasks
    ("experiment", "tasks"),  # the spec types, importing the registry whose tasks import them
    ("task_transfer", "task_retrieval"),  # one task importing another
])
def test_study_contract_breaks_when_a_circle_comes_back(study_contract, importer, imported):
    contract, graph = study_contract
    assert contract.check(copy.deepcopy(graph), verbose=False).kept
    circled = copy.deepcopy(graph)
    circled.add_import(importer=f"evalctl.study.{importer}", imported=f"evalctl.study.{imported}",
                       line_number=1, line_contents=f"from evalctl.study import {imported}")
    assert not contract.check(circled, verbose=False).kept


def test_the_graph_holds_deferred_and_type_checking_imports(tmp_path, monkeypatch):
    """The contracts see an import inside a function or under TYPE_CHECKING (grimp reads every import
    statement, and pyproject.toml does not set exclude_type_checking_imports)."""
    pkg = tmp_path / "circle_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("")
    (pkg / "deferred.py").write_text("def f():\n    from circle_probe import low\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                  "    from circle_probe import low\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circle_probe", cache_dir=None)
    for importer in ("circle_probe.deferred", "circle_probe.typed"):
        assert graph.direct_import_exists(importer=importer, imported="circle_probe.low")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert not config.get("exclude_type_checking_imports")
