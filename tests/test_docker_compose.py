"""docker-compose.yml stays in step with the managed node and stays local-only (structure only:
build machines have no Docker engine)."""

import yaml

from conftest import REPO
from evalctl.opensearch.node import load_spec


def compose():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_images_pin_the_managed_node_version():
    version = load_spec().version
    services = compose()["services"]
    assert services["opensearch"]["image"] == f"opensearchproject/opensearch:{version}"
    assert services["dashboards"]["image"] == f"opensearchproject/opensearch-dashboards:{version}"


def test_ports_are_loopback_only_and_data_in_named_volume():
    doc = compose()
    for name, svc in doc["services"].items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
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
