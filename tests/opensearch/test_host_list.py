"""A cluster's host list: `url:` as a YAML list or EVALCTL_OPENSEARCH_URL comma-separated, every URL checked,
credentials taken out of each, one scheme for all; the client tries the next host when one cannot be reached
(one integration test: the first URL a dead port on 127.0.0.1, the second the real node)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from evalctl.opensearch.connection import load_settings, make_client
from evalctl.config_files import SpecError

A, B = "http://10.0.0.1:9200", "http://10.0.0.2:9201"


@pytest.fixture
def env(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    monkeypatch.setenv("EVALCTL_CONFIG", str(cfg))
    monkeypatch.delenv("EVALCTL_OPENSEARCH_URL", raising=False)
    return cfg


def test_a_yaml_list_and_a_comma_list_are_the_same_hosts(env, monkeypatch):
    env.write_text(f"opensearch:\n  url: [{A}, {B}/]\n")
    assert load_settings().urls == [A, B]
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", f"{A}, {B}")
    s = load_settings()
    assert s.urls == [A, B] and s.external
    client = make_client(s)
    hosts = [c.host for c in client.transport.connection_pool.connections]
    assert sorted(hosts) == [A, B] and client.transport.max_retries == 1  # each other host once, when one is down
    assert client.transport.retry_on_status == ()


def test_credentials_leave_every_url_of_the_list(env, monkeypatch):
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "https://alice:s3cret@10.0.0.1:9200,https://10.0.0.2:9200")
    s = load_settings()
    assert s.urls == ["https://10.0.0.1:9200", "https://10.0.0.2:9200"]
    assert (s.username, s.password) == ("alice", "s3cret") and "s3cret" not in s.describe() + repr(s)
    client = make_client(s)
    assert all(c.use_ssl for c in client.transport.connection_pool.connections)


@pytest.mark.parametrize("url, message", [
    (f"{A},,{B}", "an empty entry in the host list"),
    (f"{A},ftp://10.0.0.2:21", "ftp://10.0.0.2:21: use an http:// or https:// URL"),
    (f"{A},https://10.0.0.2:9200", "the hosts of a list use one scheme"),
    (f"{A},http://10.0.0.2:0", "http://10.0.0.2:0: port 0 is not a port to connect to"),
])
def test_a_bad_host_is_named(env, monkeypatch, url, message):
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", url)
    with pytest.raises(SpecError, match="EVALCTL_OPENSEARCH_URL=") as e:
        load_settings()
    assert message in str(e.value)


def test_dashboards_still_takes_one_url(env, monkeypatch):
    from evalctl.dashboards.settings import load_dashboards_settings

    monkeypatch.setenv("EVALCTL_DASHBOARDS_URL", "http://10.0.0.1:5601,http://10.0.0.2:5601")
    with pytest.raises(SpecError, match="EVALCTL_DASHBOARDS_URL="):
        load_dashboards_settings()


def _dead_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_commands_work_with_the_first_host_down(os_client, monkeypatch, tmp_path):
    from evalctl.cli.main import cli
    from evalctl.opensearch.connection import resolve_url

    node = resolve_url(load_settings())
    dead = f"http://127.0.0.1:{_dead_port()}"
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", f"{dead},{node}")
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    for args in (["opensearch", "status"], ["index", "status"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
    assert f"{dead}, {node}" in CliRunner().invoke(cli, ["opensearch", "status"]).output
    client = make_client()
    assert all(client.ping() for _ in range(5))  # the dead host is set aside, not tried first every time
