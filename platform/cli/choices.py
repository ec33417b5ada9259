"""click choices read from a registry when the command runs, so entries registered later count too."""

from __future__ import annotations

import importlib

import click

from evalctl.registry import Registry


class RegistryChoice(click.Choice):
    def __init__(self, registry: Registry | str):
        """`registry`: the Registry, or its "module:attribute" path when that module is slow to import."""
        self.registry = registry
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        if isinstance(self.registry, str):
            module, _, attr = self.registry.partition(":")
            self.registry = getattr(importlib.import_module(module), attr)
        return self.registry.names()
