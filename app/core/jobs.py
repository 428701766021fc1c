"""Background-job processes that start clean: Dash's ``DiskcacheManager`` on a fork server.

Dash's manager forks each job straight from the web server.  The server is threaded, and a
child forked from it inherits whatever the other threads held at that instant, SQLite's
per-process lock bookkeeping included.  SQLite forbids carrying open connections across a
fork: a job that then writes to the shared cache can lose its write (measured: the plan a job
stored was missing for the server in 3 of 11 runs of the browser tests) or
find the database "locked".  So jobs are forked from a *fork server* instead: a process
started afresh (``exec``), single-threaded, that has opened no database.  It imports the
app's modules once (:data:`JOB_PRELOAD`), so a job still starts in milliseconds.

A job gets the cache directory of the app that started it (the fork server was started
with the environment of its first user), and imports the ``hooks`` modules first: tests
install their planner doubles that way, since a fork server never sees a test's
monkeypatches.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import diskcache
from dash import DiskcacheManager

from app.core import state

__all__ = ["JOB_PRELOAD", "CleanJobManager", "run_job"]

#: Modules the fork server imports once, so that each job starts warm.
JOB_PRELOAD: tuple[str, ...] = ("app.views.registry", "roam_core.planner")


def run_job(cache_dir: str, hooks: Sequence[str], job_fn: Callable[..., object],
            *args: object) -> object:
    """The job process's entry point: point at the app's cache, import ``hooks``, run."""
    state.configure(cache_dir)
    for name in hooks:
        importlib.import_module(name)
    return job_fn(*args)


class CleanJobManager(DiskcacheManager):
    """A ``DiskcacheManager`` whose job processes are forked from a clean fork server.

    Parameters
    ----------
    cache : diskcache.Cache
        Dash's job cache (results and progress).
    hooks : sequence of str
        Modules every job imports before it runs (for test doubles; empty in production).
    """

    def __init__(self, cache: diskcache.Cache, hooks: Sequence[str] = ()) -> None:
        import multiprocess

        super().__init__(cache)
        self.hooks = tuple(hooks)
        self._ctx = multiprocess.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(JOB_PRELOAD))

    def start(self) -> None:
        """Start the fork server now (else on the first job): its imports take a second."""
        from multiprocess import forkserver

        forkserver.ensure_running()

    def terminate_job(self, job: int) -> None:
        """Dash's, tolerating a process that exits while it is being stopped.

        Dash lists the job's children and then asks each for its start time; a child (or the
        job itself) that ends in between raises ``NoSuchProcess`` out of the poll request,
        which the browser shows as a callback error.  Whatever is left is stopped again.
        """
        import psutil

        for _ in range(3):
            try:
                super().terminate_job(job)
                return
            except psutil.NoSuchProcess:
                continue  # it ended on its own; go again for what remains

    def call_job_fn(self, key: str, job_fn: Callable[..., object], args: object,
                    context: object) -> int:
        """Start one job; returns its pid (Dash cancels a job by killing that pid)."""
        process = self._ctx.Process(
            target=run_job,
            args=(str(state.cache_dir()), self.hooks, job_fn,
                  key, self._make_progress_key(key), args, context),
            daemon=True)  # ended, not waited for, when the server exits
        process.start()
        return int(process.pid)

