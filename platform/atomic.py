"""Atomic writes, the one way evalctl persists: a file or a folder is written under a private temporary
name beside its destination and renamed into place, so a reader (or a crashed run) never sees half of it,
and concurrent writers never write into each other's temporary. A full, over-quota or read-only disk is
reported here, once for every writer, as one Failure naming the destination (DiskError)."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evalctl.errors import Failure

_TAKEN = (errno.ENOTEMPTY, errno.EEXIST)
_DISK = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
         errno.EROFS: "the file system is read-only"}
_NEARLY_FULL = 1 << 20  # bytes free below which a write that failed without an errno is taken as ENOSPC


class DiskError(Failure):
    """A write failed for want of space or because the disk is read-only; names the destination."""

    def __init__(self, dest: Path, code: int):
        super().__init__(f"{dest}: {_DISK[code]} ({errno.errorcode[code]}); nothing was written there and what was "
                         "finished before is kept: free space (or make it writable) and rerun the same command")
        self.code = code


def _disk_errno(e: OSError, dest: Path) -> int | None:
    if e.errno in _DISK:
        return e.errno
    if e.errno is not None:
        return None
    # numpy ("4224 requested and 992 written") and pyarrow report a failed write without an errno: ask the
    # file system, while the failed temporary still takes its space
    probe = next(p for p in (dest, *dest.parents) if p.exists())
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return errno.EROFS
    return errno.ENOSPC if st.f_bavail * st.f_frsize < _NEARLY_FULL or st.f_favail == 0 else None


@contextmanager
def _reporting_disk(dest: Path) -> Iterator[None]:
    """A full or read-only disk under the block becomes DiskError(dest); the outermost destination (the
    folder being built, not a file inside its private staging copy) is the one named."""
    try:
        yield
    except DiskError as e:
        raise DiskError(dest, e.code) from e.__cause__
    except OSError as e:
        if (code := _disk_errno(e, dest)) is None:
            raise
        raise DiskError(dest, code) from e


def _private_name(dest: Path) -> Path:
    # unique per writer; hidden, so listings of the folder skip it (mkstemp/mkdtemp would also force
    # owner-only permissions on what is published)
    return dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextmanager
def writing(path: Path) -> Iterator[Path]:
    """A temporary file path beside `path`; when the block ends without error the file is flushed to disk
    and renamed onto `path` (replacing it), otherwise removed."""
    with _reporting_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _private_name(path)
    try:
        with _reporting_disk(path):  # inside: the temporary is removed only after the disk was asked
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
    with _reporting_disk(dest):
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
        with _reporting_disk(dest):
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
