"""Missing model weights are a message, checked before any index exists: the real KaLM-Gemma3-12B spec
(whose 12B weights are not on the test machines) against an empty Hugging Face cache."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli
from evalctl.indexers.model_loader import ModelLoadError, require_weights
from evalctl.models import get_model
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

MODEL = "kalm-gemma3-12b"
REPO_ID = "tencent/KaLM-Embedding-Gemma3-12B-2511"
REVISION = "edf22f4753f58b05e3f5495818d31f12db63056d"  # its pin (configs/models/kalm.yaml)


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache and no hub: what a fresh offline machine has."""
    import huggingface_hub.constants

    cache = tmp_path / "hf"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_message_names_repository_revision_and_both_places(empty_hf_cache):
    with pytest.raises(ModelLoadError) as e:
        require_weights(get_model(MODEL))
    msg = str(e.value)
    assert f"model {MODEL}: its weights are not on this machine" in msg and "HF_HUB_OFFLINE is set" in msg
    assert f"It needs {REPO_ID} at revision {REVISION}" in msg
    assert str(empty_hf_cache / "models--tencent--KaLM-Embedding-Gemma3-12B-2511") in msg
    assert "snapshots/<commit>/" in msg and f"--revision {REVISION}" in msg
    assert f"id: {MODEL}" in msg and "path: /that/folder" in msg


def test_weights_placed_as_the_message_says_are_accepted(empty_hf_cache, tmp_path):
    # the Hugging Face cache layout: snapshots/<commit>/ with the files (a pinned commit needs no refs/)
    repo = empty_hf_cache / "models--tencent--KaLM-Embedding-Gemma3-12B-2511"
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    (repo / "snapshots" / "c0ffee" / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError):  # another commit than the pin is not it
        require_weights(get_model(MODEL))
    (repo / "snapshots" / REVISION).mkdir(parents=True)
    (repo / "snapshots" / REVISION / "config.json").write_text("{}")
    require_weights(get_model(MODEL))
    # or a folder of one's own, named by `path` in the spec
    own = tmp_path / "kalm"
    own.mkdir()
    (own / "modules.json").write_text("[]")
    require_weights(dataclasses.replace(get_model(MODEL), path=str(own)))
    with pytest.raises(ModelLoadError, match="is missing or incomplete"):
        require_weights(dataclasses.replace(get_model(MODEL), path=str(tmp_path / "nowhere")))


@pytest.mark.opensearch
def test_cli_index_says_so_without_traceback_and_creates_no_index(empty_hf_cache, os_client):
    name = f"weights-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    imported = runner.invoke(cli, ["corpus", "import", "--format", "uspto", "--name", name,
                                   str(FIXTURES / "uspto_grants_sample.csv")])
    assert imported.exit_code == 0, imported.output
    out = runner.invoke(cli, ["index", "--corpus", name, "--model", MODEL])
    assert out.exit_code == 2 and out.exception is not None and isinstance(out.exception, SystemExit)  # BadInput
    assert "Traceback" not in out.output and f"It needs {REPO_ID} at revision {REVISION}" in out.output
    assert not os_client.indices.exists(index=f"evalctl-{name}--{MODEL}")


def test_a_revision_with_an_at_sign_is_shown_as_written(empty_hf_cache):
    """A git ref may hold an `@`: the reference, the revision and the cache path it suggests are printed as
    written, not scrubbed as if `org/name@v1` were a URL's user and password."""
    out = CliRunner().invoke(cli, ["models", "show", "hf:org/name@v1@x"])
    assert out.exit_code == 2 and "***" not in out.output, out.output
    assert "model hf:org/name@v1@x:" in out.output and "--revision v1@x" in out.output and "refs/v1@x" in out.output


@pytest.mark.parametrize("revision", ["../../etc", "a b", "x@{1}", ".hidden", "a/.b", "x.lock", "/x", "x/", "a//b"])
def test_a_revision_the_hub_cannot_hold_is_refused_naming_it(empty_hf_cache, revision):
    out = CliRunner().invoke(cli, ["models", "show", f"hf:org/name@{revision}"])
    assert out.exit_code == 2 and f"revision {revision!r} is not a commit, branch or tag name" in out.output
    assert "refs/" not in out.output and "Traceback" not in out.output
