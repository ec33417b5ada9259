"""click options generated from a dataclass's fields (evalctl.parameters): flag, type, default and help come
from the field, so a command offers its library's parameters under one declaration; `build` makes the
dataclass from the command's keyword arguments."""

from __future__ import annotations

from dataclasses import MISSING
from typing import get_args, get_origin

import click

from evalctl.cli.choices import RegistryChoice
from evalctl.cli.params import CommaChoices, CommaList, FiniteFloatRange
from evalctl.parameters import Parameter, parameters
from evalctl.registry import Registry


def _click_type(p: Parameter):
    o = p.option
    if isinstance(o.choices, Registry):
        return RegistryChoice(o.choices)
    if o.choices is not None or p.literal:
        return click.Choice(list(o.choices or p.literal))
    return _bounded(p.base_type, o)


def _bounded(t, o):
    """int and float types within the option's bounds; any other type as it is."""
    bounded = o.min is not None or o.max is not None
    if t is int:
        return click.IntRange(o.min, o.max, min_open=o.min_open, max_open=o.max_open) if bounded else int
    if t is float:
        return FiniteFloatRange(o.min, o.max, min_open=o.min_open, max_open=o.max_open) if bounded else float
    return t


def _offered(cls, only, exclude) -> list[Parameter]:
    return [p for p in parameters(cls) if p.option is not None and p.name not in exclude
            and (only is None or p.name in only)]


def dataclass_options(cls, *, only: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()):
    """A decorator adding an option per offered field of `cls` (`only` these, less `exclude`), in field order;
    a field without a default is a required option, a bool one a flag, a tuple one a repeatable option (or one
    comma-separated value, its items within the field's bounds)."""

    def decorate(f):
        for p in reversed(_offered(cls, only, exclude)):
            if p.base_type is bool:
                f = click.option(p.flag, p.name, is_flag=True, default=p.default, help=p.option.help)(f)
                continue
            if get_origin(p.base_type) is tuple:
                o = p.option
                item = click.Choice(list(o.choices)) if o.choices is not None else get_args(p.base_type)[0]
                if o.comma:
                    kind = {"type": CommaChoices(tuple(o.choices)) if o.choices is not None
                            else CommaList(_bounded(item, o))}
                else:
                    kind = {"type": item, "multiple": True}
                f = click.option(p.flag, p.name, default=p.default, help=o.help or None, **kind)(f)
                continue
            given = {"required": True} if p.default is MISSING else {"default": p.default, "show_default": True}
            f = click.option(p.flag, p.name, type=_click_type(p), help=p.option.help or None, **given)(f)
        return f

    return decorate


def build(cls, params: dict, **given):
    """`cls` from the command's keyword arguments `params` (its offered fields are taken out of them) and
    `given`, the fields the command sets itself."""
    names = {p.name for p in parameters(cls) if p.option is not None} - set(given)
    return cls(**{n: params.pop(n) for n in list(params) if n in names}, **given)
