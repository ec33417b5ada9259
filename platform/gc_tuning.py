"""Keep Python's cyclic garbage collector off the long-lived heap during hot loops.

Once torch and a model are loaded a process holds about half a million tracked objects that live
until it exits. A loop that creates many objects (a corpus pass builds ~17 claim objects per patent)
triggers full collections, and each rescans all of them: 0.3-0.4 s of a 3.8 s index load here.
Inside `long_lived_frozen()` the objects that existed on entry are left out of collections
(gc.freeze); new objects are collected as usual, and on exit the old ones rejoin the collected heap
(gc.unfreeze), so a model dropped later is still freed. Code that drops a model inside such a block calls
`thaw()` first (the encoder's model cache does, when it evicts). Used around index loads, vector read-back,
retrieval runs and the classification and clustering tasks (in a cold quickstart, retrieval, read-back and
clustering had 6 of its 23 full collections, 2.3 of 4.5 s; most others fall in model loading, fine-tuning
and corpus import, which this does not cover).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_froze = False  # whether the outermost use froze (it does not when the host program had frozen already)


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Freeze the heap as it is now for the duration; nested and concurrent uses unfreeze once, at the
    last exit. A heap the program froze itself (before forking workers, say) is left as it is."""
    global _depth, _froze
    with _lock:
        if _depth == 0:
            _froze = gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _froze:
                gc.unfreeze()


def thaw() -> None:
    """End the freeze early, before dropping something large (a model) inside a frozen block: frozen, it
    would stay in memory until the block ends (a load that encodes can take hours)."""
    global _froze
    with _lock:
        if _depth and _froze:
            gc.unfreeze()
            _froze = False
