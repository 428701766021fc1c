"""The layout's safety limit counts the layout thread's CPU seconds, not the wall clock.

A caller's cancel callable that sleeps stands in for a loaded machine: the layout's thread
waits (wall seconds pass) without spending CPU.  Under a 0.2 s limit, the layout of a small
training step whose sub-task stage checks the callable between its groups is the same as
without the waits; on the wall clock that stage stopped for ``time`` and the arena changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from roam_core.base.cpu_clock import cpu_now
from roam_core.layout.arena_layout import ArenaLayout, plan_arena
from roam_core.layout.config import ArenaConfig
from tests.builders import random_train_graph

LIMIT_S = 0.2


def _sleepy(wait_s: float, calls: list[int]) -> Callable[[], bool]:
    def cancel() -> bool:
        calls.append(1)
        time.sleep(wait_s)
        return False
    return cancel


def _lay_out(wait_s: float) -> tuple[ArenaLayout, int, float]:
    g = random_train_graph(1, 12)  # greedy, promotion, then the CP-SAT sub-task groups
    calls: list[int] = []
    t0 = time.perf_counter()
    lay = plan_arena(g, g.op_ids, config=ArenaConfig(time_limit_s=LIMIT_S, good_enough_bytes=0),
                     cancel=_sleepy(wait_s, calls))
    return lay, len(calls), time.perf_counter() - t0


@pytest.mark.slow
def test_waiting_does_not_count_against_the_layout_limit() -> None:
    quiet, _, _ = _lay_out(0.0)
    loaded, calls, wall_s = _lay_out(0.06)
    assert calls >= 4
    assert wall_s > 2 * LIMIT_S
    stops = [(c.stage, c.stopped) for c in loaded.stats["stages"]]
    assert "layout.roam" in dict(stops), stops  # the stage that checks the callable ran
    assert all(s != "time" for _, s in stops), stops
    assert stops == [(c.stage, c.stopped) for c in quiet.stats["stages"]]
    assert loaded.offsets == quiet.offsets
    assert loaded.arena_bytes == quiet.arena_bytes


def test_the_clock_does_not_count_a_sleep() -> None:
    t = cpu_now()
    time.sleep(0.1)
    assert cpu_now() - t < 0.05
