"""The interleaved latency design against a deterministic fake timing source: known latencies per system, a cost
of coming first, a machine drifting slower over the experiment, and noise (evaluators/retrieval/latency_design)."""

from __future__ import annotations

import numpy as np

from evalctl.evaluators.retrieval.latency_design import Analysis, OtherLoad, order, ranking, send_rounds

N_QUERIES = 60


class FakeServer:
    """latency = the system's own + `first` when it comes first in a query's order + `drift` per request sent so
    far + gaussian noise of `noise` ms (seeded)."""

    def __init__(self, base: list[float], first: float = 0.0, drift: float = 0.0, noise: float = 0.5):
        self.base, self.first, self.drift, self.noise = base, first, drift, noise
        self.sent, self.last, self.rng = 0, None, np.random.default_rng(7)

    def send(self, system: int, query: int) -> tuple[float, None]:
        first = self.first if self.last is None or self.last[1] != query else 0.0  # a new query: it came first
        self.last = (system, query)
        ms = self.base[system] + first + self.drift * self.sent + self.rng.normal(0, self.noise)
        self.sent += 1
        return max(ms, 0.01), None


class FakeLoad:
    """Other work's CPU share per round, as given."""

    def __init__(self, shares: list[float]):
        self.shares, self.round = shares, 0

    def mark(self):
        return None

    def share(self, since) -> float:
        self.round += 1
        return self.shares[min(self.round - 1, len(self.shares) - 1)]


def _run(server, n, rounds=5, load=None, repeats=2):
    measured = send_rounds(n, N_QUERIES, rounds, server.send, load or FakeLoad([0.0]), warmup=3, busy_repeats=repeats)
    return measured, Analysis(measured, n, N_QUERIES, n_bootstrap=300)


def test_every_system_takes_every_position_alike():
    n = 3
    counts = np.zeros((n, n), int)
    for r in range(3):
        for q in range(N_QUERIES):
            for pos, s in enumerate(order(q, r, n)):
                counts[s, pos] += 1
    assert (counts == counts[0, 0]).all()


def test_the_interleaved_design_recovers_the_true_order_under_drift_and_an_order_effect():
    # a drift over the experiment of 12 ms and a first-comer's cost of 6 ms, against true gaps of 3 ms: a design that
    # timed the systems one after another (slowest truly first, when the machine is fastest) would rank them upside
    # down; interleaved, each system meets the drift and the first place alike
    base = [14.0, 11.0, 8.0]
    server = FakeServer(base, first=6.0, drift=12.0 / (5 * 3 * N_QUERIES), noise=0.5)
    measured, a = _run(server, 3)
    assert not measured.busy and measured.kept == [0, 1, 2, 3, 4]
    steps = ranking(a, range(3), pct=50)
    assert [(s[0], s[1]) for s in steps] == [(2, 1), (1, 0)]
    assert all(apart for *_, apart in steps)
    for s, true in enumerate(base):  # each median within the shared drift and noise of the truth (+ the first
        est = a.percentile(s, 50)  # place's cost a third of the time, equal for all)
        assert est.lo <= est.value <= est.hi
        assert true < est.value < true + 12.0
    effect = a.position_effect(measured)
    assert effect[0] - effect[1] > 5  # the order effect is there and measured: every system bore it alike

    sequential = FakeServer(base, first=6.0, drift=12.0 / (5 * 3 * N_QUERIES), noise=0.5)  # the same machine, blocks
    block = {s: np.median([sequential.send(s, q)[0] for _ in range(5) for q in range(N_QUERIES)]) for s in range(3)}
    assert block[0] < block[2]  # the one-after-another design gets the order wrong here, so the test can tell


def test_differences_below_the_spread_cannot_be_told_apart():
    server = FakeServer([10.0, 10.2, 10.4], noise=3.0)
    _, a = _run(server, 3)
    steps = ranking(a, range(3), pct=95)
    assert not any(apart for *_, apart in steps)
    d = a.difference(0, 2, 95)
    assert d.lo < 0 < d.hi


def test_a_busy_round_is_repeated_and_left_out():
    server = FakeServer([5.0, 6.0])
    measured, a = _run(server, 2, load=FakeLoad([0.1, 0.9, 0.2, 0.1, 0.0, 0.0]))
    assert measured.quiet == (True, False, True, True, True, True)
    assert not measured.busy and measured.kept == [0, 2, 3, 4, 5]
    assert a.ms.shape == (2, 5, N_QUERIES) and not np.isnan(a.ms).any()


def test_a_machine_busy_throughout_is_repeated_within_the_bound_then_marked_busy():
    server = FakeServer([5.0, 6.0])
    measured, a = _run(server, 2, load=FakeLoad([0.9]), repeats=2)
    assert len(measured.quiet) == 7 and not any(measured.quiet)
    assert measured.busy and measured.kept == list(range(7))  # read all, and the report draws no finding


def test_failed_requests_are_counted_not_timed():
    server = FakeServer([5.0, 6.0])

    def send(s, q):
        return (None, "HTTP 500") if s == 1 and q == 0 else server.send(s, q)

    measured = send_rounds(2, N_QUERIES, 5, send, FakeLoad([0.0]))
    a = Analysis(measured, 2, N_QUERIES, n_bootstrap=100)
    assert a.errors == [0, 5]
    assert np.isnan(a.ms[1, :, 0]).all() and not np.isnan(a.ms[0]).any()


def test_other_load_reads_this_host():
    probe = OtherLoad()
    since = probe.mark()
    sum(i * i for i in range(200_000))  # this process's own work is not others' load
    assert 0.0 <= probe.share(since) <= 1.0
