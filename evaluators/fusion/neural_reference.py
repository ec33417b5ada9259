"""neural-search 3.5's score fusion (normalization-processor, score-ranker-processor; one shard) read into
Python, applied to the two sub-queries' own hits. Tests hold the real plugin to it; parity uses it to
explain where native fusion and client-side ranx fusion disagree.

Normalisations are per sub-query over that sub-query's hits: min_max floors a 0 to 0.001 and gives a
single-valued list 1.0; l2 divides by the list's L2 norm; z_score uses the sample standard deviation,
floors scores <= 0 to 0.001 and returns the list's maximum for a score equal to the mean. Combinations
weigh the normalised scores: arithmetic_mean counts an absent document as 0 with its weight; geometric and
harmonic means skip absent (0) scores together with their weights. RRF sums weight / (rank_constant + rank).
"""

from __future__ import annotations

import math
import statistics

Hits = list[tuple[str, float]]


MIN_SCORE = 0.001  # the floor min_max and z_score give a score that normalises to 0 (or below)


def _normalise(hits: Hits, technique: str) -> dict[str, float]:
    scores = [s for _, s in hits]
    if not scores:
        return {}
    if technique == "min_max":
        lo, hi = min(scores), max(scores)
        if hi == lo:
            return {d: 1.0 for d, _ in hits}
        return {d: ((s - lo) / (hi - lo)) or MIN_SCORE for d, s in hits}
    if technique == "l2":
        norm = math.sqrt(sum(s * s for s in scores))
        return {d: s / norm if norm else 0.0 for d, s in hits}
    if technique == "z_score":
        mean = statistics.fmean(scores)
        std = statistics.stdev(scores) if len(scores) > 1 else 0.0
        out = {}
        for d, s in hits:
            if math.isclose(s, mean, rel_tol=1e-7):
                out[d] = max(scores)
            elif std == 0:
                out[d] = min(scores)
            else:
                z = (s - mean) / std
                out[d] = z if z > 0 else MIN_SCORE
        return out
    raise ValueError(technique)


def _combine(values: list[float | None], weights: list[float], technique: str) -> float:
    if technique == "arithmetic_mean":
        return sum(w * (v or 0.0) for v, w in zip(values, weights)) / sum(weights)
    present = [(v, w) for v, w in zip(values, weights) if v]
    if not present:
        return 0.0
    if technique == "geometric_mean":
        return math.exp(sum(w * math.log(v) for v, w in present) / sum(w for _, w in present))
    if technique == "harmonic_mean":
        return sum(w for _, w in present) / sum(w / v for v, w in present)
    raise ValueError(technique)


def normalized_fusion(lists: list[Hits], weights: list[float], normalization: str, combination: str) -> dict[str, float]:
    norm = [_normalise(h, normalization) for h in lists]
    docs = set().union(*norm)
    return {d: _combine([n.get(d) for n in norm], weights, combination) for d in docs}


def rrf(lists: list[Hits], weights: list[float], rank_constant: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for hits, w in zip(lists, weights):
        for rank, (d, _) in enumerate(hits, start=1):
            out[d] = out.get(d, 0.0) + w / (rank_constant + rank)
    return out
