"""Named extension points (retrieval methods, import formats, label sources, clustering rules).

A registry maps a name to an entry, or to the "module:attribute" path of one, imported on first use: the
CLI lists the names (its choices) without importing every parser or query builder behind them. Adding
an entry is one line in the registry's table (docs/extending.md); `register` adds one at run time. A registry
with an entry-point `group` also holds what installed distributions declare there (after its table, by distribution
and name), so a plug-in package needs no edit of evalctl.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, entries: dict[str, T | str], *, group: str | None = None,
                 check: Callable[[str, T], None] | None = None):
        self.what = what  # "retrieval method", for messages
        self._table: dict[str, T | str] = dict(entries)
        self._group = group
        self._check = check  # called once per entry when it is first loaded: refuse a malformed one by name
        self._origin: dict[str, str] = {}  # name -> the entry point that declared it, for messages
        self._found = group is None

    @property
    def _entries(self) -> dict[str, T | str]:
        if not self._found:
            self._found = True
            self._add_entry_points()
        return self._table

    def _add_entry_points(self) -> None:
        points = importlib.metadata.entry_points(group=self._group)
        for p in sorted(points, key=lambda p: (p.dist.name if p.dist else "", p.name)):
            origin = f"entry point {p.name} = {p.value} ({p.dist.name if p.dist else 'unknown distribution'})"
            if p.name in self._table:
                first = self._origin.get(p.name, "evalctl's own")
                raise ValueError(f"{self.what} {p.name!r} is declared twice: {first} and {origin}")
            self._table[p.name] = p.value
            self._origin[p.name] = origin

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise KeyError(f"unknown {self.what} {name!r}; one of {', '.join(self._entries)}")
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            try:
                loaded = getattr(importlib.import_module(module), attr)
                if self._check:
                    self._check(name, loaded)
            except (ImportError, AttributeError, TypeError) as e:
                raise type(e)(f"{self.what} {name!r} ({self._origin.get(name, entry)}) cannot be used: {e}") from e
            entry = self._entries[name] = loaded
        return entry  # type: ignore[return-value]

    def items(self) -> Iterator[tuple[str, T]]:
        return ((name, self.get(name)) for name in self._entries)

    def register(self, name: str, entry: T | str) -> None:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered")
        if self._check and not isinstance(entry, str):
            self._check(name, entry)
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        del self._entries[name]
        self._origin.pop(name, None)
