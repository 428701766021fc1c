"""The test harness itself: stray processes are reaped at the end of the session."""

from __future__ import annotations

import subprocess
import sys

import psutil

from tests.conftest import reap_children


def test_reap_children_kills_what_is_still_running_and_names_it() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    names = reap_children(grace_s=0.2)
    assert any(n.startswith(f"{proc.pid}:") and "time.sleep(600)" in n for n in names)
    assert not psutil.pid_exists(proc.pid)  # killed and reaped
    assert not any(str(done.pid) in n for n in names)
