"""Planning under a memory budget: recomputation chosen with the order and the layout.

:func:`plan_with_budget` (reached through ``make_plan(graph, PlannerConfig(budget_bytes=B))``):

1. plan without recomputation (ROAM order + layout); if its arena fits, that is the answer;
2. run the greedy drop trajectory (:mod:`roam_core.recompute.greedy`) over that order: every
   prefix is a (peak, cost) point, so one run gives the frontier (and ``"auto"`` its knee);
3. on graphs of at most ``recompute.exact_max_ops`` ops, solve the exact CP-SAT model
   (:mod:`roam_core.recompute.exact`: drops and order together); otherwise take the shortest
   prefix whose just-in-time peak fits, re-admit what the budget does not
   need (:func:`~roam_core.recompute.greedy.prune`), expand the graph with its recompute ops
   and plan the expanded graph with the full ROAM pipeline (sub-task CP-SAT orders move the
   recompute ops together with everything else; the layout packs the copies);
4. if fragmentation pushes the arena over the budget, aim lower and repeat.

The result is an ordinary :class:`~roam_core.model.plan.Plan` for the *input* graph with
``recompute`` ops, ``extra_flops`` and ``step_flops``; it passes the independent validator.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roam_core.base.errors import BudgetInfeasibleError, ConfigError, PlanInvalidError
from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, TensorId
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import (
    expand_graph,
    flops_recorded,
    recompute_cost,
    step_flops,
)
from roam_core.oracle.validate import check_plan
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.greedy import (
    GreedyTrajectory,
    TrajectoryPoint,
    greedy_trajectory,
    knee,
    prune,
)
from roam_core.recompute.improve import Candidate, best_of, fewest_flops
from roam_core.recompute.windows import WindowReport, refine_windows

__all__ = ["BudgetPlanner", "FrontierPoint", "frontier_points", "plan_with_budget",
           "recompute_frontier"]


@dataclass(frozen=True, slots=True)
class _Choice:
    dropped: tuple[Any, ...]
    recompute: tuple[Any, ...]
    order: tuple[Any, ...]
    extra_flops: int


def _no_budget(config: PlannerConfig) -> PlannerConfig:
    return replace(config, budget_bytes=None)


def frontier_points(graph: Graph, base_order: Any, config: PlannerConfig
                    ) -> tuple[JitEvaluator, list[Any], list[TrajectoryPoint]]:
    """The greedy trajectory over ``base_order``: evaluator, drop sequence, points."""
    ev = JitEvaluator(graph, base_order, config.alignment_bytes)
    dropped, points = greedy_trajectory(graph, base_order, evaluator=ev,
                                        alignment_bytes=config.alignment_bytes,
                                        bytes_weight=config.recompute.bytes_weight)
    return ev, dropped, points


class BudgetPlanner:
    """Plans one graph at many budgets, sharing the plain plan and the greedy trajectory.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        Settings (``budget_bytes`` is ignored here; pass budgets to :meth:`plan_at`).
    make_plan : callable
        The planner without a budget.
    seeds : Mapping of str to sequence of TensorId, optional
        More candidate drop sets by name (torch's min-cut decisions): with ``portfolio``,
        each budget also tries them, pruned to the budget (:mod:`roam_core.recompute.improve`).
    portfolio : bool, optional
        At each budget, also try the module-structure baselines' drop sets and ``seeds``
        beside the greedy prefix and keep the cheapest that fits (``False``: the greedy
        prefix alone).  Default: ``config.recompute.portfolio``.
    **kwargs
        Forwarded to ``make_plan``.
    """

    def __init__(self, graph: Graph, config: PlannerConfig, *, make_plan: Any,
                 seeds: Mapping[str, Sequence[TensorId]] | None = None,
                 portfolio: bool | None = None, **kwargs: Any) -> None:
        self.graph, self.config = graph, config
        self.seeds = dict(seeds or {})
        self.portfolio = config.recompute.portfolio if portfolio is None else bool(portfolio)
        #: per just-in-time target: (FLOPs, bytes moved) of roam's own search (greedy prefix
        #: pruned), to report what the portfolio adds
        self.own_costs: dict[int, tuple[int, int]] = {}
        #: after :meth:`plan_at`: (candidate kept, its target), ``None`` without recomputation
        self.last_pick: tuple[str, int] | None = None
        self.plain = _no_budget(config)
        self.make_plan, self.kwargs = make_plan, kwargs
        self.step_flops = step_flops(graph)
        self.notes: list[str] = []
        if not flops_recorded(graph):
            self.notes.append("the graph has no per-op FLOPs (traced before roam recorded "
                              "them): FLOPs are estimated from the matrix products only; "
                              "re-trace for torch's counts")
        self.base = make_plan(graph, self.plain, **kwargs)
        self._greedy: GreedyTrajectory | None = None
        self._single: GreedyTrajectory | None = None
        self._cache: dict[tuple[int, int, bool], list[tuple[str, _Choice]]] = {}
        self._others: list[tuple[str, tuple[TensorId, ...]]] | None = None
        #: the whole portfolio per just-in-time target (for :meth:`plan_fewest_flops`)
        self._portfolio: dict[int, list[Candidate]] = {}
        #: per just-in-time target: what the exact windows did (``recompute.windows``)
        self.window_reports: dict[int, WindowReport] = {}
        #: plans of expanded graphs by (recompute ops, order): a drop set chosen at several
        #: budgets (or a baseline's, chosen by roam) is planned once
        self._planned: dict[tuple[tuple[Any, ...], tuple[Any, ...]], Plan] = {}

    def other_candidates(self) -> list[tuple[str, tuple[TensorId, ...]]]:
        """The portfolio's drop sets besides the greedy prefix: baselines, then seeds."""
        if self._others is None:
            from roam_core.recompute.baselines import BASELINES, baseline_drop_set

            out: list[tuple[str, tuple[TensorId, ...]]] = []
            for name in BASELINES:
                d = baseline_drop_set(self.graph, name)
                if d:
                    out.append((name, tuple(d)))
            out.extend((k, tuple(v)) for k, v in self.seeds.items() if v)
            self._others = out
        return self._others

    def _greedy_until(self, peak_bytes: int | None = None) -> GreedyTrajectory:
        """The greedy run over the plain order, advanced until its peak is at most
        ``peak_bytes`` (or to its end): a budget pays only for the prefix it needs, and
        later budgets go on from there."""
        if self._greedy is None:
            self._greedy = GreedyTrajectory(self.graph, self.base.order,
                                            alignment_bytes=self.config.alignment_bytes,
                                            bytes_weight=self.config.recompute.bytes_weight)
        t = self._greedy.run(stop_at_bytes=peak_bytes)
        if peak_bytes is None or t.current.peak_bytes <= peak_bytes:
            return t
        # group moves may end above a peak that single moves reach (the copies of a
        # rebuilt chain pile up in the backward): below the grouped run's end, the
        # one-storage-at-a-time run (same evaluator) answers
        return self._single_run().run(stop_at_bytes=peak_bytes)

    def _single_run(self) -> GreedyTrajectory:
        if self._single is None:
            assert self._greedy is not None
            self._single = GreedyTrajectory(self.graph, self.base.order,
                                            alignment_bytes=self.config.alignment_bytes,
                                            bytes_weight=self.config.recompute.bytes_weight,
                                            evaluator=self._greedy.evaluator,
                                            group_moves=False)
        return self._single

    @property
    def trajectory(self) -> tuple[JitEvaluator, list[Any], list[TrajectoryPoint]]:
        """(evaluator, drop sequence, points) of the whole greedy run over the plain order."""
        t = self._greedy_until()
        return t.evaluator, t.dropped, t.points

    def knee_bytes(self) -> int:
        """The budget ``"auto"`` stands for: the peak at the trajectory's knee."""
        k = knee(self.trajectory[2], self.config.recompute.bytes_weight)
        return max(k.peak_bytes, 1)

    def lowest_bytes(self) -> int:
        """The lowest just-in-time peak of the trajectory (with group moves, or one
        storage at a time where that goes lower)."""
        low = min(p.peak_bytes for p in self.trajectory[2])
        return min(low, min(p.peak_bytes for p in self._single_run().run().points))

    def _choice(self, target: int, exact: bool, notes: list[str], last_resort: bool = False
                ) -> list[tuple[str, _Choice]] | None:
        g, cfg, w = self.graph, self.config, self.config.recompute.bytes_weight
        if exact:
            from roam_core.recompute.exact import exact_recompute

            ex = exact_recompute(g, target, alignment_bytes=cfg.alignment_bytes,
                                 bytes_weight=w, time_limit_s=cfg.recompute.exact_time_limit_s)
            if ex.status in ("optimal", "feasible"):
                notes.append(f"exact recomputation model: {ex.status}, cost {ex.cost:.0f} "
                             f"(bound {ex.best_bound:.0f}) in {ex.wall_time_s:.1f} s")
                return [("roam", _Choice(ex.dropped, ex.recompute, ex.order,
                                         ex.extra_flops))]
            if ex.status == "infeasible":
                return None
        t = self._greedy_until(target)  # the same prefix as the whole run's
        ev, dropped, points = t.evaluator, t.dropped, t.points
        idx = next((i for i, p in enumerate(points) if p.peak_bytes <= target), None)
        if idx is None and not (self.portfolio and self.other_candidates()):
            return None
        if idx is None and not last_resort:
            return None
        key = (-1 if idx is None else idx, target, last_resort)
        if key not in self._cache:
            prefix = () if idx is None else tuple(dropped[:points[idx].n_dropped])
            if self.portfolio:
                first = [("roam", prefix)] if idx is not None else []
                cands = best_of(ev, target, [*first, *self.other_candidates()], w,
                                keep_unfit=True)
                if cands and cands[0].fits:
                    e = self._windows(ev, cands[0].evaluation, target)
                    if e is not cands[0].evaluation:
                        cands.insert(0, Candidate(f"{cands[0].label}+windows", e,
                                                  e.cost(w)))
                self._portfolio[target] = cands
                if idx is not None:  # roam's own search: greedy prefix, pruned, swapped
                    own = min((c for c in cands if c.label in ("roam", "roam+swap")),
                              key=lambda c: c.cost)
                    self.own_costs[target] = (own.evaluation.extra_flops,
                                              own.evaluation.extra_bytes)
                # the fitting ones, then (last resort: the planner's order may fit what
                # the just-in-time order does not) the cheapest two that do not
                fit = [c for c in cands if c.fits][:3]
                fit += [c for c in cands if c.label == "roam" and all(c is not f for f in fit)]
                if last_resort:
                    unfit = [c for c in cands if not c.fits]
                    first_other = None if idx is not None else self.other_candidates()[0][0]
                    fit += [c for c in unfit if c.label != first_other][:max(0, 2 - len(fit))]
                    low = min(unfit, key=lambda c: (c.evaluation.peak_bytes, c.cost),
                              default=None)
                    if (low is not None and not any(c.fits for c in cands)
                            and all(low is not f for f in fit)):
                        fit.append(low)  # nothing fits: the lowest just-in-time peak too
                self._cache[key] = [(c.label, _Choice(c.evaluation.dropped,
                                                      c.evaluation.recompute,
                                                      c.evaluation.order,
                                                      c.evaluation.extra_flops))
                                    for c in fit]
            else:
                e = prune(ev, prefix, target, w)
                self.own_costs[target] = (e.extra_flops, e.extra_bytes)
                ref = self._windows(ev, e, target)
                first_c = [("roam+windows", ref)] if ref is not e else []
                self._cache[key] = [(label, _Choice(x.dropped, x.recompute, x.order,
                                                    x.extra_flops))
                                    for label, x in [*first_c, ("roam", e)]]
        return self._cache[key]

    def _windows(self, ev: JitEvaluator, start: Any, target: int) -> Any:
        """``start`` refined by exact CP-SAT windows (``recompute.windows`` models at most;
        the evaluation itself when off, when it does not fit or when nothing improved)."""
        cfg = self.config
        if cfg.recompute.windows <= 0 or start.peak_bytes > target or not start.dropped:
            return start
        e, rep = refine_windows(ev, start, target, cfg.recompute.bytes_weight,
                                window_size=cfg.recompute.window_size,
                                max_windows=cfg.recompute.windows,
                                time_limit_s=cfg.recompute.window_time_limit_s)
        self.window_reports[target] = rep
        return e

    def plan_fewest_flops(self, budget: int, than: Plan, *, max_plans: int = 3) -> Plan | None:
        """At ``budget``, a plan with fewer extra FLOPs than ``than`` (the objective's pick at
        the same budget, :meth:`plan_at`), when the portfolio holds one whose arena fits.

        The objective (FLOPs + ``recompute.bytes_weight`` x bytes moved) may keep a plan
        with a few more FLOPs and far fewer bytes moved; this gives the other end, so that
        ``roam frontier`` is a frontier in (peak, FLOPs) as well as in (peak, FLOPs + bytes).
        The portfolio's candidates at ``budget`` whose just-in-time peak fits are taken
        fewest FLOPs first, pruned by FLOPs alone
        (:func:`~roam_core.recompute.improve.fewest_flops`), and planned by the same
        stages; at most ``max_plans`` plans.  ``None`` without the portfolio, on the
        exact model's graphs (its optimum is the objective's), or when nothing fits.
        ``last_pick`` names the candidate (``"<label>, fewest FLOPs"``).
        """
        cands = self._portfolio.get(budget)
        if (not self.portfolio or cands is None or not than.recompute
                or than.extra_flops <= 0):
            return None
        t = self._greedy_until(budget)
        few = fewest_flops(t.evaluator, budget, cands, than.extra_flops,
                           self.config.recompute.bytes_weight)
        for c in few[:max_plans]:
            e = c.evaluation
            plan = self._finish(_Choice(e.dropped, e.recompute, e.order, e.extra_flops),
                                budget, [f"portfolio: the candidate with the fewest extra "
                                         f"FLOPs ({c.label.split(',')[0]}'s drop set)"],
                                "roam")
            if plan.arena_bytes <= budget and plan.extra_flops < than.extra_flops:
                self.last_pick = (c.label, budget)
                return plan
        return None

    def plan_for_drops(self, dropped: Any, label: str = "roam") -> Plan:
        """Plan a given drop set (a baseline policy) with the same order and layout stages."""
        from roam_core.model.recompute_ops import recompute_ops_for
        from roam_core.recompute.evaluator import hoist_views, jit_order

        rops = recompute_ops_for(self.graph, dropped)
        order = jit_order(hoist_views(self.graph, self.base.order), rops, self.graph)
        flops = sum(_flops_of(self.graph, r.source) for r in rops)
        return self._finish(_Choice(tuple(dropped), rops, order, flops), None, [], label)

    def _finish(self, c: _Choice, budget: int | None, notes: list[str], method: str) -> Plan:
        g = self.graph
        key = (tuple(c.recompute), tuple(c.order))
        p2 = self._planned.get(key)
        if p2 is None:  # the same drop set at another budget, or a baseline's: planned once
            g2 = expand_graph(g, c.recompute, order=c.order)
            p2 = self._planned[key] = self.make_plan(g2, self.plain, **self.kwargs)
        sf = self.step_flops
        plan = replace(
            p2, graph_fingerprint=g.fingerprint(), graph_name=g.name, method=method,
            baseline_peak_bytes=self.base.baseline_peak_bytes,
            recompute=tuple(c.recompute), extra_flops=int(c.extra_flops), step_flops=sf,
            settings={**self.config.to_dict(), "method": method, "budget_bytes": budget},
            notes=(*p2.notes, *self.notes, *notes,
                   f"recomputes {len(c.recompute)} ops ({len(c.dropped)} storages dropped) "
                   f"for +{100 * c.extra_flops / max(sf, 1):.2f}% FLOPs"
                   + (f"; budget {format_bytes(budget)}" if budget is not None else "")))
        bad = check_plan(g, plan)
        if bad:
            raise PlanInvalidError(bad)
        return plan

    def plan_at(self, budget: int | str) -> Plan:
        """The cheapest plan found whose arena is at most ``budget`` (or ``"auto"``).

        Raises
        ------
        BudgetInfeasibleError
            No plan fits; the message states the smallest reachable peak.
        """
        t0 = time.perf_counter()
        g, cfg = self.graph, self.config
        notes: list[str] = []
        self.last_pick = None
        if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int)
                                 or budget <= 0):
            raise ConfigError(f"budget {budget!r}: give a positive number of bytes or 'auto'")
        if budget == "auto":
            budget = self.knee_bytes()
            k = knee(self.trajectory[2], cfg.recompute.bytes_weight)
            notes.append(f"budget auto: the frontier's knee, {format_bytes(budget)} "
                         f"(+{100 * k.extra_flops / max(self.step_flops, 1):.1f}% FLOPs)")
        assert isinstance(budget, int)
        if self.base.arena_bytes <= budget:
            return replace(self.base, step_flops=self.step_flops,
                           settings={**cfg.to_dict(), "method": "roam", "budget_bytes": budget},
                           notes=(*self.base.notes, *self.notes, *notes,
                                  "fits the budget without recomputation"))
        exact = len(g.ops) <= cfg.recompute.exact_max_ops
        target = budget
        best_arena: int | None = None
        for attempt in range(4):
            cs = self._choice(target, exact, notes, last_resort=attempt == 0)
            if not cs:
                break
            over = None
            rep = self.window_reports.get(target)
            for label, c in cs:  # cheapest first; the next one when the arena overshoots
                base_label = label.removesuffix("+windows")
                why = [] if base_label in ("roam", "roam+swap") else [
                    f"portfolio: {base_label}'s drop set, pruned to the budget, was cheaper "
                    "than roam's greedy prefix"]
                if rep is not None and label.endswith("+windows"):
                    why.append(rep.note(self.step_flops))
                elif rep is not None:
                    why.append(f"exact windows: {rep.windows} CP-SAT windows, "
                               + ("no cheaper drop set found" if not rep.improved else
                                  "their drop set's arena did not fit; this one did")
                               + f" ({rep.cpu_s:.1f} CPU s)")
                plan = self._finish(c, budget, [*notes, *why], "roam")
                best_arena = plan.arena_bytes if best_arena is None else min(
                    best_arena, plan.arena_bytes)
                if plan.arena_bytes <= budget:
                    self.last_pick = (label, target)
                    return replace(plan, solve_seconds=time.perf_counter() - t0)
                over = plan.arena_bytes if over is None else min(over, plan.arena_bytes)
            assert over is not None
            target -= max(over - budget, cfg.alignment_bytes)
        lowest = self.lowest_bytes()
        smallest = min(lowest, best_arena) if best_arena is not None else lowest
        raise BudgetInfeasibleError(
            f"graph {g.name!r}: no plan fits {format_bytes(budget)}; the smallest peak roam "
            f"reaches with recomputation is {format_bytes(smallest)} (without recomputation "
            f"{format_bytes(self.base.arena_bytes)}; resident "
            f"{format_bytes(self.base.resident_bytes)})", budget, smallest)


def _flops_of(graph: Graph, op_id: str) -> int:
    from roam_core.model.recompute_ops import op_flops

    return op_flops(graph, graph.op(op_id))


def plan_with_budget(graph: Graph, config: PlannerConfig, *, make_plan: Any,
                     **kwargs: Any) -> Plan:
    """Plan ``graph`` so that its arena is at most ``config.budget_bytes``.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        ``budget_bytes`` is an int (bytes, resident included) or ``"auto"``.
    make_plan : callable
        The planner without a budget (passed in to keep this module below the façade).
    **kwargs
        Forwarded to ``make_plan`` (progress, cancel, executor).

    Raises
    ------
    BudgetInfeasibleError
        No plan fits; the message states the smallest reachable peak.
    """
    budget = config.budget_bytes
    if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int)
                             or budget <= 0):
        raise ConfigError(f"budget {budget!r}: give a positive number of bytes or 'auto'")
    t0 = time.perf_counter()
    plan = BudgetPlanner(graph, config, make_plan=make_plan, **kwargs).plan_at(budget)
    return replace(plan, solve_seconds=time.perf_counter() - t0)


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
    from roam_core.model.recompute_ops import recompute_cost

    return recompute_cost(graph, plan.recompute)[1]


def recompute_frontier(graph: Graph, config: PlannerConfig, *, make_plan: Any,
                       budgets: int = 8, baselines: bool = True,
                       plans: dict[str, Plan] | None = None,
                       extra_baselines: Mapping[str, Sequence[TensorId]] | None = None,
                       portfolio: bool = True, fewest_flops: bool = True,
                       **kwargs: Any) -> tuple[int, list[FrontierPoint], list[str]]:
    """roam at ``budgets`` budgets (plus each baseline's memory and the midway budget between
    no recomputation and every block) and every baseline policy.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        Planner settings.
    make_plan : callable
        The planner without a budget.
    budgets : int
        Evenly spaced budgets between the lowest reachable peak and the plan without
        recomputation.
    baselines : bool
        Also score the module-structured baselines (:mod:`roam_core.recompute.baselines`).
    plans : dict, optional
        Filled with every plan made, by label (``"roam@<bytes>"``, baseline names).
    extra_baselines : Mapping of str to sequence of TensorId, optional
        More baselines given as drop sets, by method name (torch's min-cut partitioner's
        decisions mapped onto the graph, :mod:`roam_core.trace.min_cut`); planned like the
        others, and roam is planned at each one's memory too; they are also seeds of
        roam's portfolio.
    portfolio : bool
        Let roam try the baselines' and seeds' drop sets beside its greedy prefix at each
        budget (:class:`BudgetPlanner`).
    fewest_flops : bool
        With the portfolio: at each budget where a candidate that fits has fewer extra FLOPs
        than the objective's pick (more bytes moved), plan it too and add it as a second roam
        point (``kept``: ``"<label>, fewest FLOPs"``,
        :meth:`BudgetPlanner.plan_fewest_flops`), so that the roam points are a frontier in
        (peak, FLOPs) as well as in (peak, FLOPs + bytes moved).
    **kwargs
        Forwarded to ``make_plan``.

    Returns
    -------
    (int, list of FrontierPoint, list of str)
        The step's FLOPs without recomputation, the points, and notes.
    """
    from roam_core.recompute.baselines import BASELINES, baseline_drop_set

    bp = BudgetPlanner(graph, config, make_plan=make_plan, seeds=extra_baselines,
                       portfolio=portfolio, **kwargs)
    notes: list[str] = list(bp.notes)
    points: list[FrontierPoint] = []
    extra_budgets: list[int] = []
    def add_baseline(name: str, drop: Sequence[TensorId]) -> None:
        p = bp.plan_for_drops(tuple(drop), label=name) if drop else replace(
            bp.base, method=name, step_flops=bp.step_flops)
        points.append(FrontierPoint(name, p.arena_bytes, p.extra_flops, None,
                                    len(p.recompute), _moved(graph, p)))
        extra_budgets.append(p.arena_bytes)
        if plans is not None:
            plans[name] = p

    if baselines:
        for name in BASELINES:
            drop = baseline_drop_set(graph, name)
            if drop is None:
                notes.append(f"baseline {name}: not applicable (no repeated blocks or no "
                             "attention in the module structure)")
                continue
            add_baseline(name, drop)
    for name, drop in (extra_baselines or {}).items():
        add_baseline(name, drop)
    hi = bp.base.arena_bytes
    lo = bp.lowest_bytes()
    by_name = {p.method: p.peak_bytes for p in points}
    if "none" in by_name and "checkpoint_blocks" in by_name:  # the "midway" budget
        extra_budgets.append((by_name["none"] + by_name["checkpoint_blocks"]) // 2)
    grid = [int(lo + (hi - lo) * i / max(budgets - 1, 1)) for i in range(budgets)]
    a = config.alignment_bytes
    # a baseline's arena below roam's lowest just-in-time peak is tried too: the portfolio
    # holds that baseline's drop set, and the planner's order reaches lower than the JIT one
    todo = sorted({-(-b // a) * a for b in grid if b >= lo} | {-(-b // a) * a
                                                               for b in extra_budgets},
                  reverse=True)
    made: list[tuple[int, Plan, int]] = []  # (budget, plan, index in points)
    for b in todo:
        try:
            p = bp.plan_at(b)
        except BudgetInfeasibleError:
            notes.append(f"roam: no plan fits {format_bytes(b)}")
            continue
        made.append((b, p, len(points)))
        pick = bp.last_pick
        own = bp.own_costs.get(pick[1]) if pick is not None else None
        points.append(FrontierPoint("roam", p.arena_bytes, p.extra_flops, b,
                                    len(p.recompute), _moved(graph, p),
                                    pick[0] if pick is not None else "roam",
                                    own[0] if own is not None else p.extra_flops,
                                    own[1] if own is not None else _moved(graph, p)))
        if plans is not None:
            plans[f"roam@{b}"] = p
        q = bp.plan_fewest_flops(b, p) if portfolio and fewest_flops else None
        if q is not None:
            points.append(FrontierPoint("roam", q.arena_bytes, q.extra_flops, b,
                                        len(q.recompute), _moved(graph, q),
                                        bp.last_pick[0] if bp.last_pick else "roam",
                                        points[-1].search_extra_flops,
                                        points[-1].search_extra_bytes_moved))
            if plans is not None:
                plans[f"roam-flops@{b}"] = q
    _monotone(graph, config, made, points, plans, notes)
    return bp.step_flops, points, notes


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
