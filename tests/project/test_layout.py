"""The repository layout must not break the standard library: `platform/` is a folder of the
`evalctl` package, never an importable `platform` module."""

import subprocess
import sys

from conftest import REPO


def test_stdlib_platform_not_shadowed_from_repo_root():
    out = subprocess.run(
        [sys.executable, "-c", "import platform, torch; print(platform.system()); print(platform.__file__)"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert out[0] in ("Linux", "Darwin", "Windows")
    assert not out[1].startswith(str(REPO)), f"platform imported from the repo: {out[1]}"


def test_room_folders_are_not_regular_packages():
    # platform/ would shadow the stdlib; configs/ is a data folder found through its namespace search location.
    for room in ("platform", "configs"):
        assert (REPO / room).is_dir()
        assert not (REPO / room / "__init__.py").exists(), f"{room}/__init__.py would shadow or break the mapping"
    # Code rooms are regular packages: the import-linter contract (tests/project/test_import_rules.py) names them as layers.
    for room in ("indexers", "evaluators"):
        assert (REPO / room / "__init__.py").exists(), f"{room}/__init__.py is missing: lint-imports cannot see the room"

