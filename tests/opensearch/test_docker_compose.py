"""docker-compose.yml (one node) and docker/compose.cluster.yml (three) stay in step with the managed node and
stay local-only (structure only: build machines have no Docker engine)."""

import pytest
import yaml

from conftest import REPO
from evalctl.opensearch.node import load_spec

SINGLE, CLUSTER = REPO / "docker-compose.yml", REPO / "docker" / "compose.cluster.yml"


def compose(path=SINGLE):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", [SINGLE, CLUSTER], ids=["single", "cluster"])
def test_images_pin_the_managed_node_version_and_ports_are_loopback_only(path):
    version = load_spec().version
    services = compose(path)["services"]
    assert services["dashboards"]["image"] == f"opensearchproject/opensearch-dashboards:{version}"
    nodes = {name: svc for name, svc in services.items() if name != "dashboards"}
    assert nodes and all(svc["image"] == f"opensearchproject/opensearch:{version}" for svc in nodes.values())
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_cluster_nodes_find_each_other_and_keep_their_own_data():
    doc = compose(CLUSTER)
    nodes = {name: svc for name, svc in doc["services"].items() if name != "dashboards"}
    assert len(nodes) == 3
    for name, svc in nodes.items():
        env = svc["environment"]
        assert env["node.name"] == name and env["cluster.name"] == "evalctl"
        assert set(env["discovery.seed_hosts"].split(",")) == set(nodes)
        assert set(env["cluster.initial_cluster_manager_nodes"].split(",")) == set(nodes)  # any two are a quorum
        for vol in svc["volumes"]:
            src = vol.split(":")[0]
            assert (CLUSTER.parent / src).is_file() if src.startswith("./") else src in doc["volumes"], vol
    data = [v.split(":")[0] for svc in nodes.values() for v in svc["volumes"] if v.endswith("/data")]
    assert len(set(data)) == 3
    hosts = next(e for e in doc["services"]["dashboards"]["environment"] if e.startswith("OPENSEARCH_HOSTS="))
    assert all(f"http://{name}:9200" in hosts for name in nodes)  # Dashboards keeps working when one node is lost


def test_single_node_data_in_named_volume():
    doc = compose()
    assert "opensearch-data" in doc["volumes"]
    assert any(v.startswith("opensearch-data:") for v in doc["services"]["opensearch"]["volumes"])


def test_security_disabled_for_local_use_and_config_files_exist():
    svc = compose()["services"]
    assert "DISABLE_SECURITY_PLUGIN=true" in svc["opensearch"]["environment"]
    assert "DISABLE_SECURITY_DASHBOARDS_PLUGIN=true" in svc["dashboards"]["environment"]
    for vol in svc["opensearch"]["volumes"]:
        src = vol.split(":")[0]
        if src.startswith("./"):
            assert (REPO / src).is_file(), src
