"""Folders evalctl writes at a user's request (a report, a corpus export): never over someone else's files.

A folder is evalctl's to write when it does not exist, is empty, or carries evalctl's mark for that kind of
output. The mark is written before anything else, so a write that was cut short is still evalctl's to finish;
folders written before the mark existed are recognised by their own summary file (a report's inputs.json,
an export's export.json). Any other folder is refused, naming it, unless the user forces it; a symbolic link
is refused even then: what is written would land somewhere else than the path shown.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evalctl.atomic import write_text
from evalctl.errors import BadInput

MARK = ".evalctl-output"


class FolderTaken(BadInput):
    pass


def check_folder(folder: Path, kind: str, summary: tuple[str, str], force: bool = False) -> None:
    """FolderTaken unless `folder` may receive a `kind` ("report", "export"). `summary`: (file, key) by
    which an older evalctl output of this kind is recognised (a JSON object holding that key)."""
    if folder.is_symlink():
        raise FolderTaken(f"{folder} is a symbolic link (to {os.readlink(folder)}): give the folder itself, so "
                          f"the {kind} is written where the path says")
    if folder.exists() and not folder.is_dir():
        raise FolderTaken(f"{folder} is not a folder")
    if force or not folder.is_dir() or not any(folder.iterdir()) or _is_ours(folder, kind, summary):
        return
    raise FolderTaken(f"{folder} holds files that are not an evalctl {kind}: nothing was written; choose a new or "
                      f"empty folder, or pass --force to write the {kind} into it anyway (replacing the files "
                      "of the same names)")


def claim_folder(folder: Path, kind: str) -> None:
    """Create `folder` (checked with check_folder) and mark it as evalctl's `kind`, before writing into it."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / MARK, json.dumps({"written_by": "evalctl", "kind": kind}) + "\n")


def _is_ours(folder: Path, kind: str, summary: tuple[str, str]) -> bool:
    mark, (file, key) = _json(folder / MARK), summary
    if mark is not None:
        return mark.get("written_by") == "evalctl" and mark.get("kind") == kind
    return key in (_json(folder / file) or {})


def _json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
