"""Latency as an experiment: the systems of one corpus timed interleaved, so that neither their order nor the
machine's moment weighs on one more than another, and their percentiles compared with the noise they carry.

The design: after a warm-up per system, `rounds` rounds; each round sends every query to every system, query by
query, the systems' order rotated by one per query and per round (system s is position (s + query + round) mod n),
so a drift of the machine over the experiment and any cost of coming first are shared by all. Every latency is
kept as (system, round, query, position, ms).

A round during which other work held the machine (the CPU share of everything but this process and a node on
this host, OtherLoad) over BUSY_SHARE is repeated, at most `busy_repeats` times in all. The analysis reads the
quiet rounds; when fewer than `rounds` were quiet, it reads them all and the measurement is `busy`: the report
shows it and draws no finding from it.

Statistics: p50 and p95 of a system over its kept latencies, with percentile-bootstrap CIs resampling queries and
rounds (both with replacement: a query's latency and a round's moment vary, and their latencies are not
independent draws); two systems are compared paired: the same resampled queries and rounds for both, the CI of the
difference of their percentiles. A difference is beyond the noise when that CI, at the family's Bonferroni level,
leaves out 0; a percentile is within a budget when its CI's upper end is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

BUSY_SHARE = 0.5  # of the host's CPUs held by other work during a round: the round is busy
PERCENTILES = (50, 95)


@dataclass(frozen=True)
class Timing:
    system: int  # index into the experiment's systems
    round: int  # counted over every round sent, repeats included
    query: int
    position: int  # in the round's order for this query: 0 was sent first
    ms: float | None  # None: the request failed
    error: str | None = None


@dataclass(frozen=True)
class Rounds:
    """What was sent: every timing, and per round the other work's CPU share and whether it was quiet."""

    timings: tuple[Timing, ...]
    other_load: tuple[float, ...]  # per round
    quiet: tuple[bool, ...]
    wanted: int  # rounds asked for

    @property
    def busy(self) -> bool:
        """Fewer quiet rounds than asked for: the analysis reads every round and draws no finding."""
        return sum(self.quiet) < self.wanted

    @property
    def kept(self) -> list[int]:
        """The rounds the analysis reads."""
        quiet = [r for r, q in enumerate(self.quiet) if q]
        return list(range(len(self.quiet))) if self.busy else quiet


def position(system: int, query: int, round_: int, n: int) -> int:
    return (system + query + round_) % n


def order(query: int, round_: int, n: int) -> list[int]:
    """The systems in the order they are sent `query` in round `round_`."""
    return sorted(range(n), key=lambda s: position(s, query, round_, n))


class OtherLoad:
    """The CPU share of the host held by work other than this process and the nodes' that run on this host:
    /proc/stat's busy time less these processes' own CPU time, over wall time x CPUs. Without /proc (not Linux):
    the 1-minute load average over the CPUs, which counts this experiment too."""

    def __init__(self, node_pids: tuple[int, ...] = ()):
        self._pids, self._cpus = node_pids, os.cpu_count() or 1
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _busy_s(self) -> float | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except OSError:
            return None
        total = sum(fields)
        return (total - fields[3] - fields[4]) / self._tick  # less idle and iowait

    def _nodes_s(self) -> float:
        total = 0
        for pid in self._pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    after_name = f.read().rsplit(")", 1)[1].split()
            except OSError:  # a node gone: its time no longer counts on either side
                continue
            total += int(after_name[11]) + int(after_name[12])  # utime, stime
        return total / self._tick

    def mark(self) -> tuple:
        t = os.times()
        return self._busy_s(), t.user + t.system, self._nodes_s(), t.elapsed

    def share(self, since: tuple) -> float:
        now = self.mark()
        if since[0] is None or now[0] is None:
            return os.getloadavg()[0] / self._cpus
        wall = max(now[3] - since[3], 1e-9)
        others = (now[0] - since[0]) - (now[1] - since[1]) - (now[2] - since[2])
        return max(0.0, others) / (wall * self._cpus)


Send = Callable[[int, int], tuple[float | None, str | None]]  # (system, query) -> (ms, None) or (None, what failed)


def send_rounds(n_systems: int, n_queries: int, rounds: int, send: Send, load=None, warmup: int = 0,
                busy_repeats: int = 2) -> Rounds:
    """Run the design (module docstring): `send` sends one request; `load` is an OtherLoad (or anything with its
    mark/share)."""
    load = load or OtherLoad()
    for i in range(warmup):  # the warm-up interleaved too, so each system's graphs are paged in alike
        for s in order(i, 0, n_systems):
            send(s, i % n_queries)
    timings, shares, quiet = [], [], []
    while sum(quiet) < rounds and len(quiet) < rounds + busy_repeats:
        r, since = len(quiet), load.mark()
        for q in range(n_queries):
            for pos, s in enumerate(order(q, r, n_systems)):
                ms, error = send(s, q)
                timings.append(Timing(s, r, q, pos, ms, error))
        shares.append(round(load.share(since), 3))
        quiet.append(shares[-1] <= BUSY_SHARE)
    return Rounds(tuple(timings), tuple(shares), tuple(quiet), rounds)


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float  # percentile-bootstrap CI at the level asked
    hi: float


class Analysis:
    """The kept rounds' latencies as one array per system (rounds x queries, nan where a request failed) and the
    bootstrap replicates every interval and comparison shares (one draw of rounds and queries per replicate).
    `encode` (systems x queries, ms): each query's encoding, added to its search in each round for the serving
    latency (`serving=True`); nan where not measured, which leaves the system no serving figure."""

    def __init__(self, rounds: Rounds, n_systems: int, n_queries: int, n_bootstrap: int = 1000, seed: int = 42,
                 encode: np.ndarray | None = None):
        kept = rounds.kept
        row = {r: i for i, r in enumerate(kept)}
        self.ms = np.full((n_systems, len(kept), n_queries), np.nan)
        for t in rounds.timings:
            if t.round in row and t.ms is not None:
                self.ms[t.system, row[t.round], t.query] = t.ms
        self.errors = [sum(1 for t in rounds.timings if t.system == s and t.round in row and t.ms is None)
                       for s in range(n_systems)]
        rng = np.random.default_rng(seed)
        self._draws = [(rng.integers(len(kept), size=len(kept)), rng.integers(n_queries, size=n_queries))
                       for _ in range(n_bootstrap)]
        self.encode = np.zeros((n_systems, n_queries)) if encode is None else encode
        self._reps: dict[tuple[int, float, bool], np.ndarray] = {}

    def has_serving(self, system: int) -> bool:
        return not np.isnan(self.encode[system]).any()

    def _values(self, system: int, serving: bool) -> np.ndarray:
        return self.ms[system] + self.encode[system][None, :] if serving else self.ms[system]

    def _replicates(self, system: int, pct: float, serving: bool) -> np.ndarray:
        if (system, pct, serving) not in self._reps:
            a = self._values(system, serving)
            self._reps[system, pct, serving] = np.array([np.nanpercentile(a[np.ix_(r, q)], pct)
                                                         for r, q in self._draws])
        return self._reps[system, pct, serving]

    def percentile(self, system: int, pct: float, level: float = 0.95, serving: bool = False) -> Estimate:
        reps = self._replicates(system, pct, serving)
        lo, hi = np.nanpercentile(reps, [50 * (1 - level), 50 * (1 + level)])
        return Estimate(float(np.nanpercentile(self._values(system, serving), pct)), float(lo), float(hi))

    def difference(self, a: int, b: int, pct: float, level: float = 0.95, serving: bool = False) -> Estimate:
        """b's percentile less a's, paired: the same resampled rounds and queries for both."""
        reps = self._replicates(b, pct, serving) - self._replicates(a, pct, serving)
        lo, hi = np.nanpercentile(reps, [50 * (1 - level), 50 * (1 + level)])
        point = (np.nanpercentile(self._values(b, serving), pct) - np.nanpercentile(self._values(a, serving), pct))
        return Estimate(float(point), float(lo), float(hi))

    def position_effect(self, rounds: Rounds) -> list[float]:
        """Mean latency by position in the order (every kept round, every system): what coming first costs."""
        kept = set(rounds.kept)
        by = {}
        for t in rounds.timings:
            if t.round in kept and t.ms is not None:
                by.setdefault(t.position, []).append(t.ms)
        return [float(np.mean(by[p])) for p in sorted(by)]


def apart(d: Estimate) -> bool:
    """A paired difference beyond the noise: its CI leaves out 0."""
    return d.lo > 0 or d.hi < 0


def bonferroni_level(family: int, alpha: float = 0.05) -> float:
    """The CI level that keeps `family` intervals at `alpha` together."""
    return 1 - alpha / max(family, 1)


def ranking(analysis: Analysis, systems: Sequence[int], pct: float = 95, alpha: float = 0.05
            ) -> list[tuple[int, int, Estimate, bool]]:
    """Neighbours in order of the percentile: (faster, slower, slower - faster, apart at the Bonferroni level of
    the n - 1 neighbour comparisons)."""
    by = sorted(systems, key=lambda s: np.nanpercentile(analysis.ms[s], pct))
    level = bonferroni_level(len(by) - 1, alpha)
    out = []
    for a, b in zip(by, by[1:]):
        d = analysis.difference(a, b, pct, level)
        out.append((a, b, d, apart(d)))
    return out
