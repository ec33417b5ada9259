"""Folders and files evalctl writes at a user's request (a report, a corpus export, a comparison, a referee
table, an NDJSON or table file): never over someone else's files, never through a symbolic link.

A folder is evalctl's to write when it does not exist, is empty, or carries evalctl's mark for that kind of
output. The mark is written before anything else, so a write that was cut short is still evalctl's to finish;
folders written before the mark existed are recognised by their own summary file (a report's inputs.json,
an export's export.json). Any other folder is refused, naming it, unless the user forces it; a symbolic link
is refused even then: what is written would land somewhere else than the path shown. The same holds for a
single output file (check_file).

Inside the folder every file goes in through `writing_into` / `write_into`, the one door: a link planted
under a name the output uses is replaced, never followed. A file is written beside its name and renamed
over it (atomic.writing), which replaces a link itself, not what it points at; a subfolder that is a link
(`qrels -> /elsewhere`) is removed and made a real folder before anything is written under it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from evalctl.atomic import writing
from evalctl.errors import BadInput

MARK = ".evalctl-output"


class FolderTaken(BadInput):
    pass


def _refuse_link(path: Path, kind: str) -> None:
    if path.is_symlink():
        raise FolderTaken(f"{path} is a symbolic link (to {os.readlink(path)}): give the {kind}'s own path, so "
                          f"it is written where the path says")


def check_folder(folder: Path, kind: str, summary: tuple[str, str] | None = None, force: bool = False) -> None:
    """FolderTaken unless `folder` may receive a `kind` ("report", "export", ...). `summary`: (file, key) by
    which an older, unmarked evalctl output of this kind is recognised (a JSON object holding that key)."""
    _refuse_link(folder, kind)
    if folder.exists() and not folder.is_dir():
        raise FolderTaken(f"{folder} is not a folder")
    if force or not folder.is_dir() or not any(folder.iterdir()) or _is_ours(folder, kind, summary):
        return
    raise FolderTaken(f"{folder} holds files that are not an evalctl {kind}: nothing was written; choose a new or "
                      f"empty folder, or pass --force to write the {kind} into it anyway (replacing the files "
                      "of the same names)")


def check_file(path: Path, kind: str = "output file") -> None:
    """FolderTaken if the single output file `path` is a link (written with write_into(path.parent, name))."""
    _refuse_link(path, kind)


def claim_folder(folder: Path, kind: str) -> None:
    """Create `folder` (checked with check_folder) and mark it as evalctl's `kind`, before writing into it."""
    folder.mkdir(parents=True, exist_ok=True)
    write_into(folder, MARK, json.dumps({"written_by": "evalctl", "kind": kind}) + "\n")


@contextmanager
def writing_into(folder: Path, name: str) -> Iterator[Path]:
    """A temporary path to write `folder`/`name` at (`name` may hold subfolders, never '..'), renamed onto
    it when the block ends without error; links on the way are replaced, never followed (module doc). The
    temporary has no extension of its own: a writer that picks its format by extension must be told it."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ValueError(f"{name!r}: a path inside the output folder")
    _refuse_link(folder, "folder")  # checked before, made a link since: nothing goes through it
    parent = folder
    for part in rel.parts[:-1]:
        parent = _real_folder(parent / part)
    with writing(parent / rel.name) as tmp:
        yield tmp


def write_into(folder: Path, name: str, text: str) -> None:
    """Write `text` (UTF-8) as `folder`/`name` (writing_into)."""
    with writing_into(folder, name) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _real_folder(path: Path) -> Path:
    """`path` as a real folder of its parent: a link there is removed first (its target is kept)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        path.unlink()
    elif mode is not None and not stat.S_ISDIR(mode):
        raise FolderTaken(f"{path} is a file where the output writes a folder: move it away")
    path.mkdir(exist_ok=True)
    return path


def _is_ours(folder: Path, kind: str, summary: tuple[str, str] | None) -> bool:
    mark = _json(folder / MARK)
    if mark is not None:
        return mark.get("written_by") == "evalctl" and mark.get("kind") == kind
    return summary is not None and summary[1] in (_json(folder / summary[0]) or {})


def _json(path: Path) -> dict | None:
    """The JSON object in the regular file `path` (a link is nobody's mark), or None."""
    if path.is_symlink():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
