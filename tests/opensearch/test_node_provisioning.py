"""Plugins are installed in dependency order and every zip is checked whole before a running node is
touched: a brand-new node home starts with neural-search given from the start (as `.ci/run` does on a new
machine), a malicious zip is refused with the node still up, and a plugin that breaks the node's start is
rolled back with the node running again as it was."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

from evalctl.opensearch.artifacts import FetchedPlugin, PluginSource, descriptor, fetch
from evalctl.opensearch.node import ManagedNode, NodeError, install_order
from evalctl.provenance import file_sha256

from conftest import free_port_pair
from test_node_plugins import _neural_search_zip

DESCRIPTOR = ("description=toy\nversion=1.0.0\nname={name}\nclassname=org.example.{cls}\njava.version=21\n"
              "opensearch.version={os_version}\nextended.plugins={extends}\n")


def plugin_zip(folder: Path, name: str, *, extends: str = "", os_version: str = "3.5.0",
               extra: dict[str, bytes] | None = None, cls: str = "Toy") -> Path:
    path = folder / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("plugin-descriptor.properties",
                   DESCRIPTOR.format(name=name, extends=extends, os_version=os_version, cls=cls))
        for entry, data in (extra or {}).items():
            z.writestr(entry, data)
    return path


def fetched(folder: Path, name: str, **kw) -> FetchedPlugin:
    return fetch(PluginSource(str(plugin_zip(folder, name, **kw))), downloads=folder, m2=folder, version="3.5.0")


def test_dependencies_install_first_whatever_order_they_were_given(tmp_path):
    # neural-search's own descriptor: extended.plugins=opensearch-knn,transport-grpc (a core module)
    ns = fetched(tmp_path, "neural", extends="knn,transport-grpc")
    knn = fetched(tmp_path, "knn", extends="lang-painless")
    order = install_order({"neural": ns, "knn": knn}, present={"transport-grpc", "lang-painless"})
    assert [p.name for p in order] == ["knn", "neural"]
    assert ns.extends == ("knn", "transport-grpc")


def test_an_absent_dependency_is_refused_naming_it(tmp_path):
    ns = fetched(tmp_path, "neural", extends="knn")
    with pytest.raises(NodeError, match=r"neural .* extends knn, which is neither installed nor given"):
        install_order({"neural": ns}, present={"transport-grpc"})
    # installed already: fine
    assert [p.name for p in install_order({"neural": ns}, present={"knn"})] == ["neural"]


def test_optional_dependencies_order_but_need_not_be_there(tmp_path):
    a = fetched(tmp_path, "a", extends="b;optional=true")
    assert a.optional_extends == ("b",) and a.extends == ()
    assert [p.name for p in install_order({"a": a}, present=set())] == ["a"]
    b = fetched(tmp_path, "b")
    assert [p.name for p in install_order({"a": a, "b": b}, present=set())] == ["b", "a"]


def test_a_cycle_is_refused(tmp_path):
    a, b = fetched(tmp_path, "a", extends="b"), fetched(tmp_path, "b", extends="a")
    with pytest.raises(NodeError, match="cycle"):
        install_order({"a": a, "b": b}, present=set())


@pytest.mark.parametrize("entry", ["../../evil.sh", "/etc/evil", "lib/../../evil"])
def test_entries_outside_the_plugin_folder_are_refused(tmp_path, entry):
    path = plugin_zip(tmp_path, "evil", extra={entry: b"#!/bin/sh\n"})
    with pytest.raises(NodeError, match="entries outside its folder"):
        descriptor(path)


def test_symlink_entries_are_refused(tmp_path):
    path = plugin_zip(tmp_path, "linky")
    with zipfile.ZipFile(path, "a") as z:
        info = zipfile.ZipInfo("lib/passwd")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
    with pytest.raises(NodeError, match="entries outside its folder"):
        descriptor(path)


def test_a_damaged_zip_is_refused(tmp_path):
    path = plugin_zip(tmp_path, "damaged", extra={"lib/a.jar": b"x" * 5000})
    data = bytearray(path.read_bytes())
    at = data.index(b"x" * 100)
    data[at:at + 10] = b"y" * 10  # flips stored bytes: the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(NodeError, match="damaged"):
        descriptor(path)
    path.write_bytes(b"not a zip")
    with pytest.raises(NodeError, match="not an OpenSearch plugin zip"):
        descriptor(path)


def test_a_plugin_for_another_version_is_refused(tmp_path):
    with pytest.raises(NodeError, match="built for OpenSearch 2.19.0, not 3.5.0"):
        fetched(tmp_path, "old", os_version="2.19.0")


def _health(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_cluster/health", timeout=10) as r:
        return json.load(r)["status"]


@pytest.mark.opensearch
def test_brand_new_home_with_neural_search_then_bad_zips_leave_the_node_up(monkeypatch, os_client, tmp_path):
    """A node home with no distribution assembled, started with the neural-search zip in
    EVALCTL_OPENSEARCH_PLUGIN_ZIPS (what `.ci/run` does on a new machine): k-NN must go in first."""
    ns_zip = _neural_search_zip()
    monkeypatch.setenv("EVALCTL_OPENSEARCH_PLUGIN_ZIPS", f"{ns_zip}#sha256={file_sha256(ns_zip).split(':')[1]}")
    shared = ManagedNode()
    home = Path(tempfile.mkdtemp(prefix="evalctl-node-fresh-"))
    # Maven's downloads only (the artifacts, not an assembled node): the assembly itself is from scratch
    (home / "m2").symlink_to(shared.home / "m2")
    port = free_port_pair()
    node = ManagedNode(home=home, http_port=port, heap="512m")
    try:
        said: list[str] = []
        st = node.start(echo=said.append)
        installs = [s.split()[2] for s in said if s.startswith("Installing plugin")]
        assert installs == ["opensearch-knn", "opensearch-neural-search"], said
        assert set(st.plugins) >= {"opensearch-knn", "opensearch-neural-search"} and not st.missing_plugins
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_cat/plugins?format=json") as r:
            assert {p["component"] for p in json.load(r)} >= {"opensearch-knn", "opensearch-neural-search"}

        # a zip with a ../../ entry: refused before anything is stopped
        evil = plugin_zip(tmp_path, "evil", extra={"../../../evil.sh": b"#!/bin/sh\n"})
        with pytest.raises(NodeError, match="entries outside its folder"):
            ManagedNode(home=home, http_port=port, plugin_sources=(str(evil),)).start(echo=lambda *_: None)
        assert node.running_state().pid == st.pid and _health(port) in ("green", "yellow")
        assert not (home / "dist" / "evil.sh").exists() and not list(home.rglob("evil.sh"))

        # a zip the plugin tool refuses (it extends a plugin nobody has): refused before the stop as well
        orphan = plugin_zip(tmp_path, "orphan", extends="no-such-plugin")
        with pytest.raises(NodeError, match="extends no-such-plugin"):
            ManagedNode(home=home, http_port=port, plugin_sources=(str(orphan),)).start(echo=lambda *_: None)
        assert node.running_state().pid == st.pid

        # a plugin that installs but stops the node from starting: rolled back, node up without it
        broken = plugin_zip(tmp_path, "broken-class", cls="DoesNotExist")
        said.clear()
        with pytest.raises(NodeError, match="restored without the new plugins"):
            ManagedNode(home=home, http_port=port, plugin_sources=(str(broken),)).start(echo=said.append, timeout=120)
        back = node.running_state()
        assert back is not None and _health(port) in ("green", "yellow")
        assert "broken-class" not in node.installed_plugins() and "broken-class" not in back.plugins
        assert set(back.plugins) >= {"opensearch-knn", "opensearch-neural-search"}
        assert not node.dist.with_name(node.dist.name + ".previous").exists()
    finally:
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


JVM_OPTIONS = ("# JDK 20+ Incubating Vector Module for SIMD optimizations;\n"  # as OpenSearch 3.5.0 ships it
               "# disabling may reduce performance on vector optimized lucene\n"
               "20-:--add-modules=jdk.incubator.vector\n\n"
               "21-:-javaagent:agent/opensearch-agent.jar\n")


def test_simd_vectors_off_comments_out_only_the_vector_module_and_on_restores_it(tmp_path):
    from evalctl.opensearch.node import set_simd_vectors

    path = tmp_path / "jvm.options"
    path.write_text(JVM_OPTIONS)
    set_simd_vectors(path, on=False)
    off = path.read_text()
    changed = [(a, b) for a, b in zip(JVM_OPTIONS.splitlines(), off.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith("#") and changed[0][1].endswith(changed[0][0])
    set_simd_vectors(path, on=False)  # again: unchanged
    assert path.read_text() == off
    set_simd_vectors(path, on=True)
    assert path.read_text() == JVM_OPTIONS
