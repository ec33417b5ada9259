"""`evalctl report` rebuilds from the results store alone: a small study runs on a private node (retrieval,
classification, clustering), the node is stopped, and the report written again is byte-identical to the one
written with the node up, except its timestamp (the shared node is never stopped)."""

from __future__ import annotations

import re

import pytest
import yaml
from click.testing import CliRunner

from real_data import ESPACENET

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

MODEL = "all-minilm-l6-v2"
PIZZA = ESPACENET


def _without_timestamp(text: str) -> str:
    stamped = re.sub(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "Generated <time>", text)
    assert stamped != text  # the one line that may differ is there
    return stamped


def test_report_rebuilds_with_the_node_stopped(on_private_node, tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    doc = {"name": "offline-report", "models": [{"id": MODEL}],
           "corpora": [{"name": "or-pizza", "format": "espacenet", "sources": [str(PIZZA)],
                        "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
           "retrieval": [{"corpus": "or-pizza", "views": ["T"], "methods": ["bm25", "dense"]}],
           "classification": [{"corpus": "or-pizza", "views": ["T"], "label_sets": ["ipc3"]}],
           "clustering": [{"corpus": "or-pizza", "views": ["T"], "label_sets": ["ipc3"]}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["run", str(path)])
    assert r.exit_code == 0, r.output
    up, down = tmp_path / "up", tmp_path / "down"
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(up)])
    assert r.exit_code == 0, r.output
    on_private_node.stop()
    assert on_private_node.running_state() is None
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(down)])
    assert r.exit_code == 0, r.output
    md = (up / "report.md").read_text()
    for heading in ("## Findings", "## Retrieval", "## Classification", "## Clustering"):
        assert heading in md
    assert "No retrieval results yet" not in md and "No classification results yet" not in md
    assert "No clustering results yet" not in md
    for name in ("report.md", "report.html"):
        assert _without_timestamp((down / name).read_text()) == _without_timestamp((up / name).read_text()), name
    files = sorted(p.name for p in up.iterdir())
    assert files == sorted(p.name for p in down.iterdir()) and "inout-or-pizza-T.png" in files
    for name in files:
        if name.endswith((".png", ".tex")):
            assert (down / name).read_bytes() == (up / name).read_bytes(), name
