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


def install() -> None:
    """Wrap ``app.analysis.planner.run_planner`` in this (job) process."""
    from app.analysis import planner

    real = planner.run_planner
    if getattr(real, "_roam_double", False):
        return

    def slow(graph: Any, settings: Any, progress: Any = None, cancel: Any = None) -> Any:
        return _slow_when_asked(real, graph, settings, progress, cancel)

    slow._roam_double = True  # type: ignore[attr-defined]
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
