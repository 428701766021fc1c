"""The garbage collector's pause around tracing, loading and planning."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from roam_core.base.collector import gc_paused
from roam_core.base.errors import ConfigError
from roam_core.formats.graph_io import dumps_graph, loads_graph
from roam_core.model.samples import tiny_train_step
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.enable()


def test_nested_pauses_restore_only_at_the_outermost_exit() -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_restores_the_collector() -> None:
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_callers_own_pause_is_left_alone() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_end_with_the_last_one() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with gc_paused():
            first_in.set()
            second_in.wait(5)
        seen["after first"] = gc.isenabled()  # the second thread still pauses it
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with gc_paused():
            second_in.set()
            first_out.wait(5)
        seen["after second"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after first": False, "after second": True}


def test_planning_and_loading_run_with_the_collector_paused() -> None:
    seen: list[bool] = []
    make_plan(tiny_train_step(), PlannerConfig(workers=1, solve_layout=False),
              progress=lambda p: seen.append(gc.isenabled()))
    assert seen
    assert not any(seen)
    assert gc.isenabled()
    with pytest.raises(ConfigError):  # an error restores it too
        make_plan(tiny_train_step(), PlannerConfig(workers=1), method="no such method")
    assert gc.isenabled()
    g = loads_graph(dumps_graph(tiny_train_step(), compress=True))
    assert g.fingerprint() == tiny_train_step().fingerprint()
    assert gc.isenabled()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector can free it


@pytest.mark.slow
def test_survivors_are_promoted_only_when_asked() -> None:
    """With ``promote_survivors`` what was allocated inside is in the oldest generation on
    exit (no young collection walks it); without it, it is still young.  Cyclic garbage is
    freed by a full collection either way."""
    gc.collect()
    with gc_paused():
        kept = [_Node() for _ in range(3)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert id(kept[0]) in young
    with gc_paused(promote_survivors=True):
        promoted = [_Node() for _ in range(3)]
        with gc_paused():  # nested, not asking: the outer pause's wish stands
            inner = _Node()
    assert gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert {id(o) for o in (*promoted, inner)} <= oldest
    assert not {id(o) for o in promoted} & {id(o) for o in gc.get_objects(generation=0)}
    with gc_paused():  # the wish does not outlive the pause that made it
        later = _Node()
    assert id(later) in {id(o) for o in gc.get_objects(generation=0)}
    del promoted, inner
    assert gc.collect() >= 4  # the promoted cycles are still garbage to a full collection


@pytest.mark.slow
def test_a_plan_leaves_nothing_for_the_next_young_collection() -> None:
    """The planner promotes what it keeps and makes no cyclic garbage (a recursive closure
    in the task tree's summary held the tree, the graph and two position maps).

    Measured in a fresh interpreter: ``gc.collect()`` counts the whole process's garbage,
    and in a test worker that ran other files, their background threads (a served app, a
    Dask client) make some of their own while the plan runs."""
    code = ("import gc\n"
            "from roam_core.model.samples import tiny_train_step\n"
            "from roam_core.planner import make_plan\n"
            "from roam_core.planner.config import PlannerConfig\n"
            "gc.collect()\n"
            "make_plan(tiny_train_step(), PlannerConfig(workers=1))\n"
            "print(gc.get_count()[0], gc.collect())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3], timeout=300)
    young, collected = (int(x) for x in out.stdout.split())
    assert young < 50
    assert collected == 0
