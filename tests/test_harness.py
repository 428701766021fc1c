"""The test harness itself: stray processes are reaped at the end of the session, the
longest files go first, the workers share the cores."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest

from tests.conftest import reap_children, worker_threads
from tests.paths import REPO
from tests.schedule import LONGEST_FIRST, longest_first


def test_reap_children_kills_what_is_still_running_and_names_it() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    names = reap_children(grace_s=0.2)
    assert any(n.startswith(f"{proc.pid}:") and "time.sleep(600)" in n for n in names)
    assert not psutil.pid_exists(proc.pid)  # killed and reaped
    assert not any(str(done.pid) in n for n in names)


def test_the_longest_files_exist_once_and_go_first() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    for f in LONGEST_FIRST:
        assert (REPO / f).is_file(), f"{f} is gone: update tests/schedule.py"
    items = [SimpleNamespace(nodeid=n) for n in (
        "tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "roam_core/c.py::roam_core.c",
        "tests/d.py::t[1]", "tests/b.py::t2", "tests/d.py::t[2]")]
    got = longest_first(items, ("tests/d.py", "tests/b.py"))  # type: ignore[arg-type]
    assert [i.nodeid for i in got] == [
        "tests/d.py::t[1]", "tests/d.py::t[2]", "tests/b.py::t1", "tests/b.py::t2",
        "tests/a.py::t1", "tests/a.py::t2", "roam_core/c.py::roam_core.c"]


def test_workers_share_the_cores() -> None:
    assert worker_threads(2, 2) == 1
    assert worker_threads(4, 2) == 1
    assert worker_threads(4, 16) == 4
    assert worker_threads(0, 3) == 3
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("not in an xdist worker: torch keeps its own thread count")
    import torch

    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
