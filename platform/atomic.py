"""Atomic writes, the one way evalctl persists: a file or a folder is written under a private temporary
name beside its destination and renamed into place, so a reader (or a crashed run) never sees half of it,
and concurrent writers never write into each other's temporary."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_TAKEN = (errno.ENOTEMPTY, errno.EEXIST)


def _private_name(dest: Path) -> Path:
    # unique per writer; hidden, so listings of the folder skip it (mkstemp/mkdtemp would also force
    # owner-only permissions on what is published)
    return dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextmanager
def writing(path: Path) -> Iterator[Path]:
    """A temporary file path beside `path`; when the block ends without error the file is flushed to disk
    and renamed onto `path` (replacing it), otherwise removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _private_name(path)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with writing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def new_staging_dir(dest: Path) -> Path:
    """A new private empty folder beside `dest`, to build `dest` in before publishing it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _private_name(dest)
    tmp.mkdir()
    return tmp


@contextmanager
def staging_dir(dest: Path) -> Iterator[Path]:
    """new_staging_dir(dest), removed when the block ends: publish it inside the block (publish_dir or
    replace_dir); on an error, or if it was not published, nothing of it stays."""
    tmp = new_staging_dir(dest)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
