"""The managed node: stop ends exactly the process start launched, a second start reuses the cache,
and `evalctl opensearch status` lists the plugins."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli

pytestmark = pytest.mark.opensearch


def opensearch_pids(dist: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "org.opensearch.bootstrap.OpenSearch" in cmd and str(dist) in cmd:
                pids.append(int(proc.name))
    return pids


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for init to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


@pytest.fixture
def managed(on_private_node):
    """Stopping a node is tried on the tests' private node, never on the shared one."""
    return on_private_node


def test_status_lists_plugins(managed):
    result = CliRunner().invoke(cli, ["opensearch", "status"])
    assert result.exit_code == 0, result.output
    assert "opensearch-knn" in result.output
    assert "health:   green" in result.output or "health:   yellow" in result.output


def test_stop_then_warm_start(managed, os_client, monkeypatch):
    from opensearchpy import OpenSearch

    private = OpenSearch(managed.url)
    old = managed.running_state()
    assert opensearch_pids(managed.dist) == [old.pid]
    assert managed.stop() == old.pid
    assert opensearch_pids(managed.dist) == []
    assert not alive(old.pid)
    with monkeypatch.context() as m:  # the stopped node's own port (without a state file: the configured one)
        m.setenv("EVALCTL_OPENSEARCH_URL", managed.url)
        assert CliRunner().invoke(cli, ["opensearch", "status"]).exit_code != 0

    said = []
    new = managed.start(echo=said.append)
    assert not any("Downloading" in line for line in said), said  # the cache is reused: no network
    assert new.pid != old.pid and opensearch_pids(managed.dist) == [new.pid]
    assert private.cluster.health()["status"] in ("green", "yellow")
    assert os_client.cluster.health()["status"] in ("green", "yellow")  # the shared node was never touched


def test_concurrent_starts_take_turns(managed):
    """Two starts at once (two test sessions, two shells): one JVM, both told the same pid; without the
    lock the second JVM failed on the data folder's lock and its start reported a node it did not run."""
    import threading

    managed.stop()
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(managed.start(echo=lambda *_: None)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0].pid == results[1].pid
    assert opensearch_pids(managed.dist) == [results[0].pid]


def test_the_node_outlives_the_process_group_that_started_it(managed):
    """`evalctl opensearch start` run under `timeout`, a job-control shell or a CI step: a signal to that
    process group afterwards must not take the node down (the JVM used to stay in the caller's group)."""
    import os
    import signal
    import subprocess
    import sys

    managed.stop()
    script = ("import sys; from pathlib import Path; from evalctl.opensearch.node import ManagedNode; "
              "ManagedNode(home=Path(sys.argv[1]), http_port=int(sys.argv[2]), heap='512m').start(echo=lambda *_: None)")
    # a group of its own, as `timeout` or a shell job gives the command
    starter = subprocess.Popen([sys.executable, "-c", script, str(managed.home), str(managed.http_port)],
                               start_new_session=True, stderr=subprocess.PIPE, text=True)
    _, err = starter.communicate(timeout=300)
    assert starter.returncode == 0, err
    pid = managed.running_state().pid
    try:
        os.killpg(starter.pid, signal.SIGKILL)  # what `timeout -s KILL` or `kill -- -PGID` does
    except ProcessLookupError:
        pass  # nothing left in the starter's group
    time.sleep(1)
    assert alive(pid) and managed.running_state().pid == pid
