"""The rooms import downwards only: `lint-imports` checks the layers contracts of pyproject.toml
(docs/architecture.md draws them: the rooms, the sub-packages inside evaluators/ and the modules inside
study/), and every room and core module is placed in a layer, so a new one cannot slip past the contract
unplaced (inside evaluators/ and study/, the contracts are exhaustive: lint-imports itself fails on an
unplaced sub-package). The study contracts are shown to break when a circle comes back or one task room imports
another, and the graph they are checked on to hold deferred and TYPE_CHECKING imports (the ones that once hid a
circle)."""

from __future__ import annotations

import ast
import copy
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from importlinter import api
from importlinter.contracts.independence import IndependenceContract
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
    assert "4 kept, 0 broken" in out.stdout


def test_every_room_and_core_module_has_a_layer():
    rooms = {f"evalctl.{p.name}" for p in (REPO / "platform").iterdir() if (p / "__init__.py").exists()}
    core = {f"evalctl.{p.stem}" for p in (REPO / "platform").glob("*.py")}
    placed = _layered_names()
    unplaced = sorted((rooms | core | {"evalctl.indexers", "evalctl.evaluators"}) - placed)
    assert not unplaced, f"add {', '.join(unplaced)} to a layer of [tool.importlinter] in pyproject.toml"
    assert not placed - rooms - core - {"evalctl.indexers", "evalctl.evaluators"}, "a layer names no module"


@pytest.fixture(scope="module")
def study_contracts():
    """The study contracts as pyproject.toml writes them, and the real import graph lint-imports checks them on."""
    config = api.read_configuration(str(REPO / "pyproject.toml"))
    session = config["session_options"]
    contracts = [(LayersContract if c["type"] == "layers" else IndependenceContract)(
        name=c["name"], session_options=session, contract_options=c)
        for c in config["contracts_options"] if c["id"] in ("study", "task-rooms")]
    return contracts, grimp.build_graph(*session["root_packages"], cache_dir=None)


@pytest.mark.parametrize("importer, imported", [
    ("page.document", "report.write"),  # the page model tasks draw with, importing the report that runs the tasks
    ("spec.experiment", "abstasks.registry"),  # the spec types, importing the registry whose tasks import them
    ("abstasks.base", "tasks.retrieval.task"),  # the task base, importing a task built on it
    ("tasks.transfer.task", "tasks.retrieval.groups"),  # one task room importing another
])
def test_study_contracts_break_when_a_circle_comes_back(study_contracts, importer, imported):
    contracts, graph = study_contracts
    assert all(c.check(copy.deepcopy(graph), verbose=False).kept for c in contracts)
    circled = copy.deepcopy(graph)
    circled.add_import(importer=f"evalctl.study.{importer}", imported=f"evalctl.study.{imported}",
                       line_number=1, line_contents=f"import evalctl.study.{imported}")
    assert not all(c.check(copy.deepcopy(circled), verbose=False).kept for c in contracts)


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


# What a deferred import may defer: packages whose import costs about as much as `evalctl --help`'s whole start
# (~100 ms past the interpreter's own) or more, by `python -X importtime` (cumulative): sentence_transformers,
# peft, mteb, ranx, torch, sklearn, transformers, datasets (1 to 13 s); numba, pandas, ir_datasets, matplotlib,
# pyarrow, joblib, opensearchpy, scipy, requests, urllib3 (100 to 400 ms; the last two only talk to the node and
# Dashboards, as opensearchpy does); huggingface_hub (its package is lazy, the names evalctl imports from it cost
# 150 to 200 ms); infinity_emb (an alternative encoder, not a dependency). Not heavy, so imported at module
# level: numpy (~110 ms, but the array type of the results store, the runs, the digests and the vectors: deferring
# it would defer most of evalctl's own modules), tqdm (~45 ms), threadpoolctl, orjson, yaml, cbor2 (10 to 30 ms),
# pyserini (lazy; see the `optional:` reason).
HEAVY = frozenset({
    "torch", "transformers", "sentence_transformers", "sklearn", "ranx", "mteb", "peft", "datasets", "numba",
    "pandas", "ir_datasets", "matplotlib", "joblib", "opensearchpy", "scipy", "pyarrow", "requests", "urllib3",
    "huggingface_hub", "infinity_emb", "rdata",
})
REASONS = ("cycle:", "optional:", "after:")  # the reasons other than cost a deferred import may give


def _sources() -> dict[str, Path]:
    """Every module of evalctl's code rooms, by its import name (pyproject's package-dir maps the folders)."""
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    modules = {}
    for package, folder in package_dir.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            modules[".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return modules


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> tuple[list[ast.stmt], list[tuple[ast.stmt, list[ast.stmt]]]]:
    """The module-level imports (class bodies included), and each in-function one with the statement list
    it stands in; imports under `if TYPE_CHECKING:` are neither."""
    top, deferred = [], []

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        for node in body:
            if _type_checking(node):
                visit(node.orelse, in_function)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                deferred.append((node, body)) if in_function else top.append(node)
            else:
                inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []), inner)
                for clause in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                    visit(clause.body, inner)

    visit(tree.body, False)
    return top, deferred


def _targets(node: ast.stmt, module: str, is_package: bool, own: set[str]) -> set[str]:
    """The modules an import statement runs: own modules with the packages above them, or a third-party
    package by its top-level name."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
    runs = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "evalctl":
            runs.add(parts[0])
        runs |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & own
    return runs


def _comment(lines: list[str], node: ast.stmt) -> str:
    """The comment on an import's lines or on the comment lines right above it."""
    text = [line.partition("#")[2] for line in lines[node.lineno - 1 : node.end_lineno] if "#" in line]
    above = node.lineno - 2
    while above >= 0 and lines[above].lstrip().startswith("#"):
        text.append(lines[above].lstrip()[1:])
        above -= 1
    return " ".join(text).strip()


def _calls(statements: list[ast.stmt]) -> set[str]:
    """The names of the functions the statements call (`f()` and `x.f()`: "f")."""
    return {getattr(node.func, "id", getattr(node.func, "attr", None)) for stmt in statements
            for node in ast.walk(stmt) if isinstance(node, ast.Call)}


def deferred_import_violations() -> list[str]:
    """Each in-function import that defers nothing costly, or gives no reason, as 'file:line `import`: what to do'."""
    sources = _sources()
    own = set(sources)
    parsed = {module: ast.parse(path.read_text()) for module, path in sources.items()}
    top, deferred, edges = {}, {}, {}
    for module, tree in parsed.items():
        top[module], deferred[module] = _imports(tree)
        package = sources[module].name == "__init__.py"
        parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)} & own
        edges[module] = parents.union(*(_targets(node, module, package, own) for node in top[module]))

    def reach(start: set[str]) -> set[str]:
        """Everything the modules in start run at import time: own modules and third-party packages."""
        seen, todo = set(), list(start)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(edges.get(name, ()))
        return seen

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    violations = []
    for module, imports in deferred.items():
        path = sources[module]
        lines = path.read_text().splitlines()
        loaded = reach({module})
        for node, body in imports:
            name = f"`{ast.unparse(node)}`"
            where = (str(path.relative_to(REPO)), node.lineno)
            targets = _targets(node, module, path.name == "__init__.py", own)
            defers = (reach(targets) - loaded) & HEAVY
            first = body.index(node)  # the first import of the run of imports this one stands in
            while first and isinstance(body[first - 1], (ast.Import, ast.ImportFrom)):
                first -= 1
            reason = _comment(lines, node) or _comment(lines, body[first])
            # an import of the heavy package itself names what it defers
            named = f"{reason} {ast.unparse(node)}" if not reason.startswith(REASONS) else reason
            words = set(re.findall(r"[a-z_][a-z0-9_]*", named.lower().replace("-", "_")))
            if reason.startswith("cycle:"):
                if module not in reach(targets & own):
                    violations.append((*where, f"{name}: no cycle (it does not import {module} back at module "
                                                f"level): import it at module level"))
            elif reason.startswith("after:"):
                call = reason.removeprefix("after:").split()[0].strip("()`") if reason.split()[1:] else ""
                if call not in _calls(body[:first]):
                    violations.append((*where, f"{name}: `# after: {call}` but the function does not call {call!r} "
                                                f"before it: import it at module level"))
            elif reason.startswith("optional:"):
                if not words & set(extras):
                    violations.append((*where, f"{name}: name its optional-dependencies group ({', '.join(extras)})"))
            elif not defers:
                violations.append((*where, f"{name}: defers nothing costly: import it at module level"))
            elif not words & defers:
                violations.append((*where, f"{name}: defers {', '.join(sorted(defers))}: name it in a comment "
                                            f"(or give a reason: {', '.join(REASONS)})"))
    return [f"{path}:{line} {what}" for path, line, what in sorted(violations)]


@pytest.mark.unit
def test_deferred_imports_defer_something_costly():
    """An import inside a function defers something costly, or has another reason to wait.

    evalctl's own modules and light packages are imported at module level. A function imports inside itself
    only what would make its module costly to import (a HEAVY package, or an own module that reaches one
    through module-level imports; imports in functions and under TYPE_CHECKING do not count), and it says
    so: a comment on the import, on the line above it, or on the first of a run of imports, names a HEAVY
    package the import defers (`# pandas`), one the importing module does not already load; an import of that
    package itself (`import pandas as pd`) names it already. The other
    reasons: `# cycle: <module>`, when the imported module imports the importing one back at module level;
    `# optional: <extra>`, a package of one of pyproject's optional dependency groups; and `# after: <function>`,
    when the function calls <function> first (a setting a package reads once, when it is first imported). Read from the
    source (ast), nothing is imported."""
    violations = deferred_import_violations()
    assert not violations, f"{len(violations)} deferred imports break the rule:\n" + "\n".join(violations)


@pytest.mark.unit
def test_the_cli_starts_without_heavy_packages():
    """`evalctl --help` and the command list load none of the HEAVY packages: commands defer them."""
    code = "import sys, evalctl.cli.main; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    loaded = {name.split(".")[0] for name in out.stdout.split()}
    assert not loaded & HEAVY, f"importing the CLI loads {', '.join(sorted(loaded & HEAVY))}"
