"""Config files (YAML in configs/) turned into typed, frozen dataclasses.

Every spec in the platform is built through `build`, so an unknown key, a missing field or a value of
the wrong type is reported the same way everywhere: with the file and the dotted path of the setting.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from evalctl.errors import BadInput

T = TypeVar("T")


class SpecError(BadInput, ValueError):
    """A config value that cannot become a spec; the message names the file and setting."""


def package_folder(name: str) -> Path:
    """A data folder shipped as part of the evalctl package (`configs`, `docker.dashboards`).

    Found through the import system, so it is the same folder whether evalctl runs from a source
    checkout, an editable install or an installed wheel (pyproject.toml maps the folders in)."""
    # Data folders are namespace packages (no __init__.py); the search location is the folder.
    spec = importlib.util.find_spec(f"evalctl.{name}")
    if spec is None or not spec.submodule_search_locations:
        raise SpecError(f"evalctl.{name} is not installed with evalctl; reinstall the package (pip install .)")
    return Path(next(iter(spec.submodule_search_locations)))


def configs_dir() -> Path:
    """The configs/ folder: EVALCTL_CONFIGS when set, else the one installed with the package."""
    override = os.environ.get("EVALCTL_CONFIGS")
    if override:
        return Path(override)
    return package_folder("configs")


# A spec, a models file or a study is a few kilobytes; a file this large is no config (parsing 5 MB of YAML takes
# seconds even with libyaml), and is refused before it is read.
MAX_CONFIG_BYTES = 1 << 20
# and at most this many values once YAML aliases are expanded (a few lines of nested aliases can mean billions)
MAX_CONFIG_VALUES = 1_000_000
# libyaml's safe loader where PyYAML was built with it (4 times faster), else the pure-Python one: the same YAML
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a relative path is taken inside configs_dir(). Parsed once per process while the
    file is unchanged (a study plan reads the same configs for every step); callers get their own copy."""
    p = Path(path)
    if not p.is_absolute():
        p = configs_dir() / p
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(f"config file not found: {p}") from None
    if st.st_size > MAX_CONFIG_BYTES:
        raise SpecError(f"{p}: {st.st_size:,} bytes, more than a config file holds (at most {MAX_CONFIG_BYTES:,}); "
                        "not read")
    return copy.deepcopy(_parsed(p, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=256)
def _parsed(p: Path, mtime_ns: int, size: int) -> Any:
    try:
        with open(p, encoding="utf-8") as f:
            loader = _LOADER(f)  # a safe loader (CSafeLoader or SafeLoader)
            try:
                node = loader.get_single_node()
                if node is not None and (n := _expanded_size(node)) > MAX_CONFIG_VALUES:
                    raise SpecError(f"{p}: its aliases expand to {n:,} values, more than a config file holds (at "
                                    f"most {MAX_CONFIG_VALUES:,}); not read")
                return None if node is None else loader.construct_document(node)
            finally:
                loader.dispose()
    except FileNotFoundError:
        raise SpecError(f"config file not found: {p}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{p}: not valid YAML: {e}") from None
    except RecursionError:
        raise SpecError(f"{p}: nested deeper than a config file is") from None


def _expanded_size(node: yaml.Node, sizes: dict[int, int] | None = None) -> int:
    """How many values the document holds once every alias is replaced by what it names (each node counted once,
    so a few lines of nested aliases cost their lines here, not the billions they expand to)."""
    sizes = {} if sizes is None else sizes
    if (known := sizes.get(id(node))) is not None:
        return known
    sizes[id(node)] = 1
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_expanded_size(c, sizes) for c in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        total = 1
    sizes[id(node)] = total
    return total


def build(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass `cls` from plain data, rejecting unknown keys and wrong types.

    `where` names the source (file and path) for error messages, e.g. "configs/models/x.yaml".
    """
    return _convert(cls, data, where)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, where)
            except SpecError as e:
                errors.append(str(e))
        raise SpecError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {args}")
    if origin is typing.Literal:
        if value not in args:
            raise SpecError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {type(value).__name__}")
        item = args[0] if args else Any
        items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: expected a mapping, got {type(value).__name__}")
        kt, vt = args if args else (Any, Any)
        return {_convert(kt, k, where): _convert(vt, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(tp, type):
        if tp is not bool and isinstance(value, bool) and tp in (int, float):
            raise SpecError(f"{where}: expected {tp.__name__}, got a boolean")
        if not isinstance(value, tp):
            raise SpecError(f"{where}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
        return value
    raise SpecError(f"{where}: unsupported spec type {tp!r}")  # a bug in a spec class, not in the YAML


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """Resolved field types of a spec class: resolving string annotations compiles each of them, and
    specs are built by the hundred (0.1 s of an up-to-date `evalctl report`)."""
    return typing.get_type_hints(cls)


def _build_dataclass(cls: Any, value: Any, where: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping for {cls.__name__}, got {type(value).__name__}")
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise SpecError(
            f"{where}: unknown key(s) {', '.join(unknown)} for {cls.__name__}; "
            f"allowed: {', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(f"{where}: missing required key '{name}' for {cls.__name__}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise SpecError(f"{where}: {e}") from None
