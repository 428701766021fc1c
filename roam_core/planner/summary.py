"""The last steps of a plan: the arena layout, the task-tree summary, the independent check.

:func:`finish_plan` turns a chosen order into a :class:`~roam_core.model.plan.Plan`: it lays
the order out (:func:`lay_out`), records the layout's solver calls, summarises the task tree
and runs the validator (:func:`~roam_core.oracle.validate.check_plan`) on the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from roam_core.base.cancel import CancelToken
from roam_core.base.errors import PlanInvalidError
from roam_core.base.units import format_bytes
from roam_core.layout.arena_layout import ArenaLayout, greedy_arena, plan_arena
from roam_core.layout.config import ArenaConfig
from roam_core.model.graph import ControlEdge, Graph, OpId
from roam_core.model.plan import Plan, SolveRecord
from roam_core.model.stage_cost import StageClock, StageCost
from roam_core.oracle.simulate import MemoryProfile
from roam_core.oracle.validate import check_order, check_plan
from roam_core.ordering.decompose import TaskTree
from roam_core.planner.config import PlannerConfig

__all__ = ["ChosenOrder", "finish_plan", "lay_out", "relay_out"]


@dataclass(frozen=True, slots=True)
class ChosenOrder:
    """What the ordering steps hand to :func:`finish_plan`.

    Parameters
    ----------
    method : str
        ``"roam"`` or the baseline method that made the order.
    order : tuple of OpId
        The order (valid for the input graph).
    profile : MemoryProfile
        Its simulated profile.
    tree : TaskTree or None
        The task tree (``roam`` only).
    task_of_op : Mapping of OpId to str
        Sub-task of every op (``roam`` only).
    extra_edges : tuple of ControlEdge
        Placement rewrites the order honours.
    """

    method: str
    order: tuple[OpId, ...]
    profile: MemoryProfile
    tree: TaskTree | None = None
    task_of_op: Mapping[OpId, str] | None = None
    extra_edges: tuple[ControlEdge, ...] = ()


def lay_out(graph: Graph, order: Sequence[OpId], tree: TaskTree | None, cfg: PlannerConfig,
            cancel: CancelToken, t_start: float) -> ArenaLayout:
    """The arena layout of ``order``: the layout solvers within the layout budget (capped by
    what ``cfg.time_limit_s`` leaves, at least 1 s), or greedy best-fit when
    ``cfg.solve_layout`` is off."""
    if not cfg.solve_layout:
        return greedy_arena(graph, order, alignment_bytes=cfg.alignment_bytes)
    budget = cfg.layout_time_limit_s
    if cfg.time_limit_s is not None:  # the overall limit caps the layout too (at least 1 s)
        budget = min(budget, max(1.0, cfg.time_limit_s - (time.perf_counter() - t_start)))
    acfg = replace(cfg.arena, time_limit_s=budget)  # alignment and seed: the planner's
    return plan_arena(graph, order, task_tree=tree, config=acfg, cancel=cancel)


def relay_out(graph: Graph, plan: Plan, config: ArenaConfig, cancel: CancelToken) -> Plan:
    """``plan`` with its order laid out again under ``config`` (more effort), if lower.

    The budget planner calls this when a plan's planned peak fits a budget its arena
    overshoots.  The new layout is kept only when its arena is lower; its stages join the
    plan's as ``relayout.<step>`` and a note gives both arenas.

    Parameters
    ----------
    graph : Graph
        The graph ``plan`` was made for (an expanded graph with its recompute ops).
    plan : Plan
        A plan of ``graph``.
    config : ArenaConfig
        The layout's settings (e.g. ``ArenaConfig.with_effort``).
    cancel : threading.Event or callable, optional
        Stops the layout early (the best so far is used).

    Returns
    -------
    Plan
        The lower of the two; the validator passes on it.

    Raises
    ------
    PlanInvalidError
        If the new layout fails the validator (a bug, never expected).
    """
    lay = plan_arena(graph, plan.order, config=config, cancel=cancel)
    if lay.arena_bytes >= plan.arena_bytes:
        return replace(plan, notes=(*plan.notes, (
            f"laid out again with more effort: arena {lay.arena_bytes / 2**20:,.2f} MiB, not "
            f"below {plan.arena_bytes / 2**20:,.2f} MiB; kept the first")))
    stages = tuple(replace(c, stage="relayout." + c.stage.removeprefix("layout."))
                   for c in lay.stats.get("stages", ()))
    new = replace(plan, offsets=dict(lay.offsets), arena_bytes=int(lay.arena_bytes),
                  provenance=(*plan.provenance, *lay.provenance),
                  stages=(*plan.stages, *stages),
                  notes=(*plan.notes, (
                      f"laid out again with more effort: arena "
                      f"{plan.arena_bytes / 2**20:,.2f} -> {lay.arena_bytes / 2**20:,.2f} MiB")))
    bad = check_plan(graph, new)
    if bad:
        raise PlanInvalidError(bad)
    return new


def finish_plan(graph: Graph, config: PlannerConfig, chosen: ChosenOrder, *,
                baseline_peak_bytes: int, lower_bound_bytes: int,
                records: list[SolveRecord], notes: Sequence[str], t_start: float,
                cancel: CancelToken, emit: Callable[[str, int, int, str], None],
                stages: Sequence[StageCost] = ()) -> Plan:
    """Lay out ``chosen.order`` and assemble the validated plan.

    ``stages`` (the ordering stages' costs) go into ``Plan.stages`` followed by the layout's
    (``layout.<step>``) and the validator's (``validate``).

    Raises
    ------
    PlanInvalidError
        If the order or the plan fails the independent validator (a bug, never expected).
    """
    order, prof = chosen.order, chosen.profile
    bad = check_order(graph, order)
    if bad:
        raise PlanInvalidError(bad)
    emit("layout", 0, 1, "laying out the arena")
    clock = StageClock()
    layout = lay_out(graph, order, chosen.tree, config, cancel, t_start)
    costs = [*stages, *layout.stats.get("stages", ())] if "stages" in layout.stats else [
        *stages, clock.cost("layout.greedy", 0, 1, 0, "passes")]
    records.extend(layout.provenance)
    tree = chosen.tree
    summary = tree.to_summary(order, records, config.alignment_bytes) if tree else None
    plan = Plan(
        graph_fingerprint=graph.fingerprint(),
        graph_name=graph.name,
        method=chosen.method,
        order=tuple(order),
        offsets=dict(layout.offsets),
        alignment_bytes=config.alignment_bytes,
        arena_bytes=int(layout.arena_bytes),
        planned_peak_bytes=prof.peak_bytes,
        resident_bytes=prof.resident_bytes,
        baseline_peak_bytes=baseline_peak_bytes,
        lower_bound_bytes=lower_bound_bytes,
        live_bytes=tuple(prof.live_bytes),
        solve_seconds=time.perf_counter() - t_start,
        task_tree=summary,
        task_of_op=dict(chosen.task_of_op or {}),
        extra_edges=tuple(chosen.extra_edges),
        provenance=tuple(records),
        settings={**config.to_dict(), "method": chosen.method},
        notes=tuple(notes),
    )
    clock = StageClock()
    bad = check_plan(graph, plan)
    if bad:
        raise PlanInvalidError(bad)
    plan = replace(plan, stages=(*costs, clock.cost("validate")))
    emit("done", 1, 1,
         f"peak {format_bytes(prof.peak_bytes)}, arena {format_bytes(plan.arena_bytes)}")
    return plan
