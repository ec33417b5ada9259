"""Transfer and comparison parameters declared once (evaluators/tasks/transfer_params.py,
evaluators/scoring/significance_params.py): `evalctl transfer` and `evalctl compare` generate their options
from them, and a study's transfer entry declares the ones it shares alike."""

from __future__ import annotations

import click
from click.testing import CliRunner

from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.evaluators.tasks.transfer_params import TransferParams
from evalctl.parameters import differences, parameters
from evalctl.study.tasks.transfer.task import TransferEntry, _settings


def _command(cls):
    got = {}

    @click.command()
    @dataclass_options(cls)
    def cmd(**params):
        got["value"] = build(cls, params)
        assert params == {}

    return cmd, got


def test_the_study_entry_declares_the_transfer_parameters_it_shares_alike():
    shared = {p.name for p in parameters(TransferEntry)} & {p.name for p in parameters(TransferParams)}
    assert shared == {p.name for p in parameters(TransferParams)} - {"view"}  # the entry lists views
    assert differences(TransferEntry, TransferParams) == {}


def test_a_transfer_steps_settings_are_the_entrys_parameters_in_field_order():
    """They are part of the study-step identity: the same dict, key order included."""
    settings = _settings(TransferEntry("c", split="dev", alpha=0.01))
    assert list(settings.items()) == [("method", "exact"), ("qrels", "citations"), ("split", "dev"),
                                      ("metric", "ndcg@10"), ("test", "wilcoxon"), ("alpha", 0.01), ("k", 100)]


def test_transfer_options_parse_into_the_params():
    cmd, got = _command(TransferParams)
    assert CliRunner().invoke(cmd, ["--corpus", "pizza"]).exit_code == 0
    assert got["value"] == TransferParams("pizza")
    res = CliRunner().invoke(cmd, ["--corpus", "pizza", "--view", "T", "--method", "dense", "--split", "all",
                                   "--test", "permutation", "--alpha", "0.01"])
    assert res.exit_code == 0, res.output
    assert got["value"] == TransferParams("pizza", "T", "dense", split="all", test="permutation", alpha=0.01)
    assert {p.name for p in cmd.params} == {p.name for p in parameters(TransferParams)} - {"k"}
    for bad in ([], ["--corpus", "c", "--method", "bm25"], ["--corpus", "c", "--alpha", "1"],
                ["--corpus", "c", "--test", "fisher"]):
        assert CliRunner().invoke(cmd, bad).exit_code == 2


def test_compare_options_keep_their_flags_and_defaults():
    cmd, got = _command(StatsProtocol)
    assert {p.opts[0] for p in cmd.params} == {"--test", "--alpha", "--permutations", "--exact-up-to", "--family",
                                               "--bootstrap", "--seed"}
    assert CliRunner().invoke(cmd, []).exit_code == 0
    assert got["value"] == StatsProtocol("fisher", 10_000, 16, "metric", 0.05, 1000, 42)
    args = ["--permutations", "2000", "--bootstrap", "200", "--test", "student", "--family", "table"]
    assert CliRunner().invoke(cmd, args).exit_code == 0
    assert got["value"] == StatsProtocol("student", n_permutations=2000, n_bootstrap=200, family="table")
    for bad in (["--test", "wilcoxon"], ["--permutations", "10"], ["--family", "all"], ["--alpha", "1"]):
        assert CliRunner().invoke(cmd, bad).exit_code == 2
