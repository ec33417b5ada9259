"""What produced an artefact: the code version every manifest records."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@functools.cache
def code_version() -> str:
    """Package version plus the git commit of the source tree (with `+dirty` for local edits)."""
    try:
        v = version("evalctl")
    except PackageNotFoundError:
        v = "unknown"
    src = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=src, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=src,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return v
    return f"{v}+g{commit}{'.dirty' if dirty else ''}"


def file_sha256(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()
