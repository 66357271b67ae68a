"""frozen_gc: no collection during a capture, automatic or explicit, and the collector as it was after."""

from __future__ import annotations

import gc
import weakref

import pytest

from accelerate_graph.core.capture import frozen_gc


class Cycle:
    def __init__(self):
        self.me = self


@pytest.mark.parametrize("collect_first", [True, False])
def test_garbage_alive_at_the_start_is_not_collected_inside(collect_first):
    assert gc.isenabled()
    collected = []
    garbage = Cycle()
    watched = weakref.ref(garbage, lambda ref: collected.append(True))
    del garbage  # only its cycle holds it now: garbage a collection would free
    with frozen_gc(collect_first=collect_first):
        assert not gc.isenabled()
        gc.collect()  # even an explicit collection leaves frozen objects alone
        assert collected == ([True] if collect_first else [])
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect()
    assert watched() is None and collected == [True]


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with frozen_gc(collect_first=False):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
