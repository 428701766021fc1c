"""ROAM's own layout candidate (arena steps 1-3): activation stack, sub-task groups, compaction.

1. **Activation stack.** Activations (created before the loss step, freed after it) are
   stacked from offset 0 of the planned area, the one freed last at the bottom (LIFO, as
   ROAM does): they are all live at the loss, so this stack wastes nothing there.
2. **Sub-task layouts.** The other storages are grouped by the sub-task that produces them
   (the task tree; without one, by chronological chunks).  Each group is placed by CP-SAT
   against the storages already placed as fixed boxes
   (:func:`~roam_core.layout.group_placement.place_group`).  Placing groups against
   everything placed so far is the merge: there are no conflicts left to re-place.
3. **Compaction.** Every storage, lowest first, drops to the lowest offset where it fits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.cpu_clock import cpu_now
from roam_core.base.status import SolveStatus
from roam_core.layout.config import ArenaConfig
from roam_core.layout.dsa_heuristics import buffer_arrays, place_in_order
from roam_core.layout.group_placement import place_group
from roam_core.model.dsa import Problem, Solution
from roam_core.model.graph import Graph, OpId, Phase, TensorId
from roam_core.model.plan import SolveRecord

__all__ = ["SubtaskTree", "activation_stack", "loss_step", "roam_candidate", "subtask_groups"]


class _Subtask(Protocol):
    @property
    def op_ids(self) -> Sequence[OpId]: ...


class SubtaskTree(Protocol):
    """What the layout reads of a task tree (:class:`roam_core.ordering.decompose.TaskTree`,
    which the layout may not import): its sub-tasks' ops by sub-task id."""

    @property
    def subtasks(self) -> Mapping[str, _Subtask]: ...


def loss_step(graph: Graph, order: Sequence[OpId]) -> int | None:
    """The step of the first loss op in ``order`` (else of the first backward op; ``None``
    when there is neither)."""
    for i, op in enumerate(order):
        if graph.op(op).phase is Phase.LOSS:
            return i
    for i, op in enumerate(order):
        if graph.op(op).phase is Phase.BACKWARD:
            return i
    return None


def activation_stack(problem: Problem, loss_at: int | None) -> dict[int, int]:
    """Step 1: offsets (units) of the buffers live across the loss step ``loss_at``, the one
    freed last at the bottom."""
    if loss_at is None:
        return {}
    acts = [i for i, b in enumerate(problem.buffers) if b.lower < loss_at < b.upper - 1]
    acts.sort(key=lambda i: (-problem.buffers[i].upper, problem.buffers[i].lower))
    out: dict[int, int] = {}
    base = 0
    for i in acts:
        out[i] = base
        base += problem.buffers[i].size
    return out


def subtask_groups(graph: Graph, problem: Problem, placed: Mapping[int, int],
                   task_tree: SubtaskTree | None,
                   max_size: int) -> list[tuple[str, list[int]]]:
    """Step 2's groups: the buffers not ``placed`` by the sub-task of their producer
    (``"global"`` without one), cut into chunks of at most ``max_size`` by start, as
    ``(group id, buffers)`` in order of their earliest start."""
    task_of: dict[str, str] = {}
    if task_tree is not None:
        for sid, st in task_tree.subtasks.items():
            for op in st.op_ids:
                task_of[op] = sid
    rest = [i for i in range(len(problem)) if i not in placed]
    by_task: dict[str, list[int]] = {}
    for i in rest:
        prod = graph.tensors[TensorId(problem.buffers[i].id)].producer
        by_task.setdefault(task_of.get(prod or "", "global"), []).append(i)
    out: list[tuple[str, list[int]]] = []
    for tid, members in by_task.items():
        members.sort(key=lambda i: (problem.buffers[i].lower, -problem.buffers[i].size))
        for c in range(0, len(members), max_size):
            name = tid if len(members) <= max_size else f"{tid}#{c // max_size}"
            out.append((name, members[c: c + max_size]))
    out.sort(key=lambda g: min(problem.buffers[i].lower for i in g[1]))
    return out


def roam_candidate(graph: Graph, order: Sequence[OpId], problem: Problem,
                   task_tree: SubtaskTree | None, config: ArenaConfig, deadline: float,
                   cancel: CancelToken) -> tuple[Solution, list[SolveRecord]]:
    """Steps 1-3 (see the module docstring): the layout and the record of every stage.

    Parameters
    ----------
    graph : Graph
        The graph (its loss step and the producers of the storages).
    order : sequence of OpId
        The order the lifetimes come from.
    problem : Problem
        Its :func:`~roam_core.layout.arena_layout.layout_problem`.
    task_tree : SubtaskTree, optional
        Groups the storages by the sub-task of their producer.
    config : ArenaConfig
        CP-SAT settings and the group size.
    deadline : float
        ``cpu_now()`` safety limit: groups placed after it keep their greedy hint
        (each CP-SAT solve is cut by ``config.task_time_limit_s`` deterministic seconds).
    cancel : CancelToken
        Stops the CP-SAT solves (the greedy hints are kept).

    Returns
    -------
    (Solution, list of SolveRecord)
    """
    records: list[SolveRecord] = []
    t0 = time.perf_counter()
    placed = activation_stack(problem, loss_step(graph, order))
    records.append(SolveRecord("layout", "activations", SolveStatus.HEURISTIC,
                               sum(problem.buffers[i].size for i in placed), None,
                               time.perf_counter() - t0, len(placed)))
    groups = subtask_groups(graph, problem, placed, task_tree, config.max_group_tensors)
    records += _place_groups(problem, placed, groups, config, deadline, cancel)
    t1 = time.perf_counter()
    sol = _compact(problem, placed)
    records.append(SolveRecord("merge", "global", SolveStatus.HEURISTIC, sol.height, None,
                               time.perf_counter() - t1, len(problem)))
    return sol, records


def _place_groups(problem: Problem, placed: dict[int, int],
                  groups: Sequence[tuple[str, list[int]]], config: ArenaConfig,
                  deadline: float, cancel: CancelToken) -> list[SolveRecord]:
    """Step 2: place every group in turn against everything placed so far (``placed`` is
    updated); each CP-SAT solve gets ``config.task_time_limit_s`` deterministic seconds (a
    work limit: the same groups give the same layout on any machine), none after the
    deadline or a cancel (the greedy hint is kept)."""
    records: list[SolveRecord] = []
    # each group sees only the placed buffers that overlap its time span (a numpy scan),
    # plus the highest tops of all of them: linear work per group instead of building every
    # placed buffer into its sub-problem
    lower, upper, size, _ = buffer_arrays(problem)
    p_idx = np.fromiter(placed, np.int64, len(placed))
    p_off = np.zeros(len(problem), np.int64)  # offset of every placed buffer, by index
    p_off[p_idx] = np.fromiter(placed.values(), np.int64, len(placed))
    p_top = p_off[p_idx] + size[p_idx]
    floor = int(p_top.max()) if len(p_top) else 0
    nz = size[p_idx] > 0
    top = int(p_top[nz].max()) if nz.any() else 0
    for gid, members in groups:
        share = config.task_time_limit_s
        if is_cancelled(cancel) or cpu_now() > deadline:
            share = 0.0
        g_lo = min(int(lower[i]) for i in members)
        g_hi = max(int(upper[i]) for i in members)
        near = p_idx[(lower[p_idx] < g_hi) & (upper[p_idx] > g_lo)]
        offs, rec = place_group(problem, members, (near, p_off[near]), config, share,
                                cancel, gid, floor, top, (lower, upper, size))
        placed.update(offs)
        records.append(rec)
        new_idx = np.fromiter(offs, np.int64, len(offs))
        p_off[new_idx] = np.fromiter(offs.values(), np.int64, len(offs))
        new_top = p_off[new_idx] + size[new_idx]
        p_idx = np.concatenate((p_idx, new_idx))
        if len(new_top):
            floor = max(floor, int(new_top.max()))
            nzn = size[new_idx] > 0
            if nzn.any():
                top = max(top, int(new_top[nzn].max()))
    return records


def _compact(problem: Problem, placed: Mapping[int, int]) -> Solution:
    """Step 3: every buffer, lowest first, to the lowest offset where it fits (kept only
    when that is not higher)."""
    cur = [placed[i] for i in range(len(problem))]
    before = max((o + b.size for o, b in zip(cur, problem.buffers)), default=0)
    compact = place_in_order(problem, sorted(range(len(problem)), key=lambda i: cur[i]), "first")
    assert compact is not None
    return compact if compact.height <= before else Solution.from_offsets(problem, cur)
