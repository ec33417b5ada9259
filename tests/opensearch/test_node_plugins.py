"""Plugin sources of the managed node: a local zip or an http(s) URL, pinned by sha256 (a mismatch is
refused naming both hashes), and a plugin added to an assembled node installed on its next start.

The URL path is proven with a real plugin zip served from 127.0.0.1; the zip is the neural-search plugin
given to this machine's node (EVALCTL_OPENSEARCH_PLUGIN_ZIPS, set by `.ci/run` and the Makefile)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import free_port_pair
from evalctl.opensearch.node import ManagedNode, NodeError
from evalctl.opensearch.artifacts import PluginSource, fetch, sources_from_env
from evalctl.provenance import file_sha256


def sha(path: Path) -> str:
    return file_sha256(path).removeprefix("sha256:")


@pytest.fixture
def toy_zip(tmp_path) -> Path:
    path = tmp_path / "toy-plugin.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("plugin-descriptor.properties", "name=toy-plugin\nversion=1.2.3\nopensearch.version=3.5.0\n")
    return path


@pytest.fixture
def served():
    """Serve files of a folder on 127.0.0.1; yields a function folder -> base URL."""
    servers = []

    def serve(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        handler.log_message = lambda *a: None
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield serve
    for srv in servers:
        srv.shutdown()


def test_source_syntax():
    s = PluginSource.parse("https://example.org/p.zip#sha256=" + "AB" * 32)
    assert (s.location, s.sha256, s.kind) == ("https://example.org/p.zip", "ab" * 32, "url")
    assert PluginSource.parse("/tmp/p.zip").kind == "file"
    assert PluginSource.parse("maven:g:a:1:zip").kind == "maven"
    assert [x.location for x in sources_from_env("/a.zip, http://h:1/b.zip#sha256=" + "0" * 64)] == [
        "/a.zip", "http://h:1/b.zip"]
    with pytest.raises(NodeError, match="64 hex digits"):
        PluginSource.parse("/a.zip#sha256=abc")
    with pytest.raises(NodeError, match="only fragment"):
        PluginSource.parse("/a.zip#md5=abc")


def test_local_zip_checked_by_sha256(toy_zip, tmp_path):
    got = fetch(PluginSource(str(toy_zip), sha(toy_zip)), downloads=tmp_path / "dl", m2=tmp_path / "m2", version="3.5.0")
    assert (got.name, got.version, got.path) == ("toy-plugin", "1.2.3", toy_zip)
    with pytest.raises(NodeError) as e:
        fetch(PluginSource(str(toy_zip), "0" * 64), downloads=tmp_path / "dl", m2=tmp_path / "m2", version="3.5.0")
    assert "0" * 64 in str(e.value) and sha(toy_zip) in str(e.value)  # both hashes named


def test_url_download_checked_then_cached(toy_zip, tmp_path, served):
    url = served(toy_zip.parent) + "/" + toy_zip.name
    dl = tmp_path / "downloads"
    with pytest.raises(NodeError) as e:
        fetch(PluginSource(url, "f" * 64), downloads=dl, m2=tmp_path, version="3.5.0")
    assert "f" * 64 in str(e.value) and sha(toy_zip) in str(e.value)
    assert not list(dl.rglob("*.zip"))  # the refused download is not kept for the next start
    got = fetch(PluginSource(url, sha(toy_zip)), downloads=dl, m2=tmp_path, version="3.5.0")
    assert got.path.is_relative_to(dl) and sha(got.path) == sha(toy_zip)
    toy_zip.unlink()  # a later start reuses the download: no network needed
    assert fetch(PluginSource(url, got.sha256), downloads=dl, m2=tmp_path, version="3.5.0").path == got.path


def test_unreachable_url_is_a_message(tmp_path):
    with pytest.raises(NodeError, match="could not download plugin http://127.0.0.1:9/"):
        fetch(PluginSource("http://127.0.0.1:9/x.zip"), downloads=tmp_path, m2=tmp_path, version="3.5.0", timeout=5)


def _neural_search_zip() -> Path:
    for src in sources_from_env(os.environ.get("EVALCTL_OPENSEARCH_PLUGIN_ZIPS", "")):
        if src.kind == "file" and "neural-search" in src.location:
            return Path(src.location)
    pytest.skip("no opensearch-neural-search zip given to this machine (EVALCTL_OPENSEARCH_PLUGIN_ZIPS)")


@pytest.mark.opensearch
def test_plugin_added_to_assembled_node_installs_on_next_start(served, monkeypatch, os_client):
    """Assemble a second node without neural-search (hybrid is refused there, naming the plugin and the
    client-side fallback), start it, then start it again with the plugin's URL:
    evalctl restarts it with the plugin installed (no hand-deleting of dist/); a wrong sha256 installs nothing."""
    zip_path = _neural_search_zip()
    monkeypatch.delenv("EVALCTL_OPENSEARCH_PLUGIN_ZIPS")
    shared_node = ManagedNode()
    # under /tmp itself: as root the node runs as a service user who must be able to enter its home
    home = Path(tempfile.mkdtemp(prefix="evalctl-node-test-"))
    (home / "m2").symlink_to(shared_node.home / "m2")  # the Maven downloads already made, no network
    url = served(zip_path.parent) + "/" + zip_path.name
    port = free_port_pair()
    node = ManagedNode(home=home, http_port=port, heap="512m")
    try:
        node.start(echo=lambda *_: None)
        assert "opensearch-neural-search" in node.read_state().missing_plugins
        from opensearchpy import OpenSearch

        from evalctl.evaluators.fusion.search_pipelines import NeuralSearchMissing, require_neural_search
        with pytest.raises(NeuralSearchMissing, match="--plugin-zip PATH.URL.*--fusion client"):
            require_neural_search(OpenSearch(f"http://127.0.0.1:{port}"), "--method hybrid")

        wrong = ManagedNode(home=home, http_port=port, plugin_sources=(f"{url}#sha256={'0' * 64}",))
        with pytest.raises(NodeError, match="sha256 mismatch"):
            wrong.start(echo=lambda *_: None)
        assert node.running_state() is not None  # refused before anything was stopped or installed

        said: list[str] = []
        with_plugin = ManagedNode(home=home, http_port=port, plugin_sources=(f"{url}#sha256={sha(zip_path)}",))
        st = with_plugin.start(echo=said.append)
        assert any("Restarting" in s for s in said) and any("Installing plugin opensearch-neural-search" in s for s in said)
        assert "opensearch-neural-search" in st.plugins
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_cat/plugins?format=json") as r:
            assert {p["component"] for p in json.load(r)} >= {"opensearch-knn", "opensearch-neural-search"}
        record = json.loads((node.dist / "evalctl-dist.json").read_text())["plugins"]["opensearch-neural-search"]
        assert record == {"version": "3.5.0.0", "source": f"{url}#sha256={sha(zip_path)}", "sha256": sha(zip_path)}

        said.clear()  # the same source again: nothing to install, the running node is kept
        assert with_plugin.start(echo=said.append).pid == st.pid and "already running" in said[0]
    finally:
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.opensearch  # `opensearch start` on the default home: what listens on its port decides the path taken
def test_cli_refuses_a_mismatched_zip_before_touching_the_node(toy_zip):
    from click.testing import CliRunner

    from evalctl.cli.main import cli

    res = CliRunner().invoke(cli, ["opensearch", "start", "--plugin-zip", f"{toy_zip}#sha256={'0' * 64}"])
    assert res.exit_code != 0 and "sha256 mismatch" in res.output
    assert "0" * 64 in res.output and sha(toy_zip) in res.output and "Traceback" not in res.output
