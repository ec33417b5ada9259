"""long_lived_frozen: objects alive on entry stay out of collections until the last exit; garbage made
inside is still collected; afterwards old garbage cycles are collected again."""

import gc
import weakref

from evalctl.gc_tuning import long_lived_frozen


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_objects_alive_on_entry_are_left_out_until_the_last_exit():
    old = Node()
    gone = weakref.ref(old)
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
        with long_lived_frozen():  # nested: the inner exit must not unfreeze
            pass
        assert gc.get_freeze_count() > 0
        del old
        gc.collect()
        assert gone() is not None  # frozen: a full collection skips it
        young = Node()
        young_ref = weakref.ref(young)
        del young
        gc.collect()
        assert young_ref() is None  # made inside: collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None  # back in the collected heap: a model dropped after the loop is freed


def test_an_error_inside_still_unfreezes():
    try:
        with long_lived_frozen():
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_heap_the_program_froze_itself_stays_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with long_lived_frozen():
            pass
        # Other threads of the test session (servers of earlier tests) may free a few frozen objects
        # meanwhile, so the count can shrink by those; an unfreeze would have emptied it.
        assert frozen - 1000 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_thaw_ends_the_freeze_inside_the_block():
    from evalctl.gc_tuning import thaw

    old = Node()
    gone = weakref.ref(old)
    with long_lived_frozen():
        del old
        thaw()  # before dropping something large
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0
    thaw()  # outside a block: nothing to do
