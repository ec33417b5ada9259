"""What every bench shares, so none of them can flatter one side: side orders that alternate per
round, min/median/max of several samples, ratio lines with their target, the machine's load while
measuring (other people share the cores), and long-lived worker processes per side (each side's peak
RSS stays its own, its imports are paid once, and its first call is an untimed warm-up).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Callable, Sequence


def load() -> str:
    """1/5/15-minute load averages and the core count, e.g. "load 3.1 2.8 2.5 on 2 cores"."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def orders(sides: Sequence[str], rounds: int) -> list[list[str]]:
    """Per round, the sides in rotated order (A B, B A, ...), so drift and cache effects hit all alike."""
    sides = list(sides)
    return [sides[r % len(sides):] + sides[: r % len(sides)] for r in range(rounds)]


def spread(xs: Sequence[float], fmt: str = "{:.3f}") -> str:
    """min / median / max."""
    return " / ".join(fmt.format(v) for v in (min(xs), statistics.median(xs), max(xs)))


def ratio_line(name: str, ratios: Sequence[float], target: str) -> str:
    """One line per target: the median of the per-round ratios, with their range."""
    return (f"ratio {name}: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, "
            f"{len(ratios)} rounds; target {target})")


def run_rounds(sides: Sequence[str], rounds: int, measure: Callable[[str, int], float], warmup: bool = True
               ) -> dict[str, list[float]]:
    """Seconds per side per round, sides rotating; one untimed call per side first when `warmup`."""
    if warmup:
        for side in sides:
            measure(side, -1)
    out: dict[str, list[float]] = {s: [] for s in sides}
    for r, order in enumerate(orders(sides, rounds)):
        for side in order:
            out[side].append(measure(side, r))
    return out


class Worker:
    """A child process running `script --serve ...args`: each line sent is one request, each reply one
    JSON line (see serve)."""

    def __init__(self, script: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, script, "--serve", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def call(self, request: str = "go") -> dict:
        self.proc.stdin.write(request + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench worker {self.proc.args} died (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def run_workers(script: str, sides: Sequence[str], rounds: int, *args: str
                ) -> tuple[dict[str, list[float]], dict[str, list[dict]]]:
    """One Worker per side (`script --serve SIDE ...args`), rotated over `rounds` after a warm-up call each:
    seconds per side per round, and each timed reply."""
    workers = {side: Worker(script, side, *args) for side in sides}
    replies: dict[str, list[dict]] = {side: [] for side in sides}

    def measure(side: str, r: int) -> float:
        reply = workers[side].call()
        if r >= 0:
            replies[side].append(reply)
        return reply["seconds"]

    try:
        return run_rounds(sides, rounds, measure), replies
    finally:
        for w in workers.values():
            w.close()


def serve(handle: Callable[[str], dict]) -> None:
    """The worker side: answer each stdin line with handle(line) as one JSON line on stdout. Anything
    else the code prints goes to stderr, so it cannot break the protocol."""
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        out.write(json.dumps(handle(line.strip())) + "\n")
        out.flush()
