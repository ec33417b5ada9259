"""click option types beyond click's own: a float range that refuses NaN and infinity (click.FloatRange lets
NaN through, every comparison with it being false), and comma-separated lists (of choices, or of values of
one type). A bad value is a usage error naming the option (exit 2) before anything runs."""

from __future__ import annotations

import math

import click


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange, and the value must be a finite number."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return v


def comma_items(value: object) -> list[str]:
    """The items of a comma-separated list, stripped; "" is no item. An empty item (`1,,4`, a comma at an end) is a
    mistake, refused (ValueError) rather than read as a shorter list."""
    items = [v.strip() for v in str(value).split(",")]
    if "" in items and items != [""]:
        raise ValueError(f"{value!r} has an empty item (two commas together, or one at an end)")
    return [v for v in items if v]


class CommaChoices(click.ParamType):
    """A comma-separated list, each item one of `choices`; converted to a tuple (empty for "")."""

    name = "list"

    def __init__(self, choices: tuple[str, ...]):
        self.choices = choices

    def get_metavar(self, param, ctx=None) -> str:
        return f"[{','.join(self.choices)}]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            items = tuple(comma_items(value))
        except ValueError as e:
            self.fail(f"{e}.", param, ctx)
        if unknown := [v for v in items if v not in self.choices]:
            self.fail(f"{', '.join(map(repr, unknown))}: not among {', '.join(self.choices)}.", param, ctx)
        return items


class CommaList(click.ParamType):
    """A comma-separated list, each item converted by `item` (e.g. click.IntRange(1)); a tuple."""

    name = "list"

    def __init__(self, item):
        self.item = click.types.convert_type(item)

    def get_metavar(self, param, ctx=None) -> str:
        return f"{self.item.name.split()[0].upper()},..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            items = comma_items(value)
        except ValueError as e:
            self.fail(f"{e}.", param, ctx)
        if not items:
            self.fail(f"{value!r}: expected one or more comma-separated values.", param, ctx)
        return tuple(self.item.convert(v, param, ctx) for v in items)
