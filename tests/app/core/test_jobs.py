"""Background jobs start from a clean fork server (``app.core.jobs``), never from the server."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import diskcache
import psutil
import pytest

from app.core import state
from app.core.jobs import CleanJobManager
from tests.app.job_doubles import HOOK, record_job


def _wait_for(key: str, timeout_s: float = 60.0) -> dict | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = state.get_json(key)
        if got is not None:
            return got
        time.sleep(0.05)
    return None


@pytest.mark.slow
def test_jobs_started_while_threads_use_the_cache_all_land(cache_dir: Path,
                                                           tmp_path: Path) -> None:
    """Six jobs started from six threads while three more threads read and write the cache
    (a served page polling): every job's write is visible to the server, each job ran in a
    child of the fork server with the app's cache directory and the test hooks."""
    manager = CleanJobManager(diskcache.Cache(str(tmp_path / "jobs")), hooks=(HOOK,))
    manager.start()
    stop = threading.Event()

    def poll() -> None:
        n = 0
        while not stop.is_set():
            state.put_json(f"poll-{n % 7}", n)
            state.get_json("poll-0")
            n += 1

    pollers = [threading.Thread(target=poll, daemon=True) for _ in range(3)]
    for t in pollers:
        t.start()
    pids: list[int] = []
    starters = [threading.Thread(target=lambda i=i: pids.append(
        manager.call_job_fn(f"r{i}", record_job, {"key": f"job-{i}"}, {}))) for i in range(6)]
    try:
        for t in starters:
            t.start()
        for t in starters:
            t.join(30)
        seen = {i: _wait_for(f"job-{i}") for i in range(6)}
    finally:
        stop.set()
        for t in pollers:
            t.join(10)
        for pid in pids:
            if psutil.pid_exists(pid):
                manager.terminate_job(pid)
    assert len(pids) == 6
    missing = [i for i, v in seen.items() if v is None]
    assert not missing, f"jobs {missing} wrote nothing the server can see"
    for v in seen.values():
        assert v["ppid"] != os.getpid()  # forked by the fork server, not by this process
        assert v["cache_dir"] == str(cache_dir)
        assert v["hooked"]


def test_stopping_a_job_that_exits_meanwhile_is_not_an_error(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dash's terminate_job raises NoSuchProcess when a child exits while it lists them
    (seen on a loaded CI machine as a 500 on the poll request); the manager goes again."""
    from dash import DiskcacheManager

    calls: list[int] = []

    def flaky(self: DiskcacheManager, job: int) -> None:
        calls.append(job)
        if len(calls) == 1:
            raise psutil.NoSuchProcess(job)

    monkeypatch.setattr(DiskcacheManager, "terminate_job", flaky)
    mgr = CleanJobManager(diskcache.Cache(str(cache_dir / "jobs")))
    mgr.terminate_job(12345)
    assert calls == [12345, 12345]
    # a real pid that is gone: nothing raised
    monkeypatch.undo()
    p = psutil.Popen(["true"])
    p.wait()
    mgr.terminate_job(p.pid)
