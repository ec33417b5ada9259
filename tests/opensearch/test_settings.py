"""Connection settings and strict config specs (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from evalctl.opensearch.connection import load_settings
from evalctl.config_files import SpecError, build


def test_env_overrides_config_file_and_hides_password(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("opensearch:\n  url: https://search.example:9200\n  username: alice\n  password: s3cret\n")
    monkeypatch.setenv("EVALCTL_CONFIG", str(cfg))
    monkeypatch.setenv("EVALCTL_OPENSEARCH_VERIFY_CERTS", "false")
    s = load_settings()
    assert (s.url, s.username, s.password, s.verify_certs) == ("https://search.example:9200", "alice", "s3cret", False)
    assert s.external
    assert "s3cret" not in repr(s) and "s3cret" not in s.describe()
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://other:9200")
    assert load_settings().url == "http://other:9200"


def test_unknown_connection_key_is_named(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("opensearch:\n  urll: http://x\n")
    monkeypatch.setenv("EVALCTL_CONFIG", str(cfg))
    with pytest.raises(SpecError, match="unknown key.*urll"):
        load_settings()


@dataclass(frozen=True)
class Inner:
    m: int = 16


@dataclass(frozen=True)
class Outer:
    name: str
    dims: tuple[int, ...] = ()
    inner: Inner = Inner()
    mode: str | None = None


def test_build_nested_and_errors():
    o = build(Outer, {"name": "x", "dims": [1, 2], "inner": {"m": 32}}, "t.yaml")
    assert o == Outer("x", (1, 2), Inner(32))
    with pytest.raises(SpecError, match=r"t.yaml.inner.m: expected int"):
        build(Outer, {"name": "x", "inner": {"m": "big"}}, "t.yaml")
    with pytest.raises(SpecError, match="missing required key 'name'"):
        build(Outer, {}, "t.yaml")
    with pytest.raises(SpecError, match=r"t.yaml.dims\[1\]: expected int"):
        build(Outer, {"name": "x", "dims": [1, True]}, "t.yaml")
