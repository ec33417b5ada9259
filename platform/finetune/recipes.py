"""Fine-tuning recipes (configs/recipes/*.yaml): a pair generator (or a weighted mix of them), a loss
and training settings.

The study names R3 (cross-sectional alignment) and R4 (combined signal) only; R1 (citation pairs) and
R2 (classification signal) are our reading of it (docs/study.md). Every setting below that
the study does not state is a platform default, written in the recipe files so runs record it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from evalctl.corpus.class_codes import LEVELS
from evalctl.config_files import SpecError, build, configs_dir, load_yaml

Generator = Literal["citations", "codes", "sections"]


@dataclass(frozen=True)
class SourceSpec:
    """One pair generator of a recipe.

    citations: (citing patent, cited patent) from the corpus's qrels train_pairs.tsv (train side only).
    codes:     (patent, another patent sharing a `fine` code), with a hard negative sharing a `coarse`
               code but not the fine one (a random other patent when no such one exists).
    sections:  (one view, another view) of the same patent, for each listed view pair.
    `views` is a fallback list: a record is rendered with the first view that has its fields.
    """

    name: str
    generator: Generator
    weight: float = 1.0  # share of this source in a sized mix (R4 with --match-size)
    views: tuple[str, ...] = ("TAC", "TA", "T")  # citations / codes: text of each patent
    view_pairs: tuple[tuple[str, str], ...] = ()  # sections: (anchor view, positive view)
    scheme: Literal["cpc", "ipc"] = "cpc"  # codes
    fine: Literal["subclass", "group", "code"] = "group"
    coarse: Literal["section", "class", "subclass"] = "subclass"
    partners_per_record: int = 1  # codes: positives drawn per record and fine code
    hard_negatives: bool = True

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"source {self.name}: weight must be positive")
        if self.generator == "sections" and not self.view_pairs:
            raise ValueError(f"source {self.name}: a sections generator needs view_pairs")
        if self.generator == "codes" and LEVELS.index(self.coarse) >= LEVELS.index(self.fine):
            raise ValueError(f"source {self.name}: coarse level {self.coarse} must be above fine level {self.fine}")


@dataclass(frozen=True)
class LossSpec:
    # mnrl: in-batch negatives (InfoNCE); cached-mnrl: the same with GradCache, for effective batches
    # larger than memory allows (mini_batch_size texts per forward pass).
    name: Literal["mnrl", "cached-mnrl"] = "mnrl"
    scale: float = 20.0  # 1 / temperature (0.05)
    mini_batch_size: int = 32


@dataclass(frozen=True)
class LoraSpec:
    # auto: LoRA for models of at least min_params_m million parameters (docs/study.md).
    use: Literal["auto", "on", "off"] = "auto"
    min_params_m: float = 1000.0
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"


@dataclass(frozen=True)
class TrainingSpec:
    epochs: float = 1.0
    max_steps: int = -1  # > 0 overrides epochs
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    max_seq_length: int = 256  # training cap; encoding later uses the model spec's own limit
    save_steps: int = 50
    lora: LoraSpec = field(default_factory=LoraSpec)


@dataclass(frozen=True)
class RecipeSpec:
    id: str
    name: str
    description: str
    named_by_study: bool
    sources: tuple[SourceSpec, ...]
    loss: LossSpec = field(default_factory=LossSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    # Pairs used when no --match-size is given: null = every generated pair (the union of the sources).
    size: int | None = None

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError(f"recipe {self.id}: needs at least one source")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"recipe {self.id}: source names must be unique, got {names}")

    def to_dict(self) -> dict:
        return asdict(self)


def recipes_dir() -> Path:
    return configs_dir() / "recipes"


def load_recipes(directory: Path | None = None) -> dict[str, RecipeSpec]:
    """Every recipe, keyed by id (R1 ...). Each YAML holds one mapping under `recipe`."""
    out: dict[str, RecipeSpec] = {}
    for path in sorted((directory or recipes_dir()).glob("*.yaml")):
        data = load_yaml(path)
        if not isinstance(data, dict) or set(data) != {"recipe"}:
            raise SpecError(f"{path}: expected a mapping with a single key 'recipe'")
        spec = build(RecipeSpec, data["recipe"], f"{path}: recipe")
        if spec.id in out:
            raise SpecError(f"{path}: recipe id {spec.id!r} is defined twice")
        out[spec.id] = spec
    return out


def get_recipe(recipe_id: str, directory: Path | None = None) -> RecipeSpec:
    recipes = load_recipes(directory)
    by_lower = {k.lower(): v for k, v in recipes.items()}
    if recipe_id.lower() not in by_lower:
        raise SpecError(f"unknown recipe {recipe_id!r}; known: {', '.join(recipes) or 'none'} (configs/recipes/)")
    return by_lower[recipe_id.lower()]


def default_model_id(base_id: str, recipe_id: str, corpora: list[str], match_size: int | None) -> str:
    """The id a model tuned by a recipe gets, e.g. all-minilm-l6-v2+r3@uspto, all-minilm-l6-v2+r4-n64@lens+uspto
    (lowercase, index-name safe): a study names its tuned models with it before any training runs."""
    size = f"-n{match_size}" if match_size else ""
    return f"{base_id}+{recipe_id}{size}@{'+'.join(corpora)}".lower()
