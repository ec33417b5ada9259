"""Publishing a finished folder under its final name, safely when several processes publish it at once."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

_TAKEN = (errno.ENOTEMPTY, errno.EEXIST)


def publish_dir(tmp: Path, dest: Path) -> bool:
    """Rename `tmp` to `dest` if `dest` does not exist (or is an empty folder); False (tmp untouched) if it
    does. The rename is atomic, so of several concurrent publishers exactly one wins."""
    try:
        os.rename(tmp, dest)
        return True
    except OSError as e:
        if e.errno not in _TAKEN:
            raise
        return False


def replace_dir(tmp: Path, dest: Path, attempts: int = 20) -> None:
    """Rename `tmp` to `dest`, moving an older `dest` aside first. Each rename is atomic and a writer that
    loses a race moves the winner aside and retries, so every concurrent writer succeeds and `dest` is
    always one complete folder."""
    for _ in range(attempts):
        if publish_dir(tmp, dest):
            return
        old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(dest, old)
        except FileNotFoundError:  # another writer moved it aside just now
            continue
        shutil.rmtree(old, ignore_errors=True)
    raise OSError(errno.EBUSY, f"could not replace {dest} after {attempts} attempts (other writers)", str(dest))
