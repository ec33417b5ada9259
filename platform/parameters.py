"""Parameters declared once: a dataclass field says how it is offered as a command-line option (flag, help,
bounds, choices), so a command's options are generated from the dataclass (evalctl.cli.dataclass_options)
and other declarations of the same parameters (a study spec's entry) are checked against it."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass
from typing import Any, Literal, Union, get_args, get_origin


@dataclass(frozen=True)
class Option:
    help: str = ""
    flag: str | None = None  # default: --the-field-name
    min: float | None = None
    max: float | None = None
    min_open: bool = False  # the bound itself is refused
    max_open: bool = False
    choices: Any = None  # a Registry (its names when the command runs); default: a Literal type's values
    comma: bool = False  # a tuple field given as one comma-separated value of choices, not a repeated option


def param(default: Any = MISSING, **option: Any) -> Any:
    """A dataclass field offered as a command-line option; `option`: the fields of Option."""
    return dataclasses.field(default=default, metadata={"option": Option(**option)})


@dataclass(frozen=True)
class Parameter:
    name: str
    type: Any  # resolved annotation, e.g. int | None, Literal["native", "client"]
    default: Any  # dataclasses.MISSING: required
    option: Option | None  # None: not offered on the command line

    @property
    def flag(self) -> str:
        return (self.option and self.option.flag) or "--" + self.name.replace("_", "-")

    @property
    def base_type(self) -> Any:
        """The type without its `| None`."""
        if get_origin(self.type) in (Union, types.UnionType):
            args = [a for a in get_args(self.type) if a is not type(None)]
            return args[0] if len(args) == 1 else self.type
        return self.type

    @property
    def literal(self) -> tuple | None:
        t = self.base_type
        return get_args(t) if get_origin(t) is Literal else None


def parameters(cls) -> list[Parameter]:
    """Every field of dataclass `cls`, with its resolved type and default (a default factory's value)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default_factory is MISSING else f.default_factory()
        out.append(Parameter(f.name, hints[f.name], default, f.metadata.get("option")))
    return out


def differences(declared, reference) -> dict[str, str]:
    """{field: how it differs} for each field that dataclass `declared` shares by name with `reference` but
    declares with another type or default."""
    ref = {p.name: p for p in parameters(reference)}
    out = {}
    for p in parameters(declared):
        if (r := ref.get(p.name)) is None:
            continue
        if p.type != r.type:
            out[p.name] = f"type {p.type} (not {r.type})"
        elif p.default != r.default:
            out[p.name] = f"default {p.default!r} (not {r.default!r})"
    return out


def check_values(obj) -> None:
    """Refuse a field of dataclass instance `obj` outside its option's bounds or choices (a Literal's values,
    a tuple of names), as the command line does: a value built from a file (a spec section) meets the same
    rules. The ValueError names the field."""
    for p in parameters(type(obj)):
        o, value = p.option, getattr(obj, p.name)
        if o is None or value is None:
            continue
        choices = p.literal or (o.choices if isinstance(o.choices, tuple) else None)
        if choices is not None and value not in choices:
            raise ValueError(f"{p.name}: {value!r} is not one of {', '.join(map(str, choices))}")
        if o.min is not None and (value <= o.min if o.min_open else value < o.min):
            raise ValueError(f"{p.name}: {value} must be {'above' if o.min_open else 'at least'} {o.min}")
        if o.max is not None and (value >= o.max if o.max_open else value > o.max):
            raise ValueError(f"{p.name}: {value} must be {'below' if o.max_open else 'at most'} {o.max}")
