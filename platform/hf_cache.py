"""`hf:ORG/NAME[@REVISION]` model references and the Hugging Face cache that holds them.

A reference resolves to one snapshot: a commit and the folder holding the model's files at that commit. The
Hugging Face cache is read first, then the hub where it can be reached; offline, the message names the
repository, the revision and the folder to place it in.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from evalctl.config_files import SpecError

PREFIX = "hf:"
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# A revision as git allows a ref name (git check-ref-format) and the hub a commit, branch or tag: no `..`, `@{`,
# `//`, control character, space or any of ~^:?*[\, no component starting with a dot, not starting or ending with a
# slash, not ending in .lock. An `@` is allowed, so a reference is split at its first `@`.
_REVISION = re.compile(r"(?!.*\.\.)(?!.*@\{)(?!.*//)(?!/)(?!.*/$)(?!.*\.lock$)(?!\.)(?!.*/\.)[^\x00-\x20\x7f~^:?*\[\\]+")
# hf:ORG/NAME[@REVISION]: a whole reference (the message scrubber keeps it as written)
REFERENCE = re.compile(PREFIX + _REPO.pattern + f"(?:@{_REVISION.pattern})?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# Exports for other runtimes and other frameworks' weights: never read by sentence-transformers' torch route.
_NOT_DOWNLOADED = ["onnx/*", "openvino/*", "*.onnx", "*.h5", "*.msgpack", "*.ot", "flax_model*", "tf_model*",
                   "rust_model*"]


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub, as it
    read them when imported): where every route of evalctl and the libraries it loads with look."""
    from huggingface_hub import constants  # deferred: huggingface_hub

    return Path(constants.HF_HUB_CACHE)


@dataclass(frozen=True)
class HubRef:
    repo: str  # ORG/NAME
    revision: str | None  # a commit, branch or tag; None: main

    @classmethod
    def parse(cls, ref: str) -> HubRef:
        repo, _, revision = ref.removeprefix(PREFIX).partition("@")
        if not _REPO.fullmatch(repo) or ".." in repo or (revision == "" and "@" in ref):
            raise SpecError(f"model {ref!r}: write a Hugging Face model as hf:ORG/NAME or hf:ORG/NAME@REVISION")
        if revision and not _REVISION.fullmatch(revision):
            raise SpecError(f"model {ref!r}: revision {revision!r} is not a commit, branch or tag name (no '..', "
                            "'@{', '//', space, control character or any of ~^:?*[\\, no part starting with a dot, "
                            "not starting or ending with '/', not ending in .lock)")
        return cls(repo, revision or None)

    def __str__(self) -> str:
        return f"{PREFIX}{self.repo}" + (f"@{self.revision}" if self.revision else "")

    @property
    def cache_folder(self) -> Path:
        return hub_cache_dir() / ("models--" + self.repo.replace("/", "--"))


def is_hub_ref(ref: str) -> bool:
    return ref.startswith(PREFIX)


def cached_snapshot(ref: HubRef) -> tuple[str, Path] | None:
    """(commit, snapshot folder) of the reference in the cache, or None. A branch or tag is what the cache's
    refs/<name> says it pointed to when the snapshot was downloaded."""
    revision = ref.revision or "main"
    commit = revision
    if not _COMMIT.fullmatch(revision):
        try:
            commit = (ref.cache_folder / "refs" / revision).read_text().strip()
        except OSError:
            return None
    folder = ref.cache_folder / "snapshots" / commit
    return (commit, folder) if folder.is_dir() else None


def snapshot(ref: HubRef) -> tuple[str, Path]:
    """(commit, folder) of the reference: from the cache, else downloaded from the hub into it."""
    found = cached_snapshot(ref)
    if found:
        return found
    if hub_offline():
        raise SpecError(missing_message(ref, "HF_HUB_OFFLINE is set"))
    from huggingface_hub import snapshot_download  # deferred: huggingface_hub

    try:
        folder = Path(snapshot_download(ref.repo, revision=ref.revision, cache_dir=hub_cache_dir(),
                                        ignore_patterns=_NOT_DOWNLOADED))
    except Exception as e:  # unreachable, unknown repository or revision, gated: all leave the model missing
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise SpecError(missing_message(ref, f"the hub did not serve it: {e.__class__.__name__}: {first}")) from None
    return folder.name, folder


def missing_message(ref: HubRef, reason: str) -> str:
    revision = ref.revision or "main"
    refs = "" if _COMMIT.fullmatch(revision) else f", and refs/{revision} holding that commit"
    return "\n".join([
        f"model {ref}: {ref.repo} at revision {revision} is not in the Hugging Face cache and cannot be downloaded "
        f"({reason}). Place it in the cache:",
        f"  {ref.cache_folder}/",
        f"  (snapshots/<commit>/ holding the model files{refs}): `hf download {ref.repo} --revision {revision}` on a "
        "machine with hub access fills that folder in its cache; copy it here, or point HF_HUB_CACHE at a cache "
        "holding it. Or give the model's folder itself: --model /path/to/folder",
    ])
