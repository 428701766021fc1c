"""Where the planner's independent solves run: ``--executor local|dask-local[:N]|dask://HOST:PORT``.

:func:`~roam_core.planner.make_plan` takes any ``concurrent.futures.Executor`` for its
sub-task solves.  This module turns the ``--executor`` text of ``roam plan`` / ``roam bench``
into one:

* ``local`` (the default): no executor; the planner uses its own process pool of
  ``PlannerConfig.workers`` (one per CPU; ``1`` solves in-process).
* ``dask-local`` or ``dask-local:N``: a Dask ``LocalCluster`` on 127.0.0.1 with ``N`` worker
  processes (default: one per CPU), stopped when the ``with`` block ends.
* ``dask://HOST:PORT`` (or ``tcp://HOST:PORT``): a ``distributed.Client`` connected to an
  existing scheduler; ``Client.get_executor()`` is the executor.  The workers need the same
  version of roam installed (they import :mod:`roam_core.ordering.order_ilp`).

What goes over the wire is plain data only: each task is one
:class:`~roam_core.ordering.order_problem.OrderProblem` (op ids, local predecessor lists,
storage sizes, solver settings) and its :class:`~roam_core.ordering.order_problem.OrderResult`
(the new orders).  The CP-SAT model is built and solved inside the worker (OR-Tools objects do
not pickle).  Each solve is deterministic (one search worker, fixed seed, deterministic time
limit), so a fixed seed gives the same plan on the local pool and on any cluster.

Threads: CP-SAT threads per solve x concurrent solves must not exceed a worker's cores.  A
``dask-local`` cluster gets ``threads_per_worker = cores per worker // cpsat_threads``; on a
remote cluster the workers' ``nthreads`` are compared with their cores and, where they would
oversubscribe, the number of solves in flight is bounded (and a warning logged: start the
workers with ``dask worker --nthreads CORES/THREADS``).

Dask is imported lazily: only the ``dask`` executors need ``pip install -e ".[dask]"``.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from roam_core.base.errors import ConfigError

__all__ = ["EXECUTOR_HELP", "ExecutorSpec", "open_executor", "parse_executor"]

_logger = logging.getLogger(__name__)

EXECUTOR_HELP = ("where sub-task solves run: 'local' (the default: a local process pool of "
                 "--workers), 'dask-local[:N]' (a Dask LocalCluster of N worker processes) or "
                 "'dask://HOST:PORT' (an existing Dask scheduler)")


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """A parsed ``--executor`` value.

    Parameters
    ----------
    kind : str
        ``"local"``, ``"dask-local"`` or ``"dask"``.
    num_workers : int or None
        ``dask-local`` worker processes (``None``: one per CPU).
    address : str or None
        ``dask``: the scheduler address, ``tcp://HOST:PORT``.
    """

    kind: str
    num_workers: int | None = None
    address: str | None = None


def parse_executor(text: str) -> ExecutorSpec:
    """Parse ``local``, ``dask-local``, ``dask-local:N``, ``dask://HOST:PORT``, ``tcp://...``.

    Raises
    ------
    ConfigError
        For any other text.

    Examples
    --------
    >>> parse_executor("dask-local:2")
    ExecutorSpec(kind='dask-local', num_workers=2, address=None)
    >>> parse_executor("dask://10.0.0.5:8786").address
    'tcp://10.0.0.5:8786'
    """
    t = text.strip()
    if t == "local":
        return ExecutorSpec("local")
    if t == "dask-local" or t.startswith("dask-local:"):
        n_text = t.partition(":")[2]
        if not n_text:
            return ExecutorSpec("dask-local")
        try:
            n = int(n_text)
        except ValueError:
            n = 0
        if n < 1:
            raise ConfigError(f"--executor {text!r}: the worker count after 'dask-local:' "
                              "must be a positive integer")
        return ExecutorSpec("dask-local", num_workers=n)
    for prefix in ("dask://", "tcp://"):
        if t.startswith(prefix):
            host, sep, port = t[len(prefix):].rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"--executor {text!r}: expected {prefix}HOST:PORT")
            return ExecutorSpec("dask", address=f"tcp://{host}:{port}")
    raise ConfigError(f"--executor {text!r}: expected 'local', 'dask-local[:N]' or "
                      "'dask://HOST:PORT'")


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as e:
        raise ConfigError("the dask executors need Dask distributed: "
                          "pip install -e \".[dask]\"") from e
    return distributed


class _BoundedExecutor(cf.Executor):
    """Forward submissions to ``inner`` with at most ``max_in_flight`` running at once.

    Futures handed out are plain ``concurrent.futures.Future`` objects: cancelling one that
    is still queued here never ships it.
    """

    def __init__(self, inner: cf.Executor, max_in_flight: int) -> None:
        self._inner = inner
        self._max = max(1, max_in_flight)
        self._lock = threading.Lock()
        self._queue: deque[tuple[cf.Future[Any], Callable[..., Any], tuple[Any, ...],
                                 dict[str, Any]]] = deque()
        self._in_flight = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        outer: cf.Future[Any] = cf.Future()
        with self._lock:
            self._queue.append((outer, fn, args, kwargs))
        self._pump()
        return outer

    def _pump(self) -> None:
        while True:
            with self._lock:
                if self._in_flight >= self._max or not self._queue:
                    return
                outer, fn, args, kwargs = self._queue.popleft()
                if not outer.set_running_or_notify_cancel():
                    continue  # cancelled while queued
                self._in_flight += 1
            inner = self._inner.submit(fn, *args, **kwargs)
            inner.add_done_callback(functools.partial(self._done, outer=outer))

    def _done(self, inner: cf.Future[Any], outer: cf.Future[Any]) -> None:
        with self._lock:
            self._in_flight -= 1
        if inner.cancelled():
            outer.set_exception(cf.CancelledError())
        elif inner.exception() is not None:
            outer.set_exception(inner.exception())
        else:
            outer.set_result(inner.result())
        self._pump()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                queued = list(self._queue)
                self._queue.clear()
            for outer, *_ in queued:
                outer.cancel()


def _remote_in_flight_cap(client: Any, cpsat_threads: int) -> int | None:
    """A cap on solves in flight when a remote cluster would oversubscribe its cores."""
    nthreads = client.nthreads()
    if not nthreads:
        raise ConfigError(f"the Dask scheduler at {client.scheduler.address} has no workers")
    cores = client.run(os.cpu_count)
    cap = 0
    over = []
    for addr, n in nthreads.items():
        c = int(cores.get(addr) or n)
        fit = max(1, c // cpsat_threads)
        cap += min(int(n), fit)
        if int(n) * cpsat_threads > c:
            over.append(addr)
    if not over:
        return None
    _logger.warning("%d Dask worker(s) run more threads than their cores allow for %d CP-SAT "
                    "threads per solve; bounding solves in flight to %d (start the workers "
                    "with dask worker --nthreads CORES/%d)", len(over), cpsat_threads, cap,
                    cpsat_threads)
    return cap


@contextlib.contextmanager
def open_executor(spec: ExecutorSpec | str, *, cpsat_threads: int = 1) -> Iterator[
        cf.Executor | None]:
    """The executor of ``spec`` for the duration of a ``with`` block.

    Parameters
    ----------
    spec : ExecutorSpec or str
        Parsed or raw ``--executor`` value.
    cpsat_threads : int
        CP-SAT search workers per solve (``OrderSolverConfig.num_search_workers``).

    Yields
    ------
    concurrent.futures.Executor or None
        ``None`` for ``local`` (the planner's own pool).

    Raises
    ------
    ConfigError
        For a bad spec, Dask not installed, or a scheduler that cannot be reached.
    """
    if isinstance(spec, str):
        spec = parse_executor(spec)
    t = max(1, int(cpsat_threads))
    if spec.kind == "local":
        yield None
        return
    distributed = _import_distributed()
    if spec.kind == "dask-local":
        cores = os.cpu_count() or 1
        n = spec.num_workers or cores
        per_worker = max(1, cores // n)
        threads = max(1, per_worker // t)
        # a private cluster's start/stop chatter (INFO) is not the user's business
        dlog = logging.getLogger("distributed")
        level = dlog.level
        dlog.setLevel(max(level, logging.WARNING))
        try:
            cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=threads, processes=True, host="127.0.0.1",
                dashboard_address="127.0.0.1:0", silence_logs=logging.WARNING)
            try:
                client = distributed.Client(cluster)
                try:
                    yield client.get_executor()
                finally:
                    client.close()
            finally:
                cluster.close()
        finally:
            dlog.setLevel(level)
        return
    try:
        client = distributed.Client(spec.address, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {spec.address}: {e}") from e
    try:
        cap = _remote_in_flight_cap(client, t)
        ex: cf.Executor = client.get_executor()
        if cap is not None:
            ex = _BoundedExecutor(ex, cap)
        yield ex
    finally:
        client.close()
