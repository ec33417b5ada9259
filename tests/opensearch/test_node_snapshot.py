"""node_snapshot: inside it, index manifests are read from the node once (the report's one picture of
the node); outside it, every read asks the node again."""

from __future__ import annotations

import uuid

from evalctl.indexers.index_loader import read_manifest
from evalctl.opensearch.cluster_info import node_snapshot


def test_manifests_are_read_once_inside_a_snapshot_and_fresh_outside(os_client):
    name = f"evalctl-test-snapshot-{uuid.uuid4().hex[:8]}"
    os_client.indices.create(index=name, body={"mappings": {"_meta": {"v": 1}, "properties": {}}})
    try:
        assert read_manifest(os_client, f"{name}-absent") is None
        with node_snapshot():
            first = read_manifest(os_client, name)
            first["v"] = 99  # a caller changing its copy does not change the snapshot
            os_client.indices.put_mapping(index=name, body={"_meta": {"v": 2}})
            assert read_manifest(os_client, name)["v"] == 1
        # (a manifest made before shards were recorded gets the index's own count: not what is tested here)
        assert read_manifest(os_client, name)["v"] == 2
    finally:
        os_client.indices.delete(index=name)
