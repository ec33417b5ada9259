"""The onnx and openvino inference backends (a runtime's `backend`, evalctl.indexers.runtime): sentence-transformers
runs an exported copy of the model through optimum on the CPU.

The export is made once per model identity, backend and package versions, and kept under
cache_root()/exported/<model id>/, so a second run loads it instead of exporting again. Which packages a backend
needs, and their versions (part of the vectors' identity: encoder.encoding_versions), are declared here.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evalctl.atomic import publish_dir, staging_dir
from evalctl.errors import BadInput
from evalctl.models import ModelSpec
from evalctl.paths import cache_root

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# backend -> (the module sentence-transformers imports for it, what to pip install, the distributions whose
# versions make its vectors). No evalctl extra installs them: their releases so far (optimum-onnx 0.1.0: transformers
# < 4.58; optimum-intel 2.2.0: transformers < 5.6, huggingface-hub < 1.22) do not fit the transformers 5 that
# sentence-transformers 6 needs, and pip would downgrade it.
_NEEDS = {
    "onnx": ("optimum.onnxruntime", "optimum-onnx[onnxruntime]", ("optimum", "optimum-onnx", "onnxruntime")),
    "openvino": ("optimum.intel.openvino", "optimum-intel[openvino]", ("optimum", "optimum-intel", "openvino")),
}


class BackendUnavailable(BadInput, RuntimeError):
    """A backend that cannot run here (its packages are missing or do not import, or the model cannot use it)."""


def require_backend(backend: str) -> None:
    """Refuse, before any work, a backend whose packages do not import here; the message names the extra."""
    if backend == "torch":
        return
    module, package, _ = _NEEDS[backend]
    try:
        importlib.import_module(module)
    except ImportError as e:  # missing, or installed at versions that do not fit the installed transformers
        raise BackendUnavailable(
            f"runtime backend {backend} needs {module} ({e.__class__.__name__}: {e}); install `pip install "
            f"'{package}'` at a release that supports transformers {importlib.metadata.version('transformers')}, "
            "or use backend torch") from None


def backend_versions(backend: str) -> list[str]:
    """'name major.minor' of the packages a non-torch backend's vectors depend on besides torch's exporting."""
    if backend == "torch":
        return []
    require_backend(backend)
    return [f"{p} {'.'.join(importlib.metadata.version(p).split('.')[:2])}" for p in _NEEDS[backend][2]]


def exported_dir(spec: ModelSpec, backend: str) -> Path:
    """Where the model's export for `backend` is kept: named by the backend, the versions that made it and a
    digest of the model's identity (weights and loading options), so other weights or versions export anew."""
    identity = json.dumps([spec.id, spec.hf_id, spec.revision, spec.path, spec.trust_remote_code,
                           sorted(spec.model_kwargs.items()), sorted(spec.tokenizer_kwargs.items())], default=str)
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
    versions = "-".join(v.replace(" ", "") for v in backend_versions(backend))
    return cache_root() / "exported" / spec.id / f"{backend}-{versions}-{digest}"


def load_exported(spec: ModelSpec, backend: str, export: Callable[[], SentenceTransformer],
                  common: dict) -> SentenceTransformer:
    """The model run by `backend`: its cached export, made first by `export()` (a SentenceTransformer loaded with
    the backend, which exports on load) when there is none. `common`: SentenceTransformer's loading keywords."""
    from sentence_transformers import SentenceTransformer  # deferred: torch, sentence_transformers

    folder = exported_dir(spec, backend)
    if not (folder / "modules.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with staging_dir(folder) as tmp:
            export().save(str(tmp / "model"))
            publish_dir(tmp / "model", folder)  # a concurrent exporter may have won: its copy is as good
    return SentenceTransformer(str(folder), backend=backend, local_files_only=True, **common)
