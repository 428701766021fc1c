"""A slow planner for the browser tests, installed inside the app's job processes.

Jobs are forked from a fork server (``app.core.jobs``) that never sees a test's monkeypatches, so
a test asks for the slow planner through the app's cache instead: :func:`slow_planner`
writes the request, and every job imports :mod:`tests.app.job_hook` (the app server of the
tests passes it as ``job_hooks``), which wraps ``app.analysis.planner.run_planner`` with
:func:`_slow_when_asked`.  Planning on load (no cancel callback) stays the real planner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

KEY = "test-double:slow-planner"
FRONTIER_KEY = "test-double:slow-frontier"
FIT_KEY = "test-double:slow-fit"
HOOK = "tests.app.job_hook"


@contextlib.contextmanager
def slow_planner(delay_s: float, then_real: bool) -> Iterator[None]:
    """While inside, jobs plan slowly: ``delay_s`` of polling the cancel flag, then the real
    planner (``then_real``) or a failure (the job should have been cancelled)."""
    from app.core import state

    state.put_json(KEY, {"delay_s": delay_s, "then_real": then_real})
    try:
        yield
    finally:
        state.put_json(KEY, None)


@contextlib.contextmanager
def slow_frontier(delay_s: float) -> Iterator[None]:
    """While inside, the frontier job waits ``delay_s`` before each of its plans (time for a
    test to press Cancel between plans)."""
    from app.core import state

    state.put_json(FRONTIER_KEY, {"delay_s": delay_s})
    try:
        yield
    finally:
        state.put_json(FRONTIER_KEY, None)


@contextlib.contextmanager
def slow_fit(delay_s: float) -> Iterator[None]:
    """While inside, each What-fits configuration takes ``delay_s`` longer (time for a test
    to press Cancel between configurations)."""
    from app.core import state

    state.put_json(FIT_KEY, {"delay_s": delay_s})
    try:
        yield
    finally:
        state.put_json(FIT_KEY, None)


def _install_slow_fit() -> None:
    """Wrap ``whatfits.fit_row`` so that, when asked, each row takes ``delay_s`` longer."""
    from roam_core.planner import whatfits

    real = whatfits.fit_row
    if getattr(real, "_roam_double", False):
        return

    def slow(*args: Any, **kw: Any) -> Any:
        from app.core import state

        ask = state.get_json(FIT_KEY)
        if ask:
            time.sleep(ask["delay_s"])
        return real(*args, **kw)

    slow._roam_double = True  # type: ignore[attr-defined]  # marks the wrapper
    whatfits.fit_row = slow


def _install_slow_frontier() -> None:
    """Wrap ``recompute_frontier`` so that, when asked, each plan starts ``delay_s`` late."""
    from roam_core.planner import budget_frontier

    real = budget_frontier.recompute_frontier
    if getattr(real, "_roam_double", False):
        return

    def slow(graph: Any, config: Any, **kw: Any) -> Any:
        from app.core import state

        ask = state.get_json(FRONTIER_KEY)
        on_plan = kw.get("on_plan")
        if ask and on_plan is not None:
            def late(g: Any) -> None:
                on_plan(g)
                time.sleep(ask["delay_s"])
            kw["on_plan"] = late
        return real(graph, config, **kw)

    slow._roam_double = True  # type: ignore[attr-defined]  # marks the wrapper
    budget_frontier.recompute_frontier = slow


def install() -> None:
    """Wrap ``app.analysis.planner.run_planner`` (and the frontier) in this (job) process."""
    from app.analysis import planner

    _install_slow_frontier()
    _install_slow_fit()
    real = planner.run_planner
    if getattr(real, "_roam_double", False):
        return

    def slow(graph: Any, settings: Any, progress: Any = None, cancel: Any = None) -> Any:
        return _slow_when_asked(real, graph, settings, progress, cancel)

    slow._roam_double = True  # type: ignore[attr-defined]  # marks the wrapper
    planner.run_planner = slow


def _slow_when_asked(real: Any, graph: Any, settings: Any, progress: Any,
                     cancel: Any) -> Any:
    from app.core import state
    from roam_core.planner import PlanProgress

    ask = state.get_json(KEY)
    if not ask or cancel is None:  # not asked, or planned on load (not by the Plan button)
        return real(graph, settings, progress, cancel)
    if progress:
        progress(PlanProgress("order", 0, 3, None, "slow test planner"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < ask["delay_s"]:
        if cancel():  # what make_plan does between sub-tasks
            return real(graph, dataclasses.replace(settings, method="eager"))
        time.sleep(0.05)
    if not ask["then_real"]:
        raise AssertionError("the job should have been cancelled")
    return real(graph, settings, progress, cancel)


def record_job(result_key: str, progress_key: str, args: Any, context: Any) -> None:
    """A job function (Dash's job signature) that writes what its process looks like to the
    app's cache under ``args["key"]``: for tests of :mod:`app.core.jobs`."""
    import os

    from app.analysis import planner
    from app.core import state

    state.put_json(args["key"], {
        "pid": os.getpid(), "ppid": os.getppid(), "cache_dir": str(state.cache_dir()),
        "hooked": bool(getattr(planner.run_planner, "_roam_double", False))})
