"""Seeds the random state of the numba worker that runs a parallel loop on one thread (ranx_engine.fisher).
A module of its own: it imports numba, which only ranx's callers should pay for, and is imported after
ranx_engine.load() set numba's cache folder, so this kernel is cached beside ranx's."""

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def seed_worker(seed):
    for _ in prange(1):  # the loop body runs on the worker, whose state np.random.seed then sets
        np.random.seed(seed)
