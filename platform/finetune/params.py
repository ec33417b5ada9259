"""What a fine-tuning run is asked with, declared once: `evalctl finetune` generates its options from these
fields, evalctl.finetune.train.finetune takes them, and a study's finetune entry declares the ones it shares
alike. FinetuneParams make the run (its lineage records them, or what they resolve to); FinetuneOptions say
how it goes. Light to import (no torch): the CLI reads it when it starts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evalctl.finetune.recipes import RecipeSpec, TrainingSpec
from evalctl.parameters import param


@dataclass(frozen=True)
class FinetuneParams:
    """The pairs' budget, seed, qrels and guard, and overrides of the recipe's training settings (a field named
    as a TrainingSpec field; None: the recipe's)."""

    match_size: int | None = param(None, min=1, help="Subsample every recipe to exactly N pairs (seeded).")
    seed: int = param(13)
    qrels: str = param("citations")
    guard: tuple[str, ...] = param((), help="Evaluation corpus whose dev/test queries must stay out (repeatable).")
    epochs: float | None = param(None, min=0, min_open=True, help="Override the recipe's epochs.")
    max_steps: int | None = param(None, min=1, help="Stop after N optimiser steps (overrides epochs).")
    batch_size: int | None = param(None, min=1, help="Override the recipe's batch size (in-batch negatives).")
    learning_rate: float | None = param(None, flag="--lr", min=0, min_open=True,
                                        help="Override the recipe's learning rate.")
    save_steps: int | None = param(None, min=1, help="Checkpoint every N steps (resume point).")

    def recipe(self, recipe: RecipeSpec) -> RecipeSpec:
        """`recipe` with these overrides in its training settings."""
        names = {f.name for f in dataclasses.fields(TrainingSpec)}
        overrides = {k: v for k, v in dataclasses.asdict(self).items() if k in names and v is not None}
        return dataclasses.replace(recipe, training=dataclasses.replace(recipe.training, **overrides))


@dataclass(frozen=True)
class FinetuneOptions:
    """How a run goes; not part of its lineage."""

    name: str | None = param(None, help="Model id to register (default: <model>+<recipe>[-n<N>]@<corpora>).")
    device: str | None = param(None, help="cpu, cuda, cuda:N (default: auto).")
    overwrite: bool = param(False, help="Replace another run registered under the same id.")
    progress: bool = True
