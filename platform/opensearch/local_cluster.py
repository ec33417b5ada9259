"""A local cluster of several real OpenSearch nodes on 127.0.0.1, for trying the cluster path and for the
cluster tests: each member is a ManagedNode of one distribution (one home), with its own data, logs, state and
ports (HTTP first_port + i, transport the same offset from the spec's), finding the others through
discovery.seed_hosts. `stop` ends exactly the processes `start` launched."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from pathlib import Path

from evalctl import paths
from evalctl.opensearch.node import Membership, ManagedNode, NodeError, NodeState, load_spec


# A cluster for trying the cluster path and for tests, not for serving: three JVMs starting at once on a small
# machine spend much of their start in the JIT compiler; C1 alone compiles less while they start.
LIGHT_JVM = "-XX:TieredStopAtLevel=1"


class LocalCluster:
    def __init__(self, nodes: int = 3, home: Path | None = None, http_port: int = 9400, heap: str = "512m",
                 plugin_sources: tuple = (), jvm_options: str = LIGHT_JVM):
        if nodes < 2:
            raise ValueError(f"a local cluster has 2 or more nodes, not {nodes} (one node: ManagedNode)")
        spec = load_spec()
        # its own cluster name: a member never joins the single managed node, whatever its ports
        spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, cluster_name=f"{spec.node.cluster_name}-local"))
        names = tuple(f"evalctl-local-{i}" for i in range(nodes))
        offset = http_port - spec.node.http_port
        seeds = tuple(f"{spec.node.host}:{spec.node.transport_port + offset + i}" for i in range(nodes))
        self.home = home or paths.opensearch_home()
        self.members = [ManagedNode(spec, home=self.home, heap=heap, http_port=http_port + i,
                                    plugin_sources=plugin_sources, member=Membership(name, seeds, names),
                                    jvm_options=jvm_options)
                        for i, name in enumerate(names)]

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    def start(self, timeout: float = 300.0, echo=print) -> float:
        """Start every member not running (all at once: the first cluster manager is elected only when most of
        them are up), wait until all have joined; the seconds it took."""
        t0 = time.monotonic()
        self.members[0].provision(echo=echo)
        launched = {}
        try:
            for i, m in enumerate(self.members):
                if m.running_state() is None:
                    launched[i] = m.spawn(timeout, echo)
            for i, pid in launched.items():
                self.members[i].await_up(pid, t0, timeout)
            self.wait_for_nodes(len(self.members), deadline=t0 + timeout)
        except BaseException:
            for i, pid in launched.items():  # none left running unrecorded, nor half a cluster
                self.members[i]._end(pid)
                self.members[i].state_file.unlink(missing_ok=True)
            raise
        return time.monotonic() - t0

    def start_member(self, i: int, timeout: float = 180.0) -> NodeState:
        """Start one member again (after it stopped or was killed); it rejoins the others."""
        member = self.members[i]
        st = member.await_up(member.spawn(timeout, lambda *_: None), time.monotonic(), timeout)
        self.wait_for_nodes(len(self.members), deadline=time.monotonic() + timeout)
        return st

    def wait_for_nodes(self, n: int, deadline: float) -> None:
        last = "no answer"
        while time.monotonic() < deadline:
            for url in self.urls:
                try:
                    with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_nodes={n}&timeout=5s", timeout=10) as r:
                        health = json.loads(r.read())
                    if health["number_of_nodes"] >= n:
                        return
                    last = f"{health['number_of_nodes']} node(s) at {url}"
                except OSError as e:
                    last = f"{url}: {e}"
            time.sleep(1)
        raise NodeError(f"the local cluster did not reach {n} nodes in time (last: {last})")

    def stop(self) -> list[int]:
        """Stop every member `start` launched; their pids."""
        return [pid for m in self.members if (pid := m.stop()) is not None]


def stop_members(home: Path | None = None) -> dict[str, int]:
    """Stop every local cluster member whose state `start` recorded under home (any node count): {name: pid}."""
    home = home or paths.opensearch_home()
    stopped = {}
    for state in sorted((home / "run").glob("evalctl-local-*/node.json")):
        name = state.parent.name
        if (pid := ManagedNode(home=home, member=Membership(name, (), ())).stop()) is not None:
            stopped[name] = pid
    return stopped
