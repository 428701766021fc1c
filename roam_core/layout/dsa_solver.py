"""Solve DSA problems: a greedy portfolio, then an exact search over canonical placements.

Method
------
1. **Portfolio** (:mod:`roam_core.layout.dsa_heuristics`): several buffer orders (size, lifetime,
   area, section total, start) times best/first fit; keep the lowest layout.  Above
   ``MAX_SEARCH_BUFFERS`` free buffers (no exact search), a few *promotion* passes follow
   (:func:`~roam_core.layout.dsa_heuristics.promote_high`: the best pass's order again, with
   the buffers that ended above the bound moved to the front).
2. **Exact search** (:mod:`roam_core.layout.dsa_search`, after MiniMalloc): a depth-first
   search over canonical layouts at a fixed capacity, several preorders run round-robin
   under doubling node limits.
3. **Height minimisation** (no capacity): a search at the bound with a sixth of the nodes;
   if that fails, a *peak repair* of the best layout
   (:func:`~roam_core.layout.dsa_repair.repair_peak`: the buffers live where the load is near
   the bound are searched at it, everything else fixed); then bisect the capacity between
   the proven lower bound and the best layout found, each step a capacity-bounded search
   with a share of the node budget; once exhausted budgets have closed the bisection, keep
   descending in small steps below the best layout until the budget is spent.  A bound
   proven by a step is rounded up to the grain of the heights
   (:func:`~roam_core.layout.dsa_bounds.height_grain`).

Proven bounds above the live-set bound (time windows) are in :mod:`roam_core.layout.dsa_bounds`
(not run here).

Deterministic work limits
-------------------------
Where the answer depends on how far a search got, it is cut by a *work count* (search nodes),
never by the clock: the same problem and ``work_limit`` give the same layout on an idle or a
loaded machine.  ``work_limit`` defaults to ``time_limit_s * NODES_PER_S`` (a rate a loaded
2-core machine still reaches); ``time_limit_s`` stays only as an outer safety limit, in CPU
seconds of the calling thread (:mod:`roam_core.base.cpu_clock`, so the load does not cut it
sooner), and ``DsaResult.stopped_by`` says ``"time"`` when it, not the work count, ended a run.
With a capacity, a layout found is the same whatever the load (the node limits of the
restarts are fixed); only whether one is found before the clock runs out can differ.

The search is complete for problems without fixed offsets: when it finishes without a layout,
none exists (``InfeasibleError``).  With fixed offsets it only steps over them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.checks import require_type
from roam_core.base.cpu_clock import cpu_now
from roam_core.base.errors import ConfigError, InfeasibleError, PlanInvalidError
from roam_core.base.status import SolveStatus
from roam_core.layout.dsa_bounds import height_grain, round_up
from roam_core.layout.dsa_heuristics import ORDERS, named_order, portfolio, promote_high
from roam_core.layout.dsa_repair import repair_peak
from roam_core.layout.dsa_search import (
    MAX_SEARCH_BUFFERS,
    MAX_SEARCH_CELLS,
    SearchCache,
    SearchOptions,
    search_capacity,
    search_cells,
)
from roam_core.model.dsa import Problem, Solution
from roam_core.oracle.validate import check_dsa_solution

# SearchOptions is re-exported: it is the type of solve_dsa's ``options``
__all__ = ["LARGE_ORDERS", "LARGE_PROMOTE_PASSES", "NODES_PER_S", "DsaResult", "SearchOptions",
           "solve_dsa"]

_logger = logging.getLogger(__name__)
_OPT, _FEAS = SolveStatus.OPTIMAL, SolveStatus.FEASIBLE

#: Greedy passes for problems above ``MAX_SEARCH_BUFFERS`` (every pass is O(n^2)): the
#: orders that win on the large idealloc sets (size: pangu_2.6B; total_length: S_1), best fit.
LARGE_ORDERS = ("size", "total_length", "size_length", "total_size")
#: Iterated-greedy passes (:func:`~roam_core.layout.dsa_heuristics.promote_high`) after the
#: portfolio on problems above ``MAX_SEARCH_BUFFERS`` (a fixed count: deterministic).
#: pangu_2.6B reaches its bound in the first, S_1 1.0026 -> 1.0010 x LB in the first.
LARGE_PROMOTE_PASSES = 4

#: A bisection step of the height minimisation gets 1/_STEP_SHARE of the nodes left.
_STEP_SHARE = 4
#: The peak repair after the first step gets half of the nodes left, at most this.
_REPAIR_MAX_NODES = 5000

#: Search nodes per second of ``time_limit_s`` in the default work limit.  An idle core does
#: about 9,000; 1,000-3,000 were measured on 2 cores at load 11, so the default work fits
#: the time limit even on a heavily shared machine (and the clock rarely decides).
NODES_PER_S = 1000


@dataclass(frozen=True, slots=True)
class DsaResult:
    """What :func:`solve_dsa` found.

    Parameters
    ----------
    solution : Solution or None
        The best layout (``None`` only when a capacity was given and none was found).
    lower_bound : int
        A proven lower bound on the height of any layout.
    status : SolveStatus
        ``OPTIMAL`` (height equals the bound), ``FEASIBLE`` (a layout within the
        capacity, or the best found), ``TIMEOUT`` (capacity given, no layout found in time)
        or ``CANCELLED``.
    wall_time_s : float
        Seconds spent.
    method : str
        Which step produced the solution (``"greedy:size:best"``, ``"search:TLA"``, ...).
    nodes : int
        Search nodes visited.
    tried : tuple
        ``(method, height)`` of every heuristic run.
    stopped_by : str
        What ended the search early: ``""`` (it finished: optimal, infeasible, or a layout
        within the capacity), ``"work"`` (the deterministic work limit; the layout depends
        only on the problem and the limit), ``"time"`` (the CPU-time safety limit; the
        layout may differ between machines) or ``"cancel"``.
    """

    solution: Solution | None
    lower_bound: int
    status: SolveStatus
    wall_time_s: float
    method: str
    nodes: int = 0
    tried: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    stopped_by: str = ""


class _Run:
    """The state of one :func:`solve_dsa` call, shared by its steps: the best layout so far,
    the passes tried, the nodes spent and what stopped the call early."""

    def __init__(self, problem: Problem, capacity: int | None, lower_bound: int, t0: float,
                 deadline: float, cancel: CancelToken, say: Callable[[str], None],
                 good_enough: int | None = None) -> None:
        self.problem, self.cap, self.lb = problem, capacity, lower_bound
        # the height at or below which a minimisation stops (the caller's value contract)
        self.goal = lower_bound if good_enough is None else max(lower_bound, good_enough)
        self.t0, self.deadline, self.cancel, self.say = t0, deadline, cancel, say
        self.best: Solution | None = None
        self.method = ""
        self.tried: list[tuple[str, int]] = []
        self.nodes = 0
        self.stopped = ""

    def target(self) -> int:
        """The height the heuristics aim at: the capacity, else the live-set bound (or the
        caller's good-enough height)."""
        return self.goal if self.cap is None else self.cap

    def result(self, sol: Solution | None, status: SolveStatus, method: str,
               bound: int) -> DsaResult:
        """The answer; every layout leaving the solver passes the validator."""
        if sol is not None:
            bad = check_dsa_solution(self.problem.with_capacity(self.cap), sol)
            if bad:
                raise PlanInvalidError(bad)
        return DsaResult(sol, bound, status, time.perf_counter() - self.t0, method, self.nodes,
                         tuple(self.tried), self.stopped)


def solve_dsa(problem: Problem, *, time_limit_s: float = 60.0, capacity: int | None = None,
              cancel: CancelToken = None,
              options: SearchOptions = SearchOptions(),  # noqa: B008 - frozen
              exact: bool = True, log: Callable[[str], None] | None = None,
              work_limit: int | None = None,
              known: Mapping[str, Solution] | None = None,
              good_enough: int | None = None,
              max_search_buffers: int = MAX_SEARCH_BUFFERS,
              max_search_cells: int = MAX_SEARCH_CELLS) -> DsaResult:
    """Find a low layout for ``problem`` (or one within ``capacity``).

    Parameters
    ----------
    problem : Problem
        The buffers.  ``problem.capacity`` is used when ``capacity`` is not given.
    time_limit_s : float
        Safety limit for the whole call, in CPU seconds of the calling thread (and, when
        ``work_limit`` is not given, the scale of the default work limit).
    capacity : int, optional
        With a capacity: find any layout of height at most it.  Without: minimise the height.
    cancel : threading.Event or callable, optional
        Checked during the search; when set, the best layout so far is returned.
    options : SearchOptions
        Exact-search switches (keep the defaults).
    exact : bool
        False: heuristics only.
    log : callable, optional
        Receives one-line progress messages.
    work_limit : int, optional
        Search nodes allowed when minimising (default ``time_limit_s * NODES_PER_S``).  The
        layout depends only on the problem and this count, unless the CPU-time limit
        stops the call first (``stopped_by == "time"``).  With a capacity the search runs
        until it finds a layout or proves none exists, cut by ``work_limit`` only if given.
    known : Mapping of str to Solution, optional
        Greedy passes the caller already ran, by method name (``"greedy:size:best"``): the
        portfolio uses them instead of running them again (see
        :func:`~roam_core.layout.dsa_heuristics.portfolio`).
    good_enough : int, optional
        When minimising: stop at the first layout at or below this height (a caller's value
        contract; default the live-set bound).
    max_search_buffers : int
        Above this many free buffers: no exact search, the large-problem portfolio and the
        promotion passes instead (at most :data:`MAX_SEARCH_BUFFERS`).
    max_search_cells : int
        The same above this many cells (free buffers x sections,
        :func:`~roam_core.layout.dsa_search.search_cells`): a node's cost grows with them.

    Returns
    -------
    DsaResult

    Raises
    ------
    InfeasibleError
        A capacity was given and it is proven that no layout fits.
    PlanInvalidError
        The layout failed :func:`roam_core.oracle.validate.check_dsa_solution` (a solver
        bug; no invalid layout is ever returned).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> r = solve_dsa(p, time_limit_s=5)
    >>> r.solution.height, r.lower_bound, r.status
    (3, 3, <SolveStatus.OPTIMAL: 'optimal'>)
    """
    require_type(problem, Problem, "solve_dsa: problem", ConfigError)
    t0 = time.perf_counter()  # the result's wall seconds; the safety limit is CPU time
    cap = capacity if capacity is not None else problem.capacity
    lb = problem.lower_bound()
    if cap is not None and lb > cap:
        raise InfeasibleError(f"live-set lower bound {lb} exceeds capacity {cap}")
    run = _Run(problem, cap, lb, t0, cpu_now() + time_limit_s, cancel,
               log or (lambda m: _logger.info("%s", m)), good_enough)
    n_free = sum(1 for b in problem.buffers if b.offset is None and b.size > 0)
    large = (n_free > min(max_search_buffers, MAX_SEARCH_BUFFERS)
             or search_cells(problem) > max_search_cells)
    do_search = exact and not large
    _run_portfolio(run, large=large, known=known)
    if not do_search:
        _promote(run)
    if cap is not None:
        return _within_capacity(run, cap, do_search, options, work_limit)
    budget = work_limit if work_limit is not None else int(time_limit_s * NODES_PER_S)
    return _minimise(run, do_search, options, budget)


def _run_portfolio(run: _Run, *, large: bool, known: Mapping[str, Solution] | None) -> None:
    """Step 1: the greedy passes, stopped at the bound.  Every pass of the portfolio runs
    (the clock only as a safety limit); a fixed, smaller set of passes on large problems, so
    that the answer does not depend on the load."""
    orders, fits = (LARGE_ORDERS, ("best",)) if large else (tuple(ORDERS), ("best", "first"))
    # the passes after one at the bound are skipped (none can be lower: the same result)
    run.best, run.method, run.tried = portfolio(run.problem, deadline=run.deadline,
                                                orders=orders, fits=fits, target=run.target(),
                                                known=known)
    run.say(f"portfolio: {run.method} height {run.best.height} (lb {run.lb})")
    cut = len(run.tried) < len(orders) * len(fits) and run.best.height > run.target()
    run.stopped = "time" if cut or run.method.endswith("+rest") else ""


def _promote(run: _Run) -> None:
    """Step 1, no exact search: re-place the best pass's order with the buffers that ended
    on top moved to the front, a fixed number of times."""
    best = run.best
    assert best is not None
    _, oname, fit = [*run.method.split(":"), "", ""][:3]
    if (run.stopped or best.height <= run.target() or oname not in ORDERS
            or fit not in ("best", "first")):
        return
    sol, runs, cut = promote_high(run.problem, named_order(run.problem, oname), fit, best,
                                  target=run.target(), passes=LARGE_PROMOTE_PASSES,
                                  deadline=run.deadline)
    run.tried.append((f"promote:{oname}:{fit}x{runs}", sol.height))
    if sol.height < best.height:
        best = sol
        run.best, run.method = best, f"promote:{oname}:{fit}"
    run.stopped = "time" if cut else ""
    run.say(f"promote x{runs}: height {best.height} (lb {run.lb})")


def _within_capacity(run: _Run, cap: int, do_search: bool, options: SearchOptions,
                     work_limit: int | None) -> DsaResult:
    """Step 2 with a capacity: the best greedy layout if it fits, else the exact search
    until it finds one or proves none exists (cut by ``work_limit`` only if given)."""
    best, lb, cancel = run.best, run.lb, run.cancel
    assert best is not None
    if best.height <= cap:
        return run.result(best, _OPT if best.height == lb else _FEAS, run.method, lb)
    if not do_search:
        run.stopped = run.stopped or "work"
        return run.result(None, SolveStatus.TIMEOUT, run.method, lb)
    sol, proven, meth, run.nodes = search_capacity(run.problem, cap, deadline=run.deadline,
                                                   cancel=cancel, options=options,
                                                   node_budget=work_limit)
    if sol is not None:
        return run.result(sol, _OPT if sol.height == lb else _FEAS, meth, lb)
    if proven:
        raise InfeasibleError(f"no layout fits capacity {cap} (search exhausted)")
    run.stopped = "cancel" if is_cancelled(cancel) else meth.rpartition(":")[2]
    status = SolveStatus.CANCELLED if is_cancelled(cancel) else SolveStatus.TIMEOUT
    return run.result(None, status, meth, lb)


def _minimise(run: _Run, do_search: bool, options: SearchOptions, budget: int) -> DsaResult:
    """Step 3: bisect between the proven bound and the best layout, each step a share of
    the node budget (deterministic), the clock only as the outer limit; after the first
    step, the peak repair of the best layout."""
    assert run.best is not None
    lo, hi = run.lb, run.best.height
    soft_lo = lo
    cache = SearchCache()
    first = True
    repaired = False
    while lo < hi and hi > run.goal and do_search:
        why = _why_stop(run, budget)
        if why:
            run.stopped = why
            break
        if soft_lo >= hi:  # bisection exhausted by budgets: descend from the best instead
            target = hi - max(1, (hi - lo) // 16)
        else:
            target = max(soft_lo, run.goal) if first else (soft_lo + hi) // 2
        left = budget - run.nodes
        share = left // (6 if first else _STEP_SHARE) if left > 4096 else left
        first = False
        sol, proven, meth, k = search_capacity(
            run.problem, target, deadline=run.deadline, cancel=run.cancel, options=options,
            cache=cache, node_budget=share)
        run.nodes += k
        if sol is not None:
            run.say(f"{meth}: height {sol.height} <= {target}")
            run.best, run.method, hi = sol, meth, sol.height
        elif proven:
            run.say(f"search: no layout within {target}")
            lo = soft_lo = target + 1
        else:
            if meth.endswith(":time"):
                run.stopped = "cancel" if is_cancelled(run.cancel) else "time"
            soft_lo = target + 1
        if not repaired and lo < hi and hi > run.goal and not run.stopped:
            repaired = True
            hi = _repair_best(run, max(lo, run.goal), budget, options)
    if lo >= hi or hi <= run.goal:
        run.stopped = ""
    # a bound proven by a bisection step rounds up to the grain of the heights
    lo = min(round_up(lo, height_grain(run.problem)), run.best.height)
    status = _OPT if run.best.height <= lo else _FEAS
    if status != _OPT and is_cancelled(run.cancel):
        status = SolveStatus.CANCELLED
    return run.result(run.best, status, run.method, lo)


def _why_stop(run: _Run, budget: int) -> str:
    """What ends the minimisation before its next step (``""``: nothing)."""
    if budget - run.nodes < 64 or run.stopped:
        return run.stopped or "work"
    if is_cancelled(run.cancel):
        return "cancel"
    if cpu_now() >= run.deadline:
        return "time"
    return ""


def _repair_best(run: _Run, target: int, budget: int, options: SearchOptions) -> int:
    """When the first step (the whole search at the bound) did not reach it: the peak repair
    of the best layout, where only the buffers live near the peak are searched (not above
    MAX_SEARCH_BUFFERS buffers: with thousands of fixed ones around the window a node costs
    ~25 ms, pangu_2.6B: 2,000 nodes in 51 CPU s).  Returns the best height."""
    assert run.best is not None
    sol, k, meth = repair_peak(run.problem, run.best, target,
                               node_budget=min((budget - run.nodes) // 2, _REPAIR_MAX_NODES),
                               deadline=run.deadline, cancel=run.cancel, options=options)
    run.nodes += k
    if sol is not None:
        run.say(f"{meth}: height {sol.height} <= {target}")
        run.best, run.method = sol, meth
    return run.best.height
