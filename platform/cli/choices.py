"""click parameter types: choices read from a registry when the command runs, so entries registered later count
too; a model reference given to the command as its id."""

from __future__ import annotations

import importlib

import click

from evalctl.errors import BadInput
from evalctl.models import resolve_model_id
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


class ModelRef(click.ParamType):
    """A model as the user names it (an id, hf:ORG/NAME[@REVISION] or a folder), given to the command as its id:
    identities, index names and folders are built from ids (evalctl.models.resolve_model_id)."""

    name = "model"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        try:
            return resolve_model_id(str(value))
        except BadInput as e:  # a reference whose files say too little, an hf: model not in the cache, ...
            self.fail(str(e), param, ctx)


MODEL = ModelRef()
# The help of every --model option: the four forms a model is named in.
MODEL_HELP = ("Model: an id from `evalctl models list` (built-in, your own, fine-tuned), hf:ORG/NAME[@REVISION] "
              "(Hugging Face cache or hub) or a model folder (a path).")
