"""The one door to ranx, the scorer: every metric, fusion, paired test and comparison table evalctl
computes goes through here (scoring.py, fusion.py, significance.py, compare.py).

- `load()` imports ranx with numba's cache directory under evalctl's cache (`paths.numba_cache()`, unless
  NUMBA_CACHE_DIR is set), and the ir_datasets and matplotlib folders ranx's imports write there too
  (`paths.confine_libraries()`). ranx's kernels are `@njit(cache=True)`: compiled once per machine into that
  folder and loaded from it by every later process (docs/performance.md: cold and warm first calls). numba
  picks a function's cache folder when the function is decorated, i.e. when ranx is imported, so the
  variable is set first (and numba's config re-read if numba is already imported).
- `threads(n)`: numba's thread count for a block, restored afterwards (ranx's `evaluate` sets it to 1 for
  good on fewer than 10 queries).
"""

from __future__ import annotations

import contextlib
import sys
import warnings

from evalctl import paths


def load():
    """The ranx module, imported with numba's cache under evalctl's cache."""
    if "ranx" not in sys.modules:
        paths.confine_libraries()
        if "numba" in sys.modules:
            from numba.core import config  # deferred: numba

            config.reload_config()
    from numba.core.errors import NumbaTypeSafetyWarning  # numba: imported once its cache folder is set

    # ranx hashes doc ids (uint64) into float64 arrays, a cast numba flags when it compiles the kernel
    warnings.filterwarnings("ignore", "unsafe cast from uint64 to int64", NumbaTypeSafetyWarning)
    import ranx  # ranx: imported once numba's cache folder is set

    return ranx


@contextlib.contextmanager
def threads(n: int | None = None):
    """numba's parallel loops on `n` threads (None: unchanged) inside the block, as before it afterwards."""
    import numba  # deferred: numba

    before = numba.get_num_threads()
    if n is not None:
        numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)

