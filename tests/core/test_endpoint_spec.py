"""A served model's spec (`endpoint:`): what it refuses, how texts are grouped into requests and paced, and the key
only ever read from the environment. The server itself: tests/indexers/test_served.py."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest

from evalctl.config_files import SpecError, build
from evalctl.indexers.endpoints import EndpointKeyMissing, api_key, served_versions, shown_url
from evalctl.indexers.served_encoder import _Pace, request_batches
from evalctl.models import Endpoint, ModelSpec, get_model

ENDPOINT = {"url": "http://127.0.0.1:7997/v1", "model": "minilm", "revision": "infinity 0.0.78"}


def served(**endpoint) -> ModelSpec:
    base = get_model("all-minilm-l6-v2")
    return dataclasses.replace(base, id="minilm-served", offline=None,
                               endpoint=build(Endpoint, {**ENDPOINT, **endpoint}, "endpoint"))


@pytest.mark.parametrize("endpoint, refused", [
    ({"url": "http://user:secret@host/v1"}, "no credentials"),
    ({"url": "https://host/v1?api_key=secret"}, "no credentials or query"),
    ({"url": "host:8080/v1"}, "http(s) URL"),
    ({"api_key_env": "sk-abc123"}, "name of an environment variable"),
    ({"max_texts": 0}, "must be positive"),
    ({"revision": " "}, "must not be empty"),
])
def test_an_endpoint_is_refused_with_what_to_change(endpoint, refused):
    with pytest.raises(SpecError, match=re.escape(refused)) as e:
        served(**endpoint)
    assert "secret" not in str(e.value)


def test_a_served_spec_has_no_local_weights_and_its_dimensions_are_its_dim():
    spec = served()
    with pytest.raises(ValueError, match="no local weights"):
        dataclasses.replace(spec, path="/models/minilm")
    with pytest.raises(ValueError, match="dimensions 128 differs from dim 384"):
        dataclasses.replace(spec, endpoint=dataclasses.replace(spec.endpoint, dimensions=128))
    assert dataclasses.replace(spec, dim=128, endpoint=dataclasses.replace(spec.endpoint, dimensions=128)).dim == 128


def test_the_key_comes_from_the_named_variable_and_is_never_shown(monkeypatch):
    spec = served(api_key_env="EVALCTL_TEST_KEY", url="http://127.0.0.1:7997/v1/")
    monkeypatch.delenv("EVALCTL_TEST_KEY", raising=False)
    with pytest.raises(EndpointKeyMissing, match="environment variable EVALCTL_TEST_KEY, which is not set"):
        api_key(spec)
    monkeypatch.setenv("EVALCTL_TEST_KEY", "k-123")
    assert api_key(spec) == "k-123" and api_key(served()) is None
    assert shown_url(spec) == "http://127.0.0.1:7997/v1"
    assert served_versions(spec.endpoint) == "served minilm, revision infinity 0.0.78"


def test_requests_hold_at_most_max_texts_and_max_tokens():
    assert request_batches([10, 10, 10, 10, 10], max_tokens=25, max_texts=8) == [[0, 1], [2, 3], [4]]
    assert request_batches([5] * 5, max_tokens=100, max_texts=2) == [[0, 1], [2, 3], [4]]
    assert request_batches([300, 5, 5], max_tokens=100, max_texts=8) == [[0], [1, 2]]  # a long text goes alone


def test_requests_per_minute_space_the_starts():
    pace = _Pace(600)  # one start every 0.1 s
    started = time.monotonic()
    for _ in range(4):
        pace.wait()
    assert 0.29 <= time.monotonic() - started < 1.0
    unlimited = _Pace(None)
    started = time.monotonic()
    for _ in range(100):
        unlimited.wait()
    assert time.monotonic() - started < 0.05


def test_models_list_shows_where_a_served_model_is(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from evalctl.cli.main import cli
    from evalctl.models import spec_yaml

    monkeypatch.setenv("EVALCTL_MODELS_DIR", str(tmp_path))
    (tmp_path / "served.yaml").write_text(spec_yaml(served()))
    out = CliRunner().invoke(cli, ["models", "list"])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("minilm-served "))
    assert re.search(r" user .*served: minilm at http://127\.0\.0\.1:7997/v1$", line), line
    assert "1 served, 1 of your own in" in out.output
