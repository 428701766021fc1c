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
import weakref
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
    linearization_level: int | None = None,
    cpu_guard: bool = False,
) -> cp_model.CpSolver:
    """A ``CpSolver`` with roam's parameter conventions.

    With ``deterministic`` the search is bounded by CP-SAT's deterministic time
    (``max_deterministic_time = time_limit_s``) so the result does not depend on the machine's
    speed; the wall limit is then ``wall_slack * time_limit_s`` as a safety net.  One worker
    and a fixed seed make the search itself reproducible.  ``linearization_level`` (CP-SAT's
    default when ``None``) sets how much of the model goes into the LP relaxation (0: none).

    ``cpu_guard`` (deterministic, one worker): the safety net is CPU time instead, which
    does not grow with the machine's load: :func:`solve_with_stop` stops the search once its
    thread has spent ``wall_slack * time_limit_s`` CPU seconds, and the wall limit becomes
    ``wall_slack`` times that, only for a solve the machine starves.
    """
    solver = cp_model.CpSolver()
    p = solver.parameters
    limit = max(0.01, float(time_limit_s))
    guarded = cpu_guard and deterministic and num_workers <= 1
    if deterministic:
        p.max_deterministic_time = limit
        p.max_time_in_seconds = max(limit * wall_slack * (wall_slack if guarded else 1.0),
                                    limit + 1.0)
    else:
        p.max_time_in_seconds = limit
    p.num_workers = max(1, int(num_workers))
    p.random_seed = int(random_seed)
    if relative_gap > 0:
        p.relative_gap_limit = float(relative_gap)
    p.log_search_progress = bool(log_search)
    if linearization_level is not None:
        p.linearization_level = int(linearization_level)
    if guarded:
        _CPU_LIMITS[solver] = limit * wall_slack
    return solver


#: The CPU-time safety limit of each solver made with ``cpu_guard`` (read by
#: :func:`solve_with_stop`).
_CPU_LIMITS: weakref.WeakKeyDictionary[cp_model.CpSolver, float] = weakref.WeakKeyDictionary()


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
    """What :func:`solve_with_stop` observed.

    ``stopped`` says why the search ended: ``"done"`` (optimal or infeasible),
    ``"at_bound"`` (reached its target), ``"work"`` (its deterministic limit),
    ``"time"`` (the CPU or the wall safety limit) or ``"cancelled"``;
    ``deterministic_time_s`` is CP-SAT's deterministic seconds spent.
    """

    status: SolveStatus
    wall_time_s: float
    reached_target: bool
    cancelled: bool
    objective: float | None
    best_bound: float | None
    stopped: str = "done"
    deterministic_time_s: float = 0.0


def solve_with_stop(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    *,
    target: int | None = None,
    cancel: CancelFlag | None = None,
    poll_s: float = 0.05,
    cpu_limit_s: float | None = None,
) -> SolveOutcome:
    """Solve ``model``, stopping early at ``target``, on cancellation or at ``cpu_limit_s``.

    Cancellation is checked on every new solution and, in a watcher thread, every ``poll_s``
    seconds (``stop_search`` is thread-safe), so a long proof stops promptly too.  The same
    thread stops a search whose thread has spent ``cpu_limit_s`` CPU seconds (default: the
    one :func:`make_solver` set with ``cpu_guard``): a safety limit that, unlike the wall
    clock, does not grow with the machine's load (one worker solves in the calling thread).
    """
    if cpu_limit_s is None:
        cpu_limit_s = _CPU_LIMITS.get(solver)
    cb = _StopCallback(target, cancel)
    done = threading.Event()
    cancelled = threading.Event()
    over_cpu = threading.Event()
    clock = time.pthread_getcpuclockid(threading.get_ident()) if cpu_limit_s else None
    cpu0 = time.clock_gettime(clock) if clock is not None else 0.0

    def watch() -> None:
        while not done.wait(poll_s):
            if cancel is not None and cancel():
                cancelled.set()
                solver.stop_search()
                return
            if clock is not None and cpu_limit_s is not None and (
                    time.clock_gettime(clock) - cpu0 > cpu_limit_s):
                over_cpu.set()
                solver.stop_search()
                return

    watcher = None
    if cancel is not None or clock is not None:
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
    det = float(solver.deterministic_time)
    return SolveOutcome(
        status=name,
        wall_time_s=wall,
        reached_target=cb.reached_target,
        cancelled=was_cancelled and name != SolveStatus.OPTIMAL,
        objective=solver.objective_value if has else None,
        best_bound=solver.best_objective_bound if has else None,
        stopped=_stop_reason(solver, name, cb.reached_target, was_cancelled,
                             over_cpu.is_set(), det),
        deterministic_time_s=det,
    )


def _stop_reason(solver: cp_model.CpSolver, status: SolveStatus, reached_target: bool,
                 cancelled: bool, over_cpu: bool, det_s: float) -> str:
    """Why a finished solve stopped (:attr:`SolveOutcome.stopped`)."""
    if status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE, SolveStatus.INVALID):
        return "done"
    if reached_target:
        return "at_bound"
    if cancelled:
        return "cancelled"
    if over_cpu:
        return "time"
    # CP-SAT stops a little past its limit; a solve well short of it was cut by the wall
    det_limit = float(solver.parameters.max_deterministic_time)
    return "work" if det_s >= 0.99 * det_limit else "time"


