"""The recomputation frontier: roam at many budgets beside the checkpointing baselines.

:func:`recompute_frontier` (``roam frontier``, the app's budget view) plans one graph with
one :class:`~roam_core.planner.budget.BudgetPlanner` at evenly spaced budgets, plus at the
memory of each baseline policy (:data:`~roam_core.recompute.baselines.BASELINES`) and the
midway budget between no recomputation and every block, and plans each baseline's drop set
by the same order and layout stages.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from roam_core.base.cancel import CancelToken
from roam_core.base.errors import BudgetInfeasibleError
from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, TensorId
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import recompute_cost
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.planner.pipeline import PlanProgress
from roam_core.recompute.baselines import BASELINES, baseline_drop_set

__all__ = ["FrontierPoint", "recompute_frontier"]


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One point of ``roam frontier``: a method's memory and the FLOPs it adds.

    Parameters
    ----------
    method : str
        ``"roam"`` or a baseline policy name.
    peak_bytes : int
        The plan's arena (resident included): the memory the step needs.
    extra_flops : int
        FLOPs recomputation adds.
    budget_bytes : int or None
        The budget roam was given (``None`` for baselines).
    recomputed_ops : int
        Recompute ops in the plan.
    extra_bytes_moved : int
        Bytes the recompute ops read and write (elementwise re-runs count 0 FLOPs in
        torch's counter but are not free; roam's objective charges them).
    kept : str
        For roam points: which portfolio candidate the plan comes from.
    search_extra_flops, search_extra_bytes_moved : int or None
        For roam points: the same of roam's own search (greedy prefix, pruned) at the same
        just-in-time target, whether or not the portfolio kept it.
    """

    method: str
    peak_bytes: int
    extra_flops: int
    budget_bytes: int | None = None
    recomputed_ops: int = 0
    extra_bytes_moved: int = 0
    #: roam only: the portfolio candidate kept (``"roam"``: its own greedy search)
    kept: str = "roam"
    #: roam only: extra FLOPs and bytes moved of its own search alone at this budget
    search_extra_flops: int | None = None
    search_extra_bytes_moved: int | None = None


def _moved(graph: Graph, plan: Plan) -> int:
    return recompute_cost(graph, plan.recompute)[1]


class _Frontier:
    """The points, notes and plans of one frontier as they are made."""

    def __init__(self, bp: BudgetPlanner, plans: dict[str, Plan] | None) -> None:
        self.bp, self.graph, self.plans = bp, bp.graph, plans
        self.notes: list[str] = list(bp.notes)
        self.points: list[FrontierPoint] = []
        #: memories roam is planned at besides the grid (each baseline's, the midway one)
        self.extra_budgets: list[int] = []
        #: (budget, plan, index in points) of roam's objective points
        self.made: list[tuple[int, Plan, int]] = []

    def _keep(self, label: str, plan: Plan) -> None:
        if self.plans is not None:
            self.plans[label] = plan

    def add_baseline(self, name: str, drop: Sequence[TensorId]) -> None:
        """A baseline's drop set planned by the same stages (no drops: the plain plan)."""
        bp = self.bp
        p = bp.plan_for_drops(tuple(drop), label=name) if drop else replace(
            bp.base, method=name, step_flops=bp.step_flops)
        self.points.append(FrontierPoint(name, p.arena_bytes, p.extra_flops, None,
                                         len(p.recompute), _moved(self.graph, p)))
        self.extra_budgets.append(p.arena_bytes)
        self._keep(name, p)

    def add_roam(self, b: int, fewest: bool) -> None:
        """roam at budget ``b`` (the objective's pick) and, with ``fewest``, the candidate
        with fewer extra FLOPs when one fits (:meth:`BudgetPlanner.plan_fewest_flops`)."""
        bp, g = self.bp, self.graph
        try:
            p = bp.plan_at(b)
        except BudgetInfeasibleError:
            self.notes.append(f"roam: no plan fits {format_bytes(b)}")
            return
        self.made.append((b, p, len(self.points)))
        pick = bp.last_pick
        own = bp.own_costs.get(pick[1]) if pick is not None else None
        self.points.append(FrontierPoint("roam", p.arena_bytes, p.extra_flops, b,
                                         len(p.recompute), _moved(g, p),
                                         pick[0] if pick is not None else "roam",
                                         own[0] if own is not None else p.extra_flops,
                                         own[1] if own is not None else _moved(g, p)))
        self._keep(f"roam@{b}", p)
        q = bp.plan_fewest_flops(b, p) if fewest else None
        if q is not None:
            last = self.points[-1]
            self.points.append(FrontierPoint("roam", q.arena_bytes, q.extra_flops, b,
                                             len(q.recompute), _moved(g, q),
                                             bp.last_pick[0] if bp.last_pick else "roam",
                                             last.search_extra_flops,
                                             last.search_extra_bytes_moved))
            self._keep(f"roam-flops@{b}", q)

    def budgets(self, n: int, alignment_bytes: int) -> list[int]:
        """roam's budgets, highest first: ``n`` evenly spaced between the lowest reachable
        just-in-time peak and the plan without recomputation, the baselines' memories and
        the midway budget, rounded up to the alignment."""
        bp, a = self.bp, alignment_bytes
        hi = bp.base.arena_bytes
        lo = bp.lowest_bytes()
        by_name = {p.method: p.peak_bytes for p in self.points}
        if "none" in by_name and "checkpoint_blocks" in by_name:  # the "midway" budget
            self.extra_budgets.append((by_name["none"] + by_name["checkpoint_blocks"]) // 2)
        grid = [int(lo + (hi - lo) * i / max(n - 1, 1)) for i in range(n)]
        # a baseline's arena below roam's lowest just-in-time peak is tried too: the
        # portfolio holds that baseline's drop set, and the planner's order reaches lower
        # than the JIT one
        return sorted({-(-b // a) * a for b in grid if b >= lo}
                      | {-(-b // a) * a for b in self.extra_budgets}, reverse=True)


def recompute_frontier(graph: Graph, config: PlannerConfig, *,
                       budgets: int = 8, baselines: bool = True,
                       plans: dict[str, Plan] | None = None,
                       extra_baselines: Mapping[str, Sequence[TensorId]] | None = None,
                       portfolio: bool = True, fewest_flops: bool = True,
                       progress: Callable[[PlanProgress], None] | None = None,
                       cancel: CancelToken = None, executor: cf.Executor | None = None,
                       on_plan: Callable[[Graph], None] | None = None
                       ) -> tuple[int, list[FrontierPoint], list[str]]:
    """roam at ``budgets`` budgets (plus each baseline's memory and the midway budget between
    no recomputation and every block) and every baseline policy.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        Planner settings.
    budgets : int
        Evenly spaced budgets between the lowest reachable peak and the plan without
        recomputation.
    baselines : bool
        Also score the module-structured baselines (the registry
        :data:`~roam_core.recompute.baselines.BASELINES`).
    plans : dict, optional
        Filled with every plan made, by label (``"roam@<bytes>"``, baseline names).
    extra_baselines : Mapping of str to sequence of TensorId, optional
        More baselines given as drop sets, by method name (torch's min-cut partitioner's
        decisions mapped onto the graph, :mod:`roam_core.trace.min_cut`); planned like the
        others, and roam is planned at each one's memory too; they are also seeds of
        roam's portfolio.
    portfolio : bool
        Let roam try the baselines' and seeds' drop sets beside its greedy prefix at each
        budget (:class:`~roam_core.planner.budget.BudgetPlanner`).
    fewest_flops : bool
        With the portfolio: at each budget where a candidate that fits has fewer extra FLOPs
        than the objective's pick (more bytes moved), plan it too and add it as a second roam
        point (``kept``: ``"<label>, fewest FLOPs"``,
        :meth:`~roam_core.planner.budget.BudgetPlanner.plan_fewest_flops`), so that the roam
        points are a frontier in (peak, FLOPs) as well as in (peak, FLOPs + bytes moved).
    progress, cancel, executor, on_plan
        As for :class:`~roam_core.planner.budget.BudgetPlanner`: passed to every plan
        without a budget, and ``on_plan`` called before each.

    Returns
    -------
    (int, list of FrontierPoint, list of str)
        The step's FLOPs without recomputation, the points, and notes.
    """
    bp = BudgetPlanner(graph, config, seeds=extra_baselines, portfolio=portfolio,
                       progress=progress, cancel=cancel, executor=executor, on_plan=on_plan)
    fr = _Frontier(bp, plans)
    if baselines:
        for name in BASELINES:
            drop = baseline_drop_set(graph, name)
            if drop is None:
                fr.notes.append(f"baseline {name}: not applicable (no repeated blocks or no "
                                "attention in the module structure)")
                continue
            fr.add_baseline(name, drop)
    for name, seed_drop in (extra_baselines or {}).items():
        fr.add_baseline(name, seed_drop)
    for b in fr.budgets(budgets, config.alignment_bytes):
        fr.add_roam(b, portfolio and fewest_flops)
    _monotone(graph, config, fr.made, fr.points, plans, fr.notes)
    return bp.step_flops, fr.points, fr.notes


def _monotone(graph: Graph, config: PlannerConfig, made: Sequence[tuple[int, Plan, int]],
              points: list[FrontierPoint], plans: dict[str, Plan] | None,
              notes: list[str]) -> None:
    """Make roam's frontier monotone in its budget: a plan made for a lower budget also
    fits every higher one, so where it costs less (FLOPs + ``bytes_weight`` x bytes moved)
    than the plan made for a higher budget, that budget gets it (the budgets are planned
    independently, each from its own pruned candidates, so without this a higher budget
    can end dearer than a lower one)."""
    w = config.recompute.bytes_weight

    def cost(p: Plan) -> float:
        flops, moved = recompute_cost(graph, p.recompute)
        return flops + w * moved

    best: tuple[int, Plan, int] | None = None
    for b, p, i in sorted(made, key=lambda t: t[0]):
        if best is not None and best[1].arena_bytes <= b and cost(best[1]) < cost(p):
            lower = points[best[2]]
            notes.append(f"roam at {format_bytes(b)}: the plan made for "
                         f"{format_bytes(best[0])} fits and costs less "
                         f"(+{lower.extra_flops:,} FLOPs instead of +{p.extra_flops:,}): kept")
            points[i] = replace(lower, budget_bytes=b)
            if plans is not None:
                plans[f"roam@{b}"] = best[1]
            continue
        best = (b, p, i)
