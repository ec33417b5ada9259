"""The documented one-liner: index, retrieve, classify and cluster without --corpus use the default
corpus (EVALCTL_DEFAULT_CORPUS, else `default_corpus` in the config file, else the only imported one);
with several and no default they list them and say how to choose."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.store import CorpusNotFound
from evalctl.corpus.default import choose_corpus
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)

SAMPLE = FIXTURES / "uspto_grants_sample.csv"
COMMANDS = {  # each without --corpus; the options each needs besides
    "index": ["index"],
    "retrieve": ["retrieve", "--method", "bm25", "--view", "TA"],
    "classify": ["classify", "--model", "all-minilm-l6-v2", "--view", "T"],
    "cluster": ["cluster", "--model", "all-minilm-l6-v2", "--view", "T"],
}


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALCTL_DEFAULT_CORPUS", raising=False)
    monkeypatch.setenv("EVALCTL_CONFIG", str(tmp_path / "config.yaml"))
    return tmp_path / "config.yaml"


def _import(name: str) -> None:
    import_corpus("uspto", [SAMPLE], name=name)


def test_the_rule(config, monkeypatch):
    with pytest.raises(CorpusNotFound, match="no corpus is imported yet"):
        choose_corpus(None)
    _import("alpha")
    assert choose_corpus(None) == ("alpha", "the only imported corpus")
    assert choose_corpus("beta")[0] == "beta"  # a named corpus is never second-guessed
    _import("beta")
    with pytest.raises(CorpusNotFound) as e:
        choose_corpus(None)
    assert "2 corpora are imported (alpha, beta)" in str(e.value)
    assert "--corpus" in str(e.value) and "EVALCTL_DEFAULT_CORPUS" in str(e.value) and str(config) in str(e.value)
    config.write_text("default_corpus: beta\n")
    assert choose_corpus(None) == ("beta", f"the default, set by default_corpus in {config}")
    monkeypatch.setenv("EVALCTL_DEFAULT_CORPUS", "alpha")  # the environment wins over the file
    assert choose_corpus(None)[0] == "alpha"
    monkeypatch.setenv("EVALCTL_DEFAULT_CORPUS", "gamma")
    with pytest.raises(CorpusNotFound, match="'gamma' \\(set by EVALCTL_DEFAULT_CORPUS\\) is not imported"):
        choose_corpus(None)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_lists_the_corpora_when_it_cannot_choose(command):
    _import("alpha")
    _import("beta")
    out = CliRunner().invoke(cli, COMMANDS[command])
    assert out.exit_code != 0 and "Traceback" not in out.output
    assert "2 corpora are imported (alpha, beta) and no default is set" in out.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_default(command, config):
    _import("alpha")
    _import("beta")
    config.write_text("default_corpus: beta\n")
    out = CliRunner().invoke(cli, COMMANDS[command])
    # each then stops for its own reasons (no index, no qrels); what matters is the corpus it took
    assert f"corpus: beta (the default, set by default_corpus in {config})" in out.output, out.output


@pytest.mark.opensearch
def test_index_without_corpus_indexes_the_only_one(os_client):
    name = f"onlyone-{uuid.uuid4().hex[:8]}"
    _import(name)
    try:
        out = CliRunner().invoke(cli, ["index", "--view", "TA"])
        assert out.exit_code == 0, out.output
        assert f"corpus: {name} (the only imported corpus)" in out.output
        assert f"evalctl-{name}--bm25: loaded 4 documents" in out.output
    finally:
        os_client.indices.delete(index=f"evalctl-{name}--*", ignore_unavailable=True)
