"""`evalctl opensearch start` with a configured cluster (EVALCTL_OPENSEARCH_URL): nothing local is started;
the cluster is checked and named, one that does not answer is reported with its URL."""

from __future__ import annotations

from click.testing import CliRunner

from evalctl.cli.main import cli
from evalctl.opensearch.connection import load_settings, resolve_url


def test_a_configured_cluster_that_answers_needs_no_start(os_client, monkeypatch):
    url = resolve_url(load_settings())
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", url)
    out = CliRunner().invoke(cli, ["opensearch", "start"])
    assert out.exit_code == 0, out.output
    assert f"using the configured cluster {url}" in out.output and "nothing to start" in out.output
    out = CliRunner().invoke(cli, ["opensearch", "start", "--plugin-zip", "x.zip"])
    assert out.exit_code == 2 and "installs into the managed local node" in out.output, out.output


def test_a_configured_cluster_that_does_not_answer_is_named(monkeypatch):
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    out = CliRunner().invoke(cli, ["opensearch", "start"])
    assert out.exit_code == 1 and "OpenSearch at http://127.0.0.1:9 does not answer" in out.output, out.output
    assert "unset EVALCTL_OPENSEARCH_URL" in out.output and "evalctl opensearch start" not in out.output
