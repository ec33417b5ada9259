"""Fine-tuning parameters declared once (finetune/params.py): `evalctl finetune` generates its options from them,
they override the recipe's training settings, and a study's finetune entry declares the ones it shares alike."""

from __future__ import annotations

import click
from click.testing import CliRunner

from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.finetune.params import FinetuneOptions, FinetuneParams
from evalctl.finetune.recipes import get_recipe
from evalctl.parameters import differences, parameters
from evalctl.study.spec.experiment import FinetuneEntry


def test_the_study_entry_declares_the_parameters_it_shares_alike():
    shared = {p.name for p in parameters(FinetuneEntry)} & {p.name for p in parameters(FinetuneParams)}
    assert shared == {"match_size", "max_steps", "batch_size"}
    assert differences(FinetuneEntry, FinetuneParams) == {}


def test_overrides_replace_the_recipes_training_settings_they_set():
    recipe = get_recipe("R3")
    assert FinetuneParams(seed=5, match_size=8).recipe(recipe) == recipe
    tuned = FinetuneParams(max_steps=7, learning_rate=1e-4).recipe(recipe)
    assert (tuned.training.max_steps, tuned.training.learning_rate) == (7, 1e-4)
    assert tuned.training.batch_size == recipe.training.batch_size and tuned.sources == recipe.sources


def test_generated_options_parse_into_params_and_options():
    got = {}

    @click.command()
    @dataclass_options(FinetuneParams)
    @dataclass_options(FinetuneOptions)
    def cmd(**params):
        got["params"], got["options"] = build(FinetuneParams, params), build(FinetuneOptions, params)
        assert params == {}

    res = CliRunner().invoke(cmd, ["--guard", "a:citations", "--guard", "b:citations", "--lr", "1e-4",
                                   "--max-steps", "3", "--overwrite", "--name", "x"])
    assert res.exit_code == 0, res.output
    assert got["params"] == FinetuneParams(guard=("a:citations", "b:citations"), learning_rate=1e-4, max_steps=3)
    assert got["options"] == FinetuneOptions(name="x", overwrite=True)
    assert CliRunner().invoke(cmd, []).exit_code == 0
    assert got["params"] == FinetuneParams() and got["options"] == FinetuneOptions()
    for bad in (["--epochs", "0"], ["--lr", "nan"], ["--match-size", "0"]):
        assert CliRunner().invoke(cmd, bad).exit_code == 2
