"""Shared CP-SAT plumbing: solver parameters, status names, early stop and cancellation.

Private to roam_core.  Solver modules build a ``cp_model.CpModel``, call
:func:`make_solver` with their settings, run :func:`solve_with_stop` and map the status with
:func:`status_name`.  Statuses are
:class:`~roam_core.base.status.SolveStatus` members: CP-SAT's ``OPTIMAL``, ``FEASIBLE``,
``INFEASIBLE``, ``UNKNOWN`` (time out without a solution) and ``INVALID``; callers add
``CANCELLED``, ``HINT`` (kept the warm start) and the others.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

__all__ = [
    "SolveOutcome",
    "make_solver",
    "solve_with_stop",
    "status_name",
]

from roam_core.base.cancel import CancelFlag
from roam_core.base.status import SolveStatus

_logger = logging.getLogger(__name__)


_STATUS: dict[cp_model.CpSolverStatus, SolveStatus] = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.MODEL_INVALID: SolveStatus.INVALID,
    cp_model.UNKNOWN: SolveStatus.UNKNOWN,
}


def status_name(status: cp_model.CpSolverStatus) -> SolveStatus:
    """The :class:`SolveStatus` of a CP-SAT status code (a ``str``: its lowercase name).

    Examples
    --------
    >>> status_name(cp_model.OPTIMAL), status_name(cp_model.UNKNOWN)
    (<SolveStatus.OPTIMAL: 'optimal'>, <SolveStatus.UNKNOWN: 'unknown'>)
    """
    return _STATUS.get(status, SolveStatus.UNKNOWN)


def make_solver(
    *,
    time_limit_s: float,
    num_workers: int = 1,
    random_seed: int = 0,
    deterministic: bool = True,
    wall_slack: float = 4.0,
    relative_gap: float = 0.0,
    log_search: bool = False,
) -> cp_model.CpSolver:
    """A ``CpSolver`` with roam's parameter conventions.

    With ``deterministic`` the search is bounded by CP-SAT's deterministic time
    (``max_deterministic_time = time_limit_s``) so the result does not depend on the machine's
    speed; the wall limit is then ``wall_slack * time_limit_s`` as a safety net.  One worker
    and a fixed seed make the search itself reproducible.
    """
    solver = cp_model.CpSolver()
    p = solver.parameters
    limit = max(0.01, float(time_limit_s))
    if deterministic:
        p.max_deterministic_time = limit
        p.max_time_in_seconds = max(limit * wall_slack, limit + 1.0)
    else:
        p.max_time_in_seconds = limit
    p.num_workers = max(1, int(num_workers))
    p.random_seed = int(random_seed)
    if relative_gap > 0:
        p.relative_gap_limit = float(relative_gap)
    p.log_search_progress = bool(log_search)
    return solver


class _StopCallback(cp_model.CpSolverSolutionCallback):
    """Stops the search when the objective reaches ``target`` or ``cancel()`` says so."""

    def __init__(self, target: int | None, cancel: CancelFlag | None) -> None:
        super().__init__()
        self._target = target
        self._cancel = cancel
        self.solutions = 0
        self.reached_target = False

    def on_solution_callback(self) -> None:
        self.solutions += 1
        if self._target is not None and self.objective_value <= self._target:
            self.reached_target = True
            self.stop_search()
        elif self._cancel is not None and self._cancel():
            self.stop_search()


@dataclass(frozen=True, slots=True)
class SolveOutcome:
    """What :func:`solve_with_stop` observed."""

    status: SolveStatus
    wall_time_s: float
    reached_target: bool
    cancelled: bool
    objective: float | None
    best_bound: float | None


def solve_with_stop(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    *,
    target: int | None = None,
    cancel: CancelFlag | None = None,
    poll_s: float = 0.05,
) -> SolveOutcome:
    """Solve ``model``, stopping early at ``target`` or on cancellation.

    Cancellation is checked on every new solution and, in a watcher thread, every ``poll_s``
    seconds (``stop_search`` is thread-safe), so a long proof stops promptly too.
    """
    cb = _StopCallback(target, cancel)
    done = threading.Event()
    cancelled = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if cancel is not None and cancel():
                cancelled.set()
                solver.stop_search()
                return

    watcher = None
    if cancel is not None:
        watcher = threading.Thread(target=watch, name="roam-cpsat-cancel", daemon=True)
        watcher.start()
    t0 = time.perf_counter()
    try:
        status = solver.solve(model, cb)
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
    wall = time.perf_counter() - t0
    name = status_name(status)
    has = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    was_cancelled = cancelled.is_set() or (cancel is not None and cancel())
    return SolveOutcome(
        status=name,
        wall_time_s=wall,
        reached_target=cb.reached_target,
        cancelled=was_cancelled and name != SolveStatus.OPTIMAL,
        objective=solver.objective_value if has else None,
        best_bound=solver.best_objective_bound if has else None,
    )


