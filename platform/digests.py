"""Content digests of derived files: recorded when a file is written, checked when it is read.

Every cache and stored result whose files another command reads later (a results-store entry, a vector
export, an embedding-cache shard) records the sha256 of each file in its manifest; the reader checks them
before using a byte, so a damaged, truncated or edited file is refused by name (DamagedFile, with the
command that rebuilds it) instead of silently giving other numbers. Cost, measured on the 2-core dev machine:
sha256 of a 113k x 384 float32 file (173 MB, page cache) takes 0.13 s idle, 0.4 s under load, once per
write and once per read; a probe that reads those vectors takes seconds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from evalctl.errors import Failure

ALGORITHM = "sha256"


class DamagedFile(Failure):
    """A derived file that must not be used; names the file, what is wrong and how to rebuild it."""

    def __init__(self, path: Path, why: str, rebuild: str):
        super().__init__(f"{path}: {why}; {rebuild}")
        self.path = path


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return f"{ALGORITHM}:{hashlib.file_digest(f, ALGORITHM).hexdigest()}"


def array_digest(*arrays: np.ndarray) -> str:
    """One digest over the arrays' bytes, in order (so rows moved within or between them change it)."""
    h = hashlib.new(ALGORITHM)
    for a in arrays:
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def digests(folder: Path, names) -> dict[str, str]:
    """{name: digest} of these files of `folder`, for its manifest."""
    return {name: file_digest(folder / name) for name in sorted(names)}


def check(folder: Path, recorded: dict[str, str], rebuild: str) -> None:
    """Every file of `recorded` is in `folder` with that digest, else DamagedFile naming the first that is not."""
    for name, digest in sorted(recorded.items()):
        path = folder / name
        try:
            found = file_digest(path)
        except OSError as e:
            raise DamagedFile(path, f"unreadable ({e.strerror or e})", rebuild) from None
        if found != digest:
            raise DamagedFile(path, "content differs from the digest recorded when it was written (changed, "
                              "truncated or damaged since)", rebuild)


def read_json(path: Path, rebuild: str) -> dict:
    """A manifest: a JSON object, else DamagedFile (unreadable, not UTF-8, truncated, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise DamagedFile(path, f"unreadable or truncated ({e})", rebuild) from None
    if not isinstance(data, dict):
        raise DamagedFile(path, f"expected a JSON object, found {type(data).__name__}", rebuild)
    return data
