"""click choices read from a registry when the command runs, so entries registered later count too."""

from __future__ import annotations

import click

from evalctl.registry import Registry


class RegistryChoice(click.Choice):
    def __init__(self, registry: Registry):
        self.registry = registry
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.registry.names()
