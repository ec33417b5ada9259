"""The results store: every run, metric file and table input, each in its own folder with a manifest.

Layout: <results_root>/<corpus>/<kind>/<result id>/
  manifest.json   what produced it (kind, corpus, index manifest, settings, code version, time, ...)
  ...             the result's own files (TREC run, ranx JSON, metrics, per-query values, ...)

A result id is derived from its identity (the manifest minus time and code version), so asking "is
this already done, the same way?" is a lookup: `find(kind, identity)`. Folders are written under a
temporary name and renamed, so a crash never leaves a half result that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from evalctl.atomic import replace_dir, staging_dir
from evalctl.clock import utc_now
from evalctl.names import check_name, safe_component
from evalctl.paths import cache_root
from evalctl.provenance import code_version

MANIFEST = "manifest.json"


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


def _folder(kind: str, corpus: str, identity: dict, root: Path | None) -> Path:
    label = safe_component(str(identity.get("name", kind)))  # the hash keeps a shortened label unique
    return (root or results_root()) / check_name(corpus, "corpus") / kind / f"{label}-{identity_hash(identity)}"


def write(kind: str, corpus: str, identity: dict, files: dict[str, str | bytes], *,
          extra: dict | None = None, root: Path | None = None) -> Result:
    """Store one result atomically. `identity` decides its id; `extra` adds to the manifest only."""
    dest = _folder(kind, corpus, identity, root)
    manifest = {"kind": kind, "corpus": corpus, **identity, **(extra or {}),
                "code_version": code_version(), "created_at": utc_now()}
    with staging_dir(dest) as tmp:
        for name, content in files.items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(tmp / name, mode) as f:
                f.write(content)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        replace_dir(tmp, dest)
    return Result(dest, manifest)


def find(kind: str, corpus: str, identity: dict, root: Path | None = None) -> Result | None:
    """The stored result with exactly this identity, if any."""
    dest = _folder(kind, corpus, identity, root)
    if not (dest / MANIFEST).is_file():
        return None
    return Result(dest, json.loads((dest / MANIFEST).read_text()))


def iter_results(kind: str | None = None, corpus: str | None = None, root: Path | None = None) -> Iterator[Result]:
    base = root or results_root()
    for m in sorted(base.glob(f"{corpus or '*'}/{kind or '*'}/*/{MANIFEST}")):
        yield Result(m.parent, json.loads(m.read_text()))
