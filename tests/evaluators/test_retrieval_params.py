"""Retrieval parameters declared once (evaluators/retrieval/params.py): the options of `evalctl retrieve` and
`fusion-sweep` are generated from them, and a study's retrieval entry declares the ones it shares alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import click
import pytest
from click.testing import CliRunner

from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.evaluators.retrieval.params import RetrievalOptions, RetrievalParams
from evalctl.parameters import differences, param, parameters
from evalctl.study.abstasks.registry import TASKS


def test_the_study_entry_declares_the_retrieval_parameters_it_shares_alike():
    entry = TASKS.get("retrieval").entry
    shared = {p.name for p in parameters(entry)} & {p.name for p in parameters(RetrievalParams)}
    assert {"query_view", "qrels", "split", "k", "fusion_mode", "dense_weight", "query_sample"} <= shared
    # two deliberate differences: a study step resolves "auto" (native on a node with neural-search, else
    # client) before it builds the RetrievalParams, and an entry's passage settings are a list (a run each)
    assert set(differences(entry, RetrievalParams)) == {"fusion_mode", "passages"}
    mode = {cls: next(p.type for p in parameters(cls) if p.name == "fusion_mode") for cls in (entry, RetrievalParams)}
    assert get_args(mode[entry]) == ("auto", *get_args(mode[RetrievalParams]))


def test_differences_names_each_shared_field_declared_otherwise():
    @dataclass
    class Ref:
        a: int = 1
        b: str | None = None
        c: float = 0.5

    @dataclass
    class Declared:
        a: int = 2
        b: str = "x"
        c: float = 0.5
        d: int = 0

    assert set(differences(Declared, Ref)) == {"a", "b"}
    assert differences(Ref, Ref) == {}


def _command(cls, **kwargs):
    got = {}

    @click.command()
    @dataclass_options(cls, **kwargs)
    def cmd(**params):
        got["value"] = build(cls, params, **({"corpus": "c"} if cls is RetrievalParams else {}))
        assert params == {}  # every generated option went into the dataclass

    return cmd, got


def test_generated_options_parse_into_the_dataclass_with_its_defaults():
    cmd, got = _command(RetrievalParams, exclude=("corpus",))
    res = CliRunner().invoke(cmd, ["--view", "TA", "--method", "hybrid"])
    assert res.exit_code == 0, res.output
    assert got["value"] == RetrievalParams("c", "TA", "hybrid")
    res = CliRunner().invoke(cmd, ["--view", "TA", "--method", "rrf", "--fusion", "client", "--dense-weight", "0.3",
                                   "--bm25-max-terms", "0", "--query-sample", "5", "--normalization", "l2"])
    assert res.exit_code == 0, res.output
    assert got["value"] == RetrievalParams("c", "TA", "rrf", fusion_mode="client", dense_weight=0.3,
                                           bm25_max_terms=0, query_sample=5, normalization="l2")


@pytest.mark.parametrize("args", [["--method", "dense"],  # --view is required
                                  ["--view", "TA", "--method", "nope"],
                                  ["--view", "TA", "--method", "bm25", "--bm25-max-terms", "-1"],
                                  ["--view", "TA", "--method", "bm25", "--fusion", "auto"]])
def test_generated_options_refuse_what_the_field_does_not_allow(args):
    cmd, _ = _command(RetrievalParams, exclude=("corpus",))
    assert CliRunner().invoke(cmd, args).exit_code == 2


def test_only_fields_with_an_option_are_offered():
    cmd, got = _command(RetrievalOptions)
    assert {p.name for p in cmd.params} == {"batch_size", "concurrency"}
    assert CliRunner().invoke(cmd, ["--concurrency", "0"]).exit_code == 2
    assert CliRunner().invoke(cmd, ["--batch-size", "4"]).exit_code == 0
    assert got["value"] == RetrievalOptions(batch_size=4)


def test_a_literal_field_is_a_choice_and_a_bool_a_flag():
    @dataclass(frozen=True)
    class Opts:
        mode: Literal["a", "b"] = param("a", help="Mode.")
        fast: bool = param(False, help="Go fast.")

    cmd, got = _command(Opts)
    assert CliRunner().invoke(cmd, ["--mode", "b", "--fast"]).exit_code == 0
    assert got["value"] == Opts("b", True)
    assert CliRunner().invoke(cmd, ["--mode", "c"]).exit_code == 2
