"""The per-process memos: registered, copies for callers, one reader at a time, fork-safe."""

from __future__ import annotations

from typing import Any

import pytest

from app.core import memo
from app.services import plan_data
from app.views.curves import data as curves_data


def test_memos_are_registered_and_return_copies(planned: dict[str, Any]) -> None:

    names = memo.memo_names()
    for n in ("app.core.state._get_graph", "app.core.state._get_plan",
              "app.services.plan_data.before_data", "app.services.plan_data.after_data",
              "app.views.curves.data._curves", "app.views.timeline.data._timeline",
              "app.views.layouts.data._layouts", "app.services.selection.members",
              "app.services.view_graph._expanded"):
        assert n in names
    g, pk = planned["graph"]["key"], planned["plan"]
    fig = curves_data.curves_figure(g, pk, "eager", None, None)
    fig.update_layout(title="mutated")
    copy = curves_data.curves_figure(g, pk, "eager", None, None)
    assert copy.layout.title.text != "mutated"
    assert max(copy.data[0].y) > 0  # arrays stay arrays in the copy (not base64 dicts)
    a = plan_data.after_data(g, pk)
    with pytest.raises(ValueError):
        a.curve[0] = 0  # frozen arrays
    assert curves_data._curves.cache_info().currsize >= 1
    memo.clear_caches()
    assert curves_data._curves.cache_info().currsize == 0
    assert plan_data.after_data.cache_info().currsize == 0


def test_memo_copies_one_reader_at_a_time() -> None:
    """The threaded server copies stored figures; plotly objects are not safe to read from
    two threads at once (plotly.py #3441), so a memo's copies never overlap."""
    import threading
    import time


    inside, most = [0], [0]
    guard = threading.Lock()

    def slow_copy(value: list[int]) -> list[int]:
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with guard:
            inside[0] -= 1
        return list(value)

    @memo.memoised(2, copy=slow_copy)
    def stored(n: int) -> list[int]:
        return [n]

    threads = [threading.Thread(target=stored, args=(1,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert stored(1) == [1]


def test_a_job_forked_while_a_copy_runs_can_copy_too() -> None:
    """Background jobs are forked from the threaded server: a child forked while another
    thread holds a memo's copy lock must not inherit it held (it would hang forever)."""
    import os
    import threading
    import time


    release = threading.Event()
    holding = threading.Event()

    def copy(value: list[int]) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            holding.set()
            release.wait(10)
        return list(value)

    @memo.memoised(2, copy=copy)
    def stored(n: int) -> list[int]:
        return [n]

    t = threading.Thread(target=stored, args=(1,))
    t.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the copy lock was held by a thread that does not exist here
        os._exit(0 if stored(1) == [1] else 1)
    deadline = time.monotonic() + 10
    status: int | None = None
    while status is None and time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(code)
        time.sleep(0.02)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    release.set()
    t.join(10)
    assert status == 0, "the forked child hung on (or failed after) the inherited lock"


def test_a_memo_bounded_in_bytes_keeps_under_its_budget() -> None:
    calls: list[int] = []

    @memo.memoised(100, max_bytes=1000, weigh=lambda v: len(v))
    def make(n: int) -> bytes:
        calls.append(n)
        return b"x" * n

    for n in (400, 400, 300, 500):
        make(n)
    assert calls == [400, 300, 500]  # the second 400 was a hit
    assert make.stored_bytes <= 1000  # type: ignore[attr-defined]
    make(5000)  # bigger than the budget: returned, never kept
    assert make.stored_bytes <= 1000  # type: ignore[attr-defined]
    make(500)
    assert calls[-1] == 5000  # 500 still kept
    make.cache_clear()
    assert make.stored_bytes == 0  # type: ignore[attr-defined]


def test_the_key_guard_runs_before_a_memo_hit() -> None:
    seen: list[str] = []

    @memo.memoised(4)
    def f(key: str) -> str:
        return key.upper()

    memo.set_key_guard(seen.append)
    try:
        f("g-1")
        f("g-1")
        f("other")
    finally:
        from app.core import state

        memo.set_key_guard(state._guard_key)
    assert seen == ["g-1", "g-1"]
