"""Place a group of buffers against fixed ones with CP-SAT (arena steps 2 and 6).

The model (:func:`build_group_model`): time intervals fixed, offset intervals variable,
``add_no_overlap_2d`` against the fixed buffers that overlap the group in time, minimising
the height; it is solved by :func:`solve_group_model` and read back by
:func:`extract_offsets`.  :func:`place_group` places one sub-task group (step 2 of
:func:`~roam_core.layout.arena_layout.plan_arena`: a best-fit greedy hint, then CP-SAT);
:func:`polish_top_band` re-places the buffers reaching the top band of a finished layout
under a lower ceiling (step 6).

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
>>> offs, rec = place_group(p, [1, 2], {0: 0}, ArenaConfig(), 1.0, None, "g")
>>> offs, rec.status
({1: 2, 2: 0}, <SolveStatus.OPTIMAL: 'optimal'>)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from roam_core.base import cpsat
from roam_core.base.cancel import CancelFlag, CancelToken, as_cancel_flag
from roam_core.base.cpu_clock import cpu_now
from roam_core.base.status import SolveStatus
from roam_core.layout.config import ArenaConfig
from roam_core.layout.dsa_heuristics import buffer_arrays, place_against
from roam_core.model.dsa import Problem, Solution
from roam_core.model.plan import SolveRecord

__all__ = ["GroupModel", "build_group_model", "extract_offsets", "place_group",
           "polish_top_band", "solve_group_model"]


@dataclass(frozen=True, slots=True)
class GroupModel:
    """The CP-SAT model of a group placement and the variables read back.

    Parameters
    ----------
    model : cp_model.CpModel
        The model.
    offsets : tuple of IntVar
        The offset of each buffer of the group, in group order.
    height : IntVar
        The arena height (the objective).
    """

    model: cp_model.CpModel
    offsets: tuple[cp_model.IntVar, ...]
    height: cp_model.IntVar


def build_group_model(problem: Problem, group: Sequence[int], fixed: Mapping[int, int],
                      hint: Mapping[int, int], ub: int, floor: int | None = None,
                      ) -> GroupModel:
    """The model placing ``group`` under height ``ub`` against the ``fixed`` buffers
    (buffer -> offset), hinted by ``hint``.

    ``floor``: the top of every fixed buffer (default: computed from ``fixed``; a caller
    that passes only the fixed buffers overlapping the group in time passes the floor of
    all of them).
    """
    bs = problem.buffers
    m = cp_model.CpModel()
    lo = min(bs[i].lower for i in group)
    hi = max(bs[i].upper for i in group)
    if floor is None:
        floor = max((fixed[j] + bs[j].size for j in fixed), default=0)
    height = m.new_int_var(floor, max(ub, floor), "height")
    xs, ys, offs = [], [], []
    for i in group:
        b = bs[i]
        o = m.new_int_var(0, max(ub - b.size, 0), f"off_{b.id}")
        xs.append(m.new_interval_var(o, b.size, o + b.size, f"x_{b.id}"))
        ys.append(m.new_fixed_size_interval_var(b.lower, b.upper - b.lower, f"t_{b.id}"))
        m.add(height >= o + b.size)
        m.add_hint(o, hint[i])
        offs.append(o)
    for j, oj in fixed.items():
        b = bs[j]
        if b.lower < hi and lo < b.upper:
            xs.append(m.new_fixed_size_interval_var(oj, b.size, f"fx_{b.id}"))
            ys.append(m.new_fixed_size_interval_var(b.lower, b.upper - b.lower, f"ft_{b.id}"))
    m.add_no_overlap_2d(ys, xs)
    m.minimize(height)
    return GroupModel(m, tuple(offs), height)


def solve_group_model(gm: GroupModel, config: ArenaConfig, time_limit_s: float, target: int,
                      cancel: CancelFlag | None) -> tuple[cp_model.CpSolver, cpsat.SolveOutcome]:
    """Solve ``gm`` with ``time_limit_s`` CP-SAT *deterministic* seconds (``config``'s
    workers and seed: with one worker the same model gives the same layout on any machine;
    CPU time, then the wall clock, are only safety limits), stopping early at a height of
    ``target`` or when ``cancel`` says so."""
    solver = cpsat.make_solver(time_limit_s=time_limit_s, num_workers=config.num_workers,
                               random_seed=config.seed, deterministic=True, cpu_guard=True)
    return solver, cpsat.solve_with_stop(solver, gm.model, target=target, cancel=cancel)


def extract_offsets(gm: GroupModel, solver: cp_model.CpSolver,
                    group: Sequence[int]) -> dict[int, int]:
    """The offset of every buffer of ``group`` in the solver's solution."""
    return {i: int(solver.value(v)) for i, v in zip(group, gm.offsets)}


def place_group(problem: Problem, group: Sequence[int],
                fixed: Mapping[int, int] | tuple[np.ndarray, np.ndarray],
                config: ArenaConfig, time_limit_s: float, cancel: CancelToken,
                task_id: str, floor: int | None = None, top: int | None = None,
                arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                ) -> tuple[dict[int, int], SolveRecord]:
    """Place ``group`` against the ``fixed`` buffers (greedy hint, then CP-SAT).

    ``fixed`` may hold only the fixed buffers whose lifetimes overlap the group's time span
    (the others cannot touch it); ``floor`` / ``top`` are then the highest top of *all* fixed
    buffers (any size / non-zero size), so heights and bounds are those of the whole set.
    ``fixed`` is a mapping buffer -> offset or the pair of arrays ``(buffers, offsets)``
    (the mapping is then built only if CP-SAT runs).  ``arrays``: ``(lower, upper, size)``
    of every buffer of ``problem`` (computed when omitted).
    """
    t0 = time.perf_counter()
    lower, upper, size = arrays if arrays is not None else buffer_arrays(problem)[:3]
    if isinstance(fixed, tuple):
        f_idx = np.asarray(fixed[0], np.int64)
        f_off = np.asarray(fixed[1], np.int64)
    else:
        f_idx = np.fromiter(fixed, np.int64, len(fixed))
        f_off = np.fromiter(fixed.values(), np.int64, len(fixed))
    f_tops = f_off + size[f_idx]
    if floor is None:
        floor = int(f_tops.max()) if len(f_tops) else 0
    if top is None:
        nz = size[f_idx] > 0
        top = int(f_tops[nz].max()) if nz.any() else 0
    # greedy hint: the group best-fit against the fixed boxes (on arrays: no sub-problem of
    # Buffer objects, the same offsets as place_in_order on one)
    g_idx = np.asarray(group, dtype=np.int64)
    g_size = size[g_idx]
    order = sorted(range(len(group)), key=lambda k: -int(g_size[k]))
    offs_g = place_against(lower[f_idx], upper[f_idx], f_off, size[f_idx], lower[g_idx],
                           upper[g_idx], g_size, order, "best")
    tops_g = (offs_g + g_size)[g_size > 0]
    height = max(int(tops_g.max()) if len(tops_g) else 0, top)
    hint = {int(i): int(o) for i, o in zip(group, offs_g)}
    if height <= floor:  # the group adds nothing on top: CP-SAT's optimum is the floor
        return hint, SolveRecord("layout", task_id, SolveStatus.OPTIMAL, floor, floor,
                                 time.perf_counter() - t0, len(group))
    if time_limit_s <= 0.05:
        return hint, SolveRecord("layout", task_id, SolveStatus.HEURISTIC, height, None,
                                 time.perf_counter() - t0, len(group))
    if isinstance(fixed, tuple):
        fixed = dict(zip(f_idx.tolist(), f_off.tolist()))
    gm = build_group_model(problem, group, fixed, hint, height, floor)
    solver, out = solve_group_model(gm, config, time_limit_s, floor, as_cancel_flag(cancel))
    if out.objective is None or out.objective > height:
        return hint, SolveRecord("layout", task_id, SolveStatus.HINT, height, None,
                                 time.perf_counter() - t0, len(group))
    bound = None if out.best_bound is None else int(out.best_bound)
    return extract_offsets(gm, solver, group), SolveRecord(
        "layout", task_id, out.status, int(out.objective), bound, time.perf_counter() - t0,
        len(group))


def polish_top_band(problem: Problem, sol: Solution, target: int, config: ArenaConfig,
                    deadline: float, cancel: CancelToken,
                    ) -> tuple[Solution, list[SolveRecord]]:
    """Lower the top band of a layout with CP-SAT (ROAM's global re-placement, step 2).

    The buffers reaching above ``height - delta`` are freed, everything else stays fixed;
    CP-SAT places the freed ones under ``height - 1`` (hinted by their current offsets),
    minimising the height, stopping at ``target`` (the value contract).  ``delta`` grows
    while a round fails, until the band holds ``max_group_tensors`` buffers.  At most
    ``config.polish_rounds`` rounds of ``config.task_time_limit_s`` deterministic seconds
    each (the work); ``deadline`` is a CPU-time safety limit (``cpu_now()``).
    """
    bs = problem.buffers
    offs = list(sol.offsets)
    records: list[SolveRecord] = []
    cancel_flag = as_cancel_flag(cancel)
    band = 1
    for _ in range(config.polish_rounds):
        if cpu_now() > deadline or (cancel_flag and cancel_flag()):
            break
        height = max(o + b.size for o, b in zip(offs, bs))
        if height <= target:
            break
        tops = sorted({o + b.size for o, b in zip(offs, bs)}, reverse=True)
        cut = tops[min(band, len(tops) - 1)]
        free = [i for i, b in enumerate(bs) if offs[i] + b.size > cut]
        if len(free) > config.max_group_tensors or len(free) == len(bs):
            break
        fixed = {i: offs[i] for i in range(len(bs)) if offs[i] + bs[i].size <= cut}
        t0 = time.perf_counter()
        gm = build_group_model(problem, free, fixed, {i: offs[i] for i in free}, height - 1)
        solver, out = solve_group_model(gm, config, config.task_time_limit_s, target,
                                        cancel_flag)
        ok = out.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
        records.append(SolveRecord("merge", f"polish@{band}", out.status,
                                   int(out.objective)
                                   if ok and out.objective is not None else None,
                                   None if out.best_bound is None else int(out.best_bound),
                                   time.perf_counter() - t0, len(free)))
        if ok:
            for i, o in extract_offsets(gm, solver, free).items():
                offs[i] = o
        elif out.status in (SolveStatus.INFEASIBLE, SolveStatus.UNKNOWN):
            band *= 2
    return Solution.from_offsets(problem, offs), records
