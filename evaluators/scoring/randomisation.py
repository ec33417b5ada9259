"""The paired randomisation test (Fisher's; Smucker et al. CIKM'07), vectorised and seeded: the sign of each
unit's difference (query, split, seed) is flipped at random, and p is the share of flipped mean differences at
least as far from 0 as the observed one. With few units every one of the 2^n flips is enumerated (an exact p,
e.g. 2/32 = 0.0625 at best for 5 units), else `n_permutations` random flips from one seeded generator give
p = (b + 1) / (n_permutations + 1), which is never 0. The same seed draws the same flips for every column, so
a comparison's p does not depend on which other comparisons were tested beside it."""

from __future__ import annotations

import numpy as np

_BLOCK = 1 << 22  # elements of one block of flips (32 MiB of float64): memory stays flat for any n


def sign_flip_p(diffs: np.ndarray, n_permutations: int, seed: int, exact_up_to: int) -> np.ndarray:
    """Two-sided p for each column of `diffs` (units x comparisons): the mean paired difference against its
    randomisation distribution; exact when there are at most `exact_up_to` units."""
    d = np.asarray(diffs, dtype=float)
    n, k = d.shape
    if n == 0:
        return np.ones(k)
    observed = np.abs(d.sum(axis=0)) - 1e-9 * np.abs(d).sum(axis=0)  # a flip's sum rounds otherwise
    exact = n <= exact_up_to
    total = 2 ** n if exact else n_permutations
    rows = max(1, _BLOCK // n)
    columns = max(1, _BLOCK // rows)
    rng = np.random.default_rng(seed)
    hits = np.zeros(k)
    for start in range(0, total, rows):
        m = min(rows, total - start)
        if exact:
            bits = (np.arange(start, start + m)[:, None] >> np.arange(n)) & 1
        else:
            bits = rng.random((m, n)) < 0.5  # float draws: the same flips however the blocks are cut
        signs = 1.0 - 2.0 * bits
        for c in range(0, k, columns):
            hits[c:c + columns] += (np.abs(signs @ d[:, c:c + columns]) >= observed[c:c + columns]).sum(axis=0)
    return hits / total if exact else (hits + 1) / (total + 1)


def smallest_sign_flip_p(n: int, n_permutations: int, exact_up_to: int) -> float:
    """The smallest p the test can give on n units: 2 / 2^n exact (both all-same-sign flips), else
    1 / (n_permutations + 1)."""
    return min(1.0, 2 / 2 ** n) if n <= exact_up_to else 1 / (n_permutations + 1)
