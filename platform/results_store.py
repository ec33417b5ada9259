"""The results store: every run, metric file and table input, each in its own folder with a manifest.

Layout: <results_root>/<corpus>/<kind>/<result id>/
  manifest.json   what produced it (kind, corpus, index manifest, settings, code version, time, ...)
  ...             the result's own files (TREC run, ranx JSON, metrics, per-query values, ...)

A result id is derived from its identity (the manifest minus time and code version), so asking "is
this already done, the same way?" is a lookup: `find(kind, identity)`. Folders are written under a
temporary name and renamed, so a crash never leaves a half result that looks finished.

The manifest records each file's digest (evalctl.digests) and every read checks it: a damaged entry is
not done to `find` (the command that made it rewrites it), skipped and named by listings (one damaged
entry never stops commands about others), and refused by name when a command reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import click

from evalctl.atomic import replace_dir, staging_dir
from evalctl.clock import utc_now
from evalctl.digests import DamagedFile, check, digests, read_json
from evalctl.names import check_name, safe_component
from evalctl.paths import cache_root
from evalctl.provenance import code_version

MANIFEST = "manifest.json"
DIGESTS = "digests"  # manifest key: {file name: digest}; absent in entries written before digests were kept
# The command that makes (and so rebuilds) each kind; a damaged entry counts as not done, so rerunning it rewrites.
_MADE_BY = {"run": "`evalctl retrieve` with the same settings (or `evalctl run SPEC`)",
            "metrics": "`evalctl evaluate` of its run", "classification": "`evalctl classify` (or `evalctl run SPEC`)",
            "clustering": "`evalctl cluster` (or `evalctl run SPEC`)", "transfer": "`evalctl transfer` (or `evalctl run SPEC`)",
            "study-step": "`evalctl run SPEC`", "study-record": "`evalctl run SPEC`",
            "latency": "`evalctl latency` (a new measurement)"}


def results_root() -> Path:
    """EVALCTL_RESULTS, else <cache root>/results."""
    return Path(os.environ.get("EVALCTL_RESULTS") or cache_root() / "results")


def identity_hash(identity: dict) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Result:
    path: Path
    manifest: dict

    @property
    def id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def read_text(self, name: str) -> str:
        """A file of the result, checked against its recorded digest first (DamagedFile if it differs)."""
        if name in (recorded := self.manifest.get(DIGESTS) or {}):
            check(self.path, {name: recorded[name]}, rebuild_hint(self.path))
        return self.file(name).read_text(encoding="utf-8")

    def read_json(self, name: str):
        try:
            return json.loads(self.read_text(name))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:  # an entry from before digests were recorded
            raise DamagedFile(self.file(name), f"unreadable ({e})", rebuild_hint(self.path)) from None

    def verify(self) -> Result:
        """Every file the manifest lists has its recorded digest (DamagedFile naming the first that does not)."""
        check(self.path, self.manifest.get(DIGESTS) or {}, rebuild_hint(self.path))
        return self


def rebuild_hint(folder: Path) -> str:
    """How to rebuild the entry in `folder` (<root>/<corpus>/<kind>/<id>)."""
    return f"rerun {_MADE_BY.get(folder.parent.name, 'the command that made it')} to rebuild {folder.name}"


def load(folder: Path) -> Result:
    """The result in `folder`, its manifest read (DamagedFile if unreadable); files are checked as they are read."""
    manifest = read_json(folder / MANIFEST, rebuild_hint(folder))
    if "kind" not in manifest:
        raise DamagedFile(folder / MANIFEST, "not a results-store manifest (no kind)", rebuild_hint(folder))
    return Result(folder, manifest)


def _skip(e: DamagedFile) -> None:
    click.echo(f"skipped a damaged stored result: {e}", err=True)


def result_id(identity: dict, kind: str) -> str:
    """The id a result of this identity has (its folder's name): its name, then its identity's hash."""
    label = safe_component(str(identity.get("name", kind)))  # the hash keeps a shortened label unique
    return f"{label}-{identity_hash(identity)}"


def _folder(kind: str, corpus: str, identity: dict, root: Path | None) -> Path:
    return (root or results_root()) / check_name(corpus, "corpus") / kind / result_id(identity, kind)


def write(kind: str, corpus: str, identity: dict, files: dict[str, str | bytes], *,
          extra: dict | None = None, root: Path | None = None) -> Result:
    """Store one result atomically. `identity` decides its id; `extra` adds to the manifest only."""
    dest = _folder(kind, corpus, identity, root)
    manifest = {"kind": kind, "corpus": corpus, **identity, **(extra or {}),
                "code_version": code_version(), "created_at": utc_now()}
    with staging_dir(dest) as tmp:
        for name, content in files.items():
            if isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(content, encoding="utf-8")
        manifest[DIGESTS] = digests(tmp, files)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        replace_dir(tmp, dest)
    return Result(dest, manifest)


def find(kind: str, corpus: str, identity: dict, root: Path | None = None) -> Result | None:
    """The stored result with exactly this identity, if any and intact: a damaged one (named on stderr) is
    not done, so the command that asked redoes it and rewrites the entry."""
    dest = _folder(kind, corpus, identity, root)
    if not (dest / MANIFEST).is_file():
        return None
    try:
        return load(dest).verify()
    except DamagedFile as e:
        _skip(e)
        return None


def get(corpus: str, result_id: str, root: Path | None = None) -> Result | None:
    """The result with this id among the corpus's, checked whole (DamagedFile when damaged); None if absent."""
    base = (root or results_root()) / check_name(corpus, "corpus")
    folder = next((m.parent for m in sorted(base.glob(f"*/{result_id}/{MANIFEST}"))), None)
    return load(folder).verify() if folder else None


def intact(corpus: str, result_id: str, root: Path | None = None) -> bool:
    """Whether that result is stored and undamaged (a damaged one is named on stderr)."""
    try:
        return get(corpus, result_id, root) is not None
    except DamagedFile as e:
        _skip(e)
        return False


def iter_results(kind: str | None = None, corpus: str | None = None, root: Path | None = None) -> Iterator[Result]:
    """Every stored result (of this kind and corpus) whose manifest reads; a damaged one is named and skipped."""
    base = root or results_root()
    for m in sorted(base.glob(f"{corpus or '*'}/{kind or '*'}/*/{MANIFEST}")):
        try:
            yield load(m.parent)
        except DamagedFile as e:
            _skip(e)
