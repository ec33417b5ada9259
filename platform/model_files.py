"""What a model folder says about itself: the ModelSpec fields read from its own files, without loading torch.

A sentence-transformers folder states everything a spec needs: modules.json lists the modules (a Pooling, a
Dense, a Normalize), the Pooling config its mode and width, sentence_bert_config.json the length limit,
config_sentence_transformers.json the similarity function and the prompts, the safetensors headers the
parameter count and config.json the dtype. A fact the files leave open (no Pooling module, a causal model
without a stated pooling, a pooling or similarity evalctl does not compute) is refused, naming what to add.

A folder's revision is a content hash of the files that make its vectors (weights, tokenizer, configs), so
every cache entry, index and run made from it changes identity when they change.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

from evalctl.config_files import SpecError

# The revision of a folder-derived spec: this prefix and the content hash (FOLDER_HASH_CHARS hex digits).
FOLDER_REVISION_PREFIX = "dir-"
FOLDER_HASH_CHARS = 16
# Files hashed into a folder's revision: weights, tokenizer files and configs. Other files (README, images,
# exports for other runtimes in onnx/ or openvino/) never change a vector.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_TOKENIZER_SUFFIXES = (".json", ".txt", ".model", ".tiktoken")
_SKIPPED_DIRS = ("onnx", "openvino")
# A tokenizer's vocabulary, in the forms transformers reads (fast tokenizer, WordPiece, BPE, SentencePiece)
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                    "tokenizer.model")

# sentence-transformers' Pooling modes -> ModelSpec.pooling (the others evalctl does not compute)
_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last-token"}
# a Pooling config's mode written as boolean keys (sentence-transformers < 6)
_LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
POOLINGS = ("mean", "cls", "last-token")
_SIMILARITY = {None: "cosine", "cosine": "cosine", "dot": "dot"}
_DTYPES = ("float32", "float16", "bfloat16")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise SpecError(f"{path}: not readable JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def _module_kind(entry: dict) -> str:
    return str(entry.get("type", "")).rpartition(".")[2]


def model_facts(folder: Path, pooling: str | None = None) -> dict[str, Any]:
    """The ModelSpec fields the folder's files state: dim, max_seq_length, pooling, normalize, similarity, dtype,
    params_m, family, prompt_variants, default_variant. `pooling`: the pooling stated by the user, for a folder
    without a Pooling module (a plain transformers folder); a Pooling module that says otherwise is refused."""
    config = _json(folder / "config.json")
    if not config and not (folder / "modules.json").is_file():
        raise SpecError(f"{folder}: no config.json and no modules.json: not a model folder")
    modules = json.loads((folder / "modules.json").read_text("utf-8")) if (folder / "modules.json").is_file() else []
    kinds = {_module_kind(m): folder / m.get("path", "") for m in modules if isinstance(m, dict)}
    found_pooling, dim = _pooling(kinds.get("Pooling"), folder)
    if found_pooling and pooling and found_pooling != pooling:
        raise SpecError(f"{folder}: its Pooling module does {found_pooling!r} pooling, not the stated {pooling!r}")
    pooling = found_pooling or pooling
    if pooling is None:
        causal = any(a.endswith("ForCausalLM") for a in config.get("architectures") or ()) or config.get("is_decoder")
        what = "a causal (decoder) model" if causal else "a plain transformers folder"
        raise SpecError(
            f"{folder}: {what} without a Pooling module: how token vectors become one vector is not stated. "
            f"Add a sentence-transformers Pooling module (modules.json and 1_Pooling/config.json), or state it: "
            f"`evalctl models add <model> --id NAME --pooling {'|'.join(POOLINGS)}`"
            + (" (a causal model usually pools its last token)" if causal else ""))
    if "Dense" in kinds:  # a projection after pooling decides the width
        dim = _json(kinds["Dense"] / "config.json").get("out_features") or dim
    dim = dim or config.get("hidden_size") or config.get("d_model")
    if not isinstance(dim, int) or dim <= 0:
        raise SpecError(f"{folder}: the vector width is stated nowhere (Pooling word_embedding_dimension, a Dense "
                        "module's out_features or config.json hidden_size)")
    transformer = kinds.get("Transformer", folder)
    places = {folder, transformer}
    if not any((place / name).is_file() for place in places for name in _TOKENIZER_FILES) and not any(
            next(place.glob("*.tiktoken"), None) for place in places):
        raise SpecError(f"{folder}: no tokenizer files ({', '.join(_TOKENIZER_FILES)}): without them every word "
                        "becomes one unknown token; copy them in beside the weights")
    st_config = _json(folder / "config_sentence_transformers.json")
    similarity = st_config.get("similarity_fn_name")
    if similarity not in _SIMILARITY:
        raise SpecError(f"{folder}: config_sentence_transformers.json similarity_fn_name {similarity!r}: evalctl "
                        f"scores with cosine or dot; set one of them there")
    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
    if dtype not in _DTYPES:
        raise SpecError(f"{folder}: config.json dtype {dtype!r} is none of {', '.join(_DTYPES)}")
    variants, default = _prompt_variants(st_config, folder)
    return {
        "family": str(config.get("model_type") or "unknown"), "params_m": round(param_count(folder) / 1e6, 1),
        "dim": dim, "max_seq_length": _max_seq_length(folder, transformer, config),
        "pooling": pooling, "normalize": "Normalize" in kinds, "similarity": _SIMILARITY[similarity],
        "dtype": dtype, "prompt_variants": variants, "default_variant": default,
    }


def _pooling(module: Path | None, folder: Path) -> tuple[str | None, int | None]:
    if module is None:
        return None, None
    cfg = _json(module / "config.json")
    mode = cfg.get("pooling_mode")
    modes = [mode] if isinstance(mode, str) else list(mode or ()) or [m for k, m in _LEGACY_MODES.items()
                                                                       if cfg.get(k) is True]
    if len(modes) != 1 or modes[0] not in _POOLING:
        raise SpecError(f"{module / 'config.json'}: pooling {'+'.join(modes) or 'none'}: evalctl pools by one of "
                        f"{', '.join(POOLINGS)}; set one mode there")
    dim = cfg.get("embedding_dimension") or cfg.get("word_embedding_dimension")
    return _POOLING[modes[0]], dim


def _max_seq_length(folder: Path, transformer: Path, config: dict) -> int:
    positions = config.get("max_position_embeddings")
    for cfg in (transformer / "sentence_bert_config.json", folder / "sentence_bert_config.json"):
        n = _json(cfg).get("max_seq_length")
        if n is None:
            continue
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise SpecError(f"{cfg}: max_seq_length {n!r} is not a whole number of tokens above 0")
        if isinstance(positions, int) and n > positions:
            raise SpecError(f"{cfg}: max_seq_length {n} is more than the model's {positions} positions "
                            "(config.json max_position_embeddings)")
        return n
    tokenizer = _json(folder / "tokenizer_config.json").get("model_max_length")
    limits = [n for n in (positions, tokenizer) if isinstance(n, int) and 0 < n < 1_000_000]
    if not limits:
        raise SpecError(f"{folder}: the length limit is stated nowhere (sentence_bert_config.json max_seq_length, "
                        "config.json max_position_embeddings or tokenizer_config.json model_max_length)")
    return min(limits)


def _prompt_variants(st_config: dict, folder: Path) -> tuple[dict[str, dict[str, str]], str]:
    """The folder's prompts as a variant `model` (MTEB's keys; a `passage` prompt is the documents' where no
    `document` one is given) beside `plain`; its default prompt goes to each role without a prompt of its own,
    as sentence-transformers puts it before every text encoded without a prompt name."""
    prompts = {k: v for k, v in (st_config.get("prompts") or {}).items() if isinstance(v, str) and v}
    if "passage" in prompts and "document" not in prompts:
        prompts["document"] = prompts["passage"]
    default_name = st_config.get("default_prompt_name")
    if default_name:
        if default_name not in (st_config.get("prompts") or {}):
            raise SpecError(f"{folder}: default_prompt_name {default_name!r} is not among its prompts")
        for role in ("query", "document"):
            prompts.setdefault(role, st_config["prompts"][default_name])
    prompts = {k: v for k, v in prompts.items() if v}
    if not prompts:
        return {"plain": {}}, "plain"
    return {"plain": {}, "model": prompts}, "model"


def param_count(folder: Path) -> int:
    """The number of weights: the tensors of the safetensors files, read from their JSON headers only; a
    folder with PyTorch .bin weights only is read by torch (memory-mapped)."""
    files = sorted(folder.rglob("*.safetensors"))
    if files:
        return sum(_safetensors_count(f) for f in files)
    bins = sorted(p for p in folder.rglob("*.bin") if p.name.startswith("pytorch_model"))
    if not bins:
        raise SpecError(f"{folder}: no weights (*.safetensors or pytorch_model*.bin)")
    import torch  # deferred: torch, for .bin checkpoints only

    return sum(t.numel() for f in bins for t in torch.load(f, map_location="cpu", mmap=True,
                                                           weights_only=True).values())


def _safetensors_count(path: Path) -> int:
    """The tensors' element count from the header; a file shorter than its header says (a cut download) or
    with a header that does not parse is refused here, naming it, not by a loader's traceback."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                raise ValueError(f"a header of {n:,} bytes")
            header = json.loads(f.read(n))
        tensors = {k: t for k, t in header.items() if k != "__metadata__"}
        end = max((t["data_offsets"][1] for t in tensors.values()), default=0)
        count = sum(math.prod(t["shape"]) for t in tensors.values())
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise SpecError(f"{path}: not a readable safetensors file ({e}); copy or download it again") from None
    if size < 8 + n + end:
        raise SpecError(f"{path}: cut short: {size:,} bytes where its header states {8 + n + end:,}; copy or download "
                        "it again")
    return count


def hashed_files(folder: Path) -> list[Path]:
    """The files whose content is a folder's revision (weights, tokenizer files, configs)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") or part in _SKIPPED_DIRS for part in p.relative_to(folder).parts)
                  and p.suffix in (*_WEIGHT_SUFFIXES, *_TOKENIZER_SUFFIXES))


def folder_revision(folder: Path) -> str:
    """dir-<content hash> of the folder's weights, tokenizer files and configs (names and bytes). Hashed once per
    process while the files keep their size and modification time."""
    files = hashed_files(folder)
    if not files:
        raise SpecError(f"{folder}: no weight, tokenizer or config files")
    return _hash(folder, tuple((p, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=64)
def _hash(folder: Path, files: tuple[tuple[Path, int, int], ...]) -> str:
    h = hashlib.sha256()
    for path, _, _ in files:
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return FOLDER_REVISION_PREFIX + h.hexdigest()[:FOLDER_HASH_CHARS]
