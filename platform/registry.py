"""Named extension points (retrieval methods, import formats, label sources, clustering rules).

A registry maps a name to an entry, or to the "module:attribute" path of one, imported on first use: the
CLI lists the names (its choices) without importing every parser or query builder behind them. Adding
an entry is one line in the registry's table (docs/extending.md); `register` adds one at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, entries: dict[str, T | str]):
        self.what = what  # "retrieval method", for messages
        self._entries: dict[str, T | str] = dict(entries)

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
            entry = self._entries[name] = getattr(importlib.import_module(module), attr)
        return entry  # type: ignore[return-value]

    def items(self) -> Iterator[tuple[str, T]]:
        return ((name, self.get(name)) for name in self._entries)

    def register(self, name: str, entry: T | str) -> None:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        del self._entries[name]
