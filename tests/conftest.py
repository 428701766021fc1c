"""Shared pytest set-up: the hypothesis profile used by every property test, and the
``minimalloc`` fixture (the MiniMalloc CSVs of the shared DSA data, or a skip).

The session also reaps what tests leave running: a background-job process of the app
that never ended would otherwise hold the interpreter at exit (``multiprocess`` joins its
children there), and CI would stall instead of failing.

``deadline=None`` (CI machines are slow and shared); ``max_examples`` comes from the
environment variable ``HYPOTHESIS_MAX_EXAMPLES`` (default 30) so a long soak run is one
``HYPOTHESIS_MAX_EXAMPLES=1000 pytest ...`` away.  The suite draws the same examples on every
run (``derandomize``), so a stop's CI cannot fail on a case no earlier run drew; a soak that
searches new cases sets ``HYPOTHESIS_RANDOM=1`` (docs/testing.md), and what it finds becomes
a fixed regression test.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.builders import shared_data_dir
from tests.schedule import longest_first

settings.register_profile(
    "roam",
    deadline=None,
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "30")),
    derandomize=os.environ.get("HYPOTHESIS_RANDOM", "0") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("roam")


def worker_threads(workers: int, cores: int) -> int:
    """Intra-op threads for each of ``workers`` test processes sharing ``cores``: the cores
    shared out, at least one."""
    return max(1, cores // max(1, workers))


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker, torch (and the processes the tests start) get a share of the cores,
    not one thread per core each: two workers with two OpenMP threads each on two cores spin
    for each other, which made a zoo replay take 4x the CPU seconds (docs/testing.md).
    Inductor compiles in the worker rather than in a pool of processes that each import torch.
    An ``OMP_NUM_THREADS`` set by the user is kept."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or "OMP_NUM_THREADS" in os.environ:
        return
    threads = worker_threads(int(workers), len(os.sched_getaffinity(0)))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full-matrix", action="store_true",
                     help="also run the full_matrix tests (./dev.sh matrix)")


def full_matrix(config: pytest.Config) -> bool:
    """Whether this session runs the full matrices (``--full-matrix``)."""
    return bool(config.getoption("--full-matrix"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the longest files first (:mod:`tests.schedule`).  ``full_matrix``
    tests (the rest of a matrix the suite samples: every fuzz case through
    every command, every Hugging Face family at both batch sizes, the property soak) run
    only with ``--full-matrix``: deselected, not skipped, otherwise, so that the tiers' ``-m``
    expressions need not name them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the workers take the files in
        items[:] = longest_first(items)
    if full_matrix(config):
        return
    keep = [i for i in items if i.get_closest_marker("full_matrix") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


@pytest.fixture(scope="session")
def minimalloc() -> Path:
    """The folder of MiniMalloc's CSV instances (``<repo>/../shared/dsa/minimalloc``, see
    :func:`tests.builders.shared_data_dir`); the test is skipped when it is absent."""
    found = shared_data_dir("dsa/minimalloc")
    if found is None:
        pytest.skip("MiniMalloc CSVs not found: put the shared data at <repo>/../shared/dsa "
                    "(or set ROAM_SHARED_DIR)")
    return found


#: Seconds stray child processes get to end on their own at the end of the session.
REAP_GRACE_S = 5.0
#: Long-lived helpers that are expected to outlive the tests (the app's job fork server and
#: multiprocess's resource tracker): killed too, but not reported.
EXPECTED = ("multiprocess.forkserver", "multiprocess.resource_tracker",
            "multiprocessing.forkserver", "multiprocessing.resource_tracker")


def reap_children(grace_s: float = REAP_GRACE_S) -> list[str]:
    """Kill every process this one started that is still running after ``grace_s``;
    returns their command lines (for the warning)."""
    import psutil

    def expected(proc: psutil.Process) -> bool:
        try:
            return any(e in " ".join(proc.cmdline()) for e in EXPECTED)
        except psutil.NoSuchProcess:
            return True

    me = psutil.Process()
    children = me.children(recursive=True)
    # the helpers never end on their own: waiting the grace for them cost every session 5 s
    helpers = [p for p in children if expected(p)]
    _, alive = psutil.wait_procs([p for p in children if p not in helpers], timeout=grace_s)
    names = []
    for proc in [*alive, *helpers]:
        try:
            if proc not in helpers:
                names.append(f"{proc.pid}: {' '.join(proc.cmdline())[:120]}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([*alive, *helpers], timeout=grace_s)
    return names


@pytest.fixture(scope="session", autouse=True)
def _reap_stray_processes() -> Iterator[None]:
    """Set up first, torn down last: after every other fixture (the browser, the served app)
    has closed, kill the processes still running, and say which."""
    yield
    stray = reap_children()
    if stray:
        warnings.warn(f"killed {len(stray)} process(es) the tests left running: {stray}",
                      stacklevel=1)
