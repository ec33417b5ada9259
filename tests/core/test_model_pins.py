"""Every configured model spec is pinned to a commit a published source confirms, cited in its YAML, or says
why it is not; `evalctl models list` shows which and why (issue 26, item 5)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from evalctl.models import ModelSpec, is_commit, load_models, models_dir

UNPINNED = {"llama-nemotron-embed-1b-v2", "paecter", "patentsberta", "nomic-embed-text-v1.5"}


def test_every_spec_is_pinned_to_a_commit_or_says_why():
    specs = load_models()
    assert len(specs) == 22
    for spec in specs.values():
        if spec.pinned:
            assert is_commit(spec.revision) and not spec.unpinned_reason, spec.id
        else:
            assert spec.unpinned_reason and len(spec.unpinned_reason) > 20, f"{spec.id}: unpinned without a reason"
    assert {s.id for s in specs.values() if not s.pinned} == UNPINNED
    # nomic's weights are pinned; its modelling code's repository has no published commit
    nomic = specs["nomic-embed-text-v1.5"]
    assert is_commit(nomic.revision) and nomic.code_repos == ("nomic-ai/nomic-bert-2048",)
    assert "nomic-ai/nomic-bert-2048" in nomic.unpinned_reason


def test_every_commit_in_the_specs_cites_its_source():
    for path in sorted(models_dir().glob("*.yaml")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*revision: (\S+)\s*(#.*)?$", line)
            if m and is_commit(m.group(1)):
                assert m.group(2) and re.search(r"mteb \d+\.\d+\.\d+ ModelMeta\.revision \(mteb/models/\S+\.py\)",
                                                m.group(2)), f"{path.name}:{n}: a commit without its source"


def test_a_pin_is_a_full_commit_and_a_reason_only_where_one_is_missing():
    assert is_commit("8b3219a92973c328a8e22fadcfa821b5dc75636a")
    for rev in ("main", "v1.0", "8b3219a", "8B3219A92973C328A8E22FADCFA821B5DC75636A"):
        assert not is_commit(rev), rev
    base = load_models()["all-minilm-l6-v2"]
    fields = {f: getattr(base, f) for f in ModelSpec.__dataclass_fields__}
    with pytest.raises(ValueError, match="unpinned_reason given"):
        ModelSpec(**{**fields, "unpinned_reason": "no reason"})
    # a code repository at a branch leaves the spec unpinned though its weights are at a commit
    assert not ModelSpec(**{**fields, "code_repos": ("org/code",), "unpinned_reason": "code at main"}).pinned
    assert ModelSpec(**{**fields, "code_repos": ("org/code@" + "a" * 40,)}).pinned


def test_models_list_shows_pins_and_why_not():
    from evalctl.cli.main import cli

    out = CliRunner().invoke(cli, ["models", "list"])
    assert out.exit_code == 0, out.output
    specs = load_models()
    rows = {line.split()[0]: line for line in out.output.splitlines() if line.split() and line.split()[0] in specs}
    assert "8b3219a929" in rows["all-minilm-l6-v2"] and "(unpinned)" not in rows["all-minilm-l6-v2"]
    assert "main (unpinned)" in rows["paecter"] and "b0753ae763 (unpinned)" in rows["nomic-embed-text-v1.5"]
    assert f"{len(specs) - len(UNPINNED)} pinned to a commit; unpinned, and why:" in out.output
    for model_id in UNPINNED:
        assert f"  {model_id}: {specs[model_id].unpinned_reason}" in out.output
