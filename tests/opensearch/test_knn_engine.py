"""A native k-NN engine (faiss) on the managed node whose plugin lacks the native libraries is refused
before any vector field asks for it: creating one kills that node's JVM, and the shard left behind stops it
from starting again (seen on this machine's Maven-built node)."""

from __future__ import annotations

import dataclasses

import pytest

from evalctl.indexers.index_layout import load_index_settings
from evalctl.indexers.index_loader import ensure_index
from evalctl.opensearch.cluster_info import EngineUnavailable
from evalctl.opensearch.connection import load_settings
from evalctl.opensearch.node import ManagedNode


def test_native_knn_is_read_from_the_plugin_folder(tmp_path):
    node = ManagedNode(home=tmp_path)
    assert node.native_knn() is None  # no k-NN plugin here
    node.knn_plugin.mkdir(parents=True)
    assert node.native_knn() is False  # the Maven Central plugin: jars only
    (node.knn_plugin / "lib").mkdir()
    assert node.native_knn() is True  # a distribution's plugin ships lib/libopensearchknn_*.so


def test_faiss_is_refused_on_the_managed_node_without_native_libraries(os_client, index_name):
    if load_settings().external or ManagedNode().native_knn() is not False:
        pytest.skip("needs the managed node with the k-NN plugin from Maven Central (no native libraries)")
    settings = dataclasses.replace(load_index_settings(), engine="faiss")
    meta = {"dim": 384, "similarity": "cosine", "views": ["T"]}
    with pytest.raises(EngineUnavailable, match=r"engine 'faiss' \(configs/index.yaml\).*native libraries"):
        ensure_index(os_client, index_name, meta, settings, f"{index_name}-alias")
    assert not os_client.indices.exists(index=index_name)
    assert os_client.cluster.health()["status"] in ("green", "yellow")  # the node is still there
