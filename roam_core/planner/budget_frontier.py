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

from roam_core.base.cancel import CancelToken, as_cancel_flag
from roam_core.base.checks import require_type
from roam_core.base.errors import BudgetInfeasibleError, ConfigError
from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, TensorId
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import op_bytes_moved, recompute_cost, step_flops
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.planner.pipeline import PlanProgress
from roam_core.recompute.baselines import BASELINES, baseline_drop_set
from roam_core.recompute.objective import rerun_costs

__all__ = ["FrontierPoint", "recompute_frontier", "step_time"]


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One point of ``roam frontier``: a method's memory and the time and FLOPs it adds.

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
    extra_seconds : float
        Estimated seconds recomputation adds on the planner's device profile
        (:mod:`roam_core.model.cost_model`).
    search_extra_seconds : float or None
        For roam points: the same of roam's own search.
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
    extra_seconds: float = 0.0
    search_extra_seconds: float | None = None


def step_time(graph: Graph, config: PlannerConfig) -> tuple[float, str]:
    """The step's estimated seconds without recomputation and the device profile's name
    (``config.recompute``: the profile every frontier point's ``extra_seconds`` uses)."""
    costs = rerun_costs(graph, config.recompute)
    return float(sum(costs.seconds.values())), costs.profile.name


def _moved(graph: Graph, plan: Plan) -> int:
    return recompute_cost(graph, plan.recompute)[1]


class _Frontier:
    """The points, notes and plans of one frontier as they are made."""

    def __init__(self, bp: BudgetPlanner, plans: dict[str, Plan] | None) -> None:
        self.bp, self.graph, self.plans = bp, bp.graph, plans
        self.notes: list[str] = list(bp.notes)
        self.points: list[FrontierPoint] = []
        #: each baseline's arena (roam is planned at each one and at the midway one)
        self.arenas: dict[str, int] = {}
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
                                         len(p.recompute), _moved(self.graph, p),
                                         extra_seconds=p.extra_seconds))
        self.arenas[name] = p.arena_bytes
        self._keep(name, p)

    def add_traced(self, name: str, other: Graph) -> None:
        """A peer that ran in the model (torch's checkpointing, traced by roam as its own
        graph): planned by the same order and layout stages, its extra time, FLOPs and bytes
        moved are its step's less this graph's, priced by the same cost model."""
        bp, g = self.bp, self.graph
        p = bp.plan_other(other)
        costs = rerun_costs(other, bp.config.recompute, bp.costs.profile)
        moved = sum(op_bytes_moved(other, o) for o in other.ops) - sum(
            op_bytes_moved(g, o) for o in g.ops)
        self.points.append(FrontierPoint(
            name, p.arena_bytes, step_flops(other) - bp.step_flops, None,
            len(other.ops) - len(g.ops), moved,
            extra_seconds=float(sum(costs.seconds.values())) - bp.step_seconds))
        self.arenas[name] = p.arena_bytes
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
                                         own[1] if own is not None else _moved(g, p),
                                         p.extra_seconds,
                                         own[2] if own is not None else p.extra_seconds))
        self._keep(f"roam@{b}", p)
        q = bp.plan_fewest_flops(b, p) if fewest else None
        if q is not None:
            last = self.points[-1]
            self.points.append(FrontierPoint("roam", q.arena_bytes, q.extra_flops, b,
                                             len(q.recompute), _moved(g, q),
                                             bp.last_pick[0] if bp.last_pick else "roam",
                                             last.search_extra_flops,
                                             last.search_extra_bytes_moved,
                                             q.extra_seconds, last.search_extra_seconds))
            self._keep(f"roam-flops@{b}", q)

    def budgets(self, n: int) -> list[int]:
        """roam's budgets, highest first
        (:meth:`~roam_core.planner.budget.BudgetPlanner.frontier_budgets`)."""
        return self.bp.frontier_budgets(n, self.arenas)


def recompute_frontier(graph: Graph, config: PlannerConfig, *,
                       budgets: int = 8, baselines: bool = True,
                       plans: dict[str, Plan] | None = None,
                       extra_baselines: Mapping[str, Sequence[TensorId]] | None = None,
                       traced_peers: Mapping[str, Graph] | None = None,
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
    traced_peers : Mapping of str to Graph, optional
        Peers that run in the model, by method name: the model under torch's own
        checkpointing traced as its own graph (:mod:`roam_core.zoo.torch_checkpoint`,
        :mod:`roam_core.zoo.autosac`).  Each is planned by the same order and layout stages
        and priced by the same cost model (extra = its step less this one's); roam is
        planned at each one's memory too.
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
        without a budget, and ``on_plan`` called before each.  A cancel also stops the
        frontier between plans: the points made so far are returned, with a note.

    Returns
    -------
    (int, list of FrontierPoint, list of str)
        The step's FLOPs without recomputation, the points, and notes.
    """
    require_type(graph, Graph, "recompute_frontier: graph", ConfigError)
    bp = BudgetPlanner(graph, config, seeds=extra_baselines, portfolio=portfolio,
                       progress=progress, cancel=cancel, executor=executor, on_plan=on_plan)
    fr = _Frontier(bp, plans)
    stop = as_cancel_flag(cancel)
    todo: list[tuple[str, Sequence[TensorId]]] = []
    if baselines:
        for name in BASELINES:
            drop = baseline_drop_set(graph, name)
            if drop is None:
                fr.notes.append(f"baseline {name}: not applicable (no repeated blocks or no "
                                "attention in the module structure)")
                continue
            todo.append((name, drop))
    todo += list((extra_baselines or {}).items())
    for name, seed_drop in todo:
        if _stopped(stop, fr):
            break
        fr.add_baseline(name, seed_drop)
    for name, other in (traced_peers or {}).items():
        if _stopped(stop, fr):
            break
        fr.add_traced(name, other)
    if not _stopped(stop, fr):
        for b in fr.budgets(budgets):
            if _stopped(stop, fr):
                break
            fr.add_roam(b, portfolio and fewest_flops)
    _monotone(bp, fr.made, fr.points, plans, fr.notes)
    return bp.step_flops, fr.points, fr.notes


def _stopped(stop: Callable[[], bool] | None, fr: _Frontier) -> bool:
    """Whether a cancel arrived: the points made so far are kept (and a note says so)."""
    if stop is None or not stop():
        return False
    if not any(n.startswith("cancelled") for n in fr.notes):
        fr.notes.append(f"cancelled after {len(fr.points)} points: the frontier is partial")
    return True


def _monotone(bp: BudgetPlanner, made: Sequence[tuple[int, Plan, int]],
              points: list[FrontierPoint], plans: dict[str, Plan] | None,
              notes: list[str]) -> None:
    """Make roam's frontier monotone in its budget: a plan made for a lower budget also
    fits every higher one, so where it costs less (in the planner's objective) than the
    plan made for a higher budget, that budget gets it (the budgets are planned
    independently, each from its own pruned candidates, so without this a higher budget
    can end dearer than a lower one)."""
    op_cost = bp.costs.cost

    def cost(p: Plan) -> float:
        return sum(op_cost[r.source] for r in p.recompute)

    best: tuple[int, Plan, int] | None = None
    for b, p, i in sorted(made, key=lambda t: t[0]):
        if best is not None and best[1].arena_bytes <= b and cost(best[1]) < cost(p):
            lower = points[best[2]]
            notes.append(f"roam at {format_bytes(b)}: the plan made for "
                         f"{format_bytes(best[0])} fits and costs less "
                         f"(+{1e3 * lower.extra_seconds:.3f} ms instead of "
                         f"+{1e3 * p.extra_seconds:.3f} ms): kept")
            points[i] = replace(lower, budget_bytes=b)
            if plans is not None:
                plans[f"roam@{b}"] = best[1]
            continue
        best = (b, p, i)
