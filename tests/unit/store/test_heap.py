"""Objects alive once a service has started are frozen: later full collections skip them."""

from __future__ import annotations

import gc
import weakref

from shared import heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection frees it


def test_what_is_alive_at_startup_is_left_out_of_later_collections() -> None:
    kept = [[index] for index in range(1000)]  # containers: the collector tracks them
    gc.disable()  # no automatic collection may free the garbage before freeze_startup does
    try:
        left_behind = weakref.ref(_Node())  # garbage of starting: freed, never frozen
        assert left_behind() is not None
        frozen = heap.freeze_startup()
        assert left_behind() is None
        assert frozen >= len(kept)
        later = {id(o) for o in gc.get_objects(generation=2)}
        assert not any(id(k) in later for k in kept)
        made_after = [[0]]
        gc.collect()
        # What is allocated later is collected as usual: it reached the oldest generation.
        assert id(made_after[0]) in {id(o) for o in gc.get_objects(generation=2)}
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
        gc.enable()
