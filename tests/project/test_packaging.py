"""The package as a user installs it: a wheel built from this tree works outside the source tree, and
every third-party module the code imports is a declared dependency."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import REPO
from test_no_third_party_data import data_files

CODE = ("platform", "indexers", "evaluators")
# Import name -> distribution name where they differ; any other import is its own distribution name.
DISTRIBUTION = {
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "opensearchpy": "opensearch-py",
    "sentence_transformers": "sentence-transformers",
    "huggingface_hub": "huggingface-hub",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(reqs: list[str]) -> set[str]:
    return {_norm(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in reqs}


def _third_party_imports() -> list[tuple[str, str, bool]]:
    """(distribution, file:line, at module level) for every absolute import outside stdlib and evalctl."""
    found = []
    for folder in CODE:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            top_level = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top == "evalctl":
                        continue
                    found.append((_norm(DISTRIBUTION.get(top, top)), f"{path.relative_to(REPO)}:{node.lineno}",
                                  id(node) in top_level))
    return found


def test_every_imported_module_is_a_declared_dependency():
    """Core imports must be in [project].dependencies; an extra's package (datasets, peft) may only be
    imported inside a function, so the tool runs without that extra until the feature is used."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = _requirement_names([r for group in project["optional-dependencies"].values() for r in group])
    imports = _third_party_imports()
    assert {"numpy", "scipy", "tabulate", "matplotlib"} <= {d for d, _, _ in imports}  # the walk sees them
    undeclared = [f"{where}: {dist}" for dist, where, _ in imports if dist not in core | extras]
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(undeclared)
    eager_extras = [f"{where}: {dist}" for dist, where, top in imports if dist not in core and top]
    assert not eager_extras, "an optional dependency imported at module level:\n" + "\n".join(eager_extras)


def _run(cmd: list, cwd: Path, env: dict, timeout: float = 180) -> str:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{out[-4000:]}"
    return out


@pytest.mark.opensearch
def test_wheel_in_a_fresh_venv_runs_from_any_directory(tmp_path, os_client):
    """Build the wheel (setuptools of this environment, no build isolation: nothing is downloaded) from a
    copy of the tree, install it for real (not editable) into a new virtual environment, and use it
    from an empty directory with no source tree in sight.

    The heavy dependencies (torch, sentence-transformers, ...) are not reinstalled: installing them from
    PyPI takes minutes. The new venv gets a .pth file naming this interpreter's site-packages folders,
    like --system-site-packages would, so they come from here; evalctl itself is installed from the
    wheel into the venv's own site-packages, which comes first on sys.path. The test proves the
    commands use that copy: evalctl's modules, configs, dataset catalogue and Dashboards templates all resolve
    inside the venv."""
    assert int(version("setuptools").split(".")[0]) >= 77, (
        "the wheel is built with this environment's setuptools, which must be >= 77 as pyproject's "
        "build-system says: pip install 'evalctl[test]'")
    src, dist, venv, work = (tmp_path / d for d in ("src", "dist", "venv", "work"))
    # ".*" leaves out .git and the virtual environments (.venv-infinity alone is gigabytes)
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "bench"))
    build = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", dist, src],
                 tmp_path, dict(os.environ))
    warnings = re.findall(r"\w*Warning: .*", build)
    assert not warnings, "the build printed warnings:\n" + "\n".join(warnings)
    wheel = next(dist.glob("evalctl-*.whl"))

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site / "zz_dependencies_from_test_env.pth").write_text("\n".join(here) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "EVALCTL_CONFIGS", "VIRTUAL_ENV"))}
    env.update(EVALCTL_CACHE=str(tmp_path / "cache"), EVALCTL_RESULTS=str(tmp_path / "results"), HF_HUB_OFFLINE="1",
               EVALCTL_MODELS_DIR=str(tmp_path / "my-models"),  # no user specs other tests left
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    _run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall", wheel], tmp_path, env)
    work.mkdir()
    evalctl = venv / "bin" / "evalctl"

    where = _run([py, "-c", (
        "import evalctl.cli.main, evalctl.dashboards.objects as d, evalctl.config_files as s\n"
        "from evalctl.study.plan.loading import load_experiment\n"
        "q = load_experiment('quickstart')\n"
        "from evalctl.datasets.catalogue import catalogue_dir, get_dataset\n"
        "assert get_dataset(q.corpora[0].dataset).format == 'ops'\n"
        "for p in (evalctl.cli.main.__file__, s.configs_dir(), d.TEMPLATES, catalogue_dir()): print(p)")],
        work, env).split()
    assert len(where) == 4  # code, configs, Dashboards templates, the dataset catalogue
    for p in where:
        assert Path(p).resolve().is_relative_to(site.resolve()), f"{p} is not the installed copy"
        assert not Path(p).resolve().is_relative_to(REPO), p

    assert "version 0.1.0" in _run([evalctl, "--version"], work, env)
    assert re.search(r"^22 models \(", _run([evalctl, "models", "list"], work, env), re.M)

    # the wheel carries the catalogue, not the data
    with zipfile.ZipFile(wheel) as z:
        assert data_files([n for n in z.namelist() if ".dist-info/" not in n]) == [] and any(n.endswith("configs/datasets/ops-pizza-1990-2015.yaml")
                                                      for n in z.namelist())
    # dashboards export needs an evalctl index: import a dataset of the catalogue and index it (BM25 only)
    name = f"pkg-{uuid.uuid4().hex[:8]}"
    try:
        _run([evalctl, "corpus", "import", "--dataset", "uspto-grants-2019-60", "--name", name], work, env)
        _run([evalctl, "index", "--corpus", name], work, env)
        out = _run([evalctl, "dashboards", "export", "--out", "objects.ndjson"], work, env)
        assert "wrote" in out and f"evalctl-{name}" in (work / "objects.ndjson").read_text()
    finally:
        os_client.indices.delete(index=f"evalctl-{name}*", ignore_unavailable=True)

    plan = _run([evalctl, "run", "quickstart", "--dry-run"], work, env)
    assert "experiment quickstart:" in plan and "import qs-ops-pizza: to run" in plan
    assert "missing source" not in plan
