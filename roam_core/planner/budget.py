"""Planning under a memory budget: recomputation chosen with the order and the layout.

:func:`plan_with_budget` (reached through ``make_plan(graph, PlannerConfig(budget_bytes=B))``):

1. plan without recomputation (the pipeline,
   :func:`~roam_core.planner.pipeline.plan_without_budget`); if its arena fits, that is the
   answer;
2. run the greedy drop trajectory (:mod:`roam_core.recompute.greedy`) over that order: every
   prefix is a (peak, cost) point, so one run gives the frontier (and ``"auto"`` its knee);
3. on graphs of at most ``recompute.exact_max_ops`` ops, solve the exact CP-SAT model
   (:mod:`roam_core.recompute.exact`: drops and order together); otherwise take the shortest
   prefix whose just-in-time peak fits, re-admit what the budget does not
   need (:func:`~roam_core.recompute.greedy.prune`), expand the graph with its recompute ops
   and plan the expanded graph with the same pipeline (sub-task CP-SAT orders move the
   recompute ops together with everything else; the layout packs the copies);
4. if fragmentation pushes the arena over the budget although the planned peak fits, lay
   the candidate out again with ``recompute.relayout_effort`` times the layout's work
   (:func:`~roam_core.planner.summary.relay_out`); if it still overshoots, try the next
   candidate, then aim lower and repeat.

The result is an ordinary :class:`~roam_core.model.plan.Plan` for the *input* graph with
``recompute`` ops, ``extra_flops``, ``step_flops`` and the cost model's estimates
``extra_seconds`` and ``step_seconds`` on ``device_profile``; it passes the independent
validator.  The searches minimise ``recompute.objective`` (estimated time by default,
:mod:`roam_core.recompute.objective`).

A budget is refused (:class:`~roam_core.base.errors.BudgetInfeasibleError`) only after the
frontier's own plans were tried too (:meth:`BudgetPlanner.plan_at`): a plan made for another
budget, or a baseline's drop set, may fit a budget whose own search overshot, and the
message states the smallest arena actually planned.
:class:`BudgetPlanner` plans one graph at many budgets (``roam frontier``,
:mod:`roam_core.planner.budget_frontier`; ``roam fit``).
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from roam_core.base.cancel import CancelToken
from roam_core.base.errors import BudgetInfeasibleError, ConfigError, PlanInvalidError
from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, OpId, TensorId
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import (
    RecomputeOp,
    expand_graph,
    flops_recorded,
    op_flops,
    recompute_ops_for,
    step_flops,
)
from roam_core.model.stage_cost import StageCost
from roam_core.oracle.validate import check_plan
from roam_core.planner.config import PlannerConfig
from roam_core.planner.pipeline import PlanProgress, plan_without_budget
from roam_core.planner.summary import relay_out
from roam_core.recompute.baselines import BASELINES, baseline_drop_set
from roam_core.recompute.evaluator import Evaluation, JitEvaluator, hoist_views, jit_order
from roam_core.recompute.exact import exact_recompute
from roam_core.recompute.greedy import GreedyTrajectory, TrajectoryPoint, knee, prune
from roam_core.recompute.improve import Candidate, best_of, fewest_flops
from roam_core.recompute.objective import rerun_costs
from roam_core.recompute.windows import WindowReport, refine_windows

__all__ = ["BudgetPlanner", "plan_with_budget"]

#: Labels of the candidates that are roam's own search (greedy prefix, pruned, swapped).
_OWN = ("roam", "roam+swap")

#: How many of the plans already made (cheapest first) :meth:`BudgetPlanner.plan_at` lays
#: out again with more effort before refusing a budget their planned peaks fit (each is a
#: full layout of an expanded graph: minutes on GPT2-XL).
RELAYOUT_MADE = 2

#: Most drops the greedy adds below the lowest baseline's drop set (:meth:`BudgetPlanner.
#: below_baselines`): on GPT2-XL it takes 6 (the embeddings and their dropout).
BELOW_BASELINE_STEPS = 32


@dataclass(frozen=True, slots=True)
class _Choice:
    """A drop set to plan: its recompute ops, its just-in-time order, its FLOPs, its cost in
    the objective and its estimated seconds."""

    dropped: tuple[TensorId, ...]
    recompute: tuple[RecomputeOp, ...]
    order: tuple[OpId, ...]
    extra_flops: int
    extra_cost: float = 0.0
    extra_seconds: float = 0.0


def _choice_of(e: Evaluation) -> _Choice:
    return _Choice(e.dropped, e.recompute, e.order, e.extra_flops, e.extra_cost,
                   e.extra_seconds)


def _check_budget(budget: object) -> None:
    """Refuse a budget that is neither a positive number of bytes nor ``"auto"``.

    Raises
    ------
    ConfigError
        Anything else (``True`` included).
    """
    if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int)
                             or budget <= 0):
        raise ConfigError(f"budget {budget!r}: give a positive number of bytes or 'auto'")


class BudgetPlanner:
    """Plans one graph at many budgets, sharing the plain plan and the greedy trajectory.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        Settings (``budget_bytes`` is ignored here; pass budgets to :meth:`plan_at`).
    seeds : Mapping of str to sequence of TensorId, optional
        More candidate drop sets by name (torch's min-cut decisions): with ``portfolio``,
        each budget also tries them, pruned to the budget (:mod:`roam_core.recompute.improve`).
    portfolio : bool, optional
        At each budget, also try the module-structure baselines' drop sets and ``seeds``
        beside the greedy prefix and keep the cheapest that fits (``False``: the greedy
        prefix alone, until a budget is refused: see :meth:`plan_at`).  Default:
        ``config.recompute.portfolio``.
    progress, cancel, executor
        Passed to every plan without a budget
        (:func:`~roam_core.planner.pipeline.plan_without_budget`): the plain plan and the
        plan of each expanded graph.
    on_plan : callable, optional
        Called with the graph about to be planned, before each of those plans (the input
        graph first, then expanded graphs): a caller counts them for its progress bar.

    Raises
    ------
    ConfigError
        An unknown or uncalibrated ``config.recompute.device_profile``.
    """

    def __init__(self, graph: Graph, config: PlannerConfig, *,
                 seeds: Mapping[str, Sequence[TensorId]] | None = None,
                 portfolio: bool | None = None,
                 progress: Callable[[PlanProgress], None] | None = None,
                 cancel: CancelToken = None, executor: cf.Executor | None = None,
                 on_plan: Callable[[Graph], None] | None = None) -> None:
        self.graph, self.config = graph, config
        self.seeds = dict(seeds or {})
        self.portfolio = config.recompute.portfolio if portfolio is None else bool(portfolio)
        #: what a re-run of each op costs (the objective) and its estimated seconds
        self.costs = rerun_costs(graph, config.recompute)
        #: per just-in-time target: (FLOPs, bytes moved, seconds) of roam's own search (greedy
        #: prefix pruned), to report what the portfolio adds
        self.own_costs: dict[int, tuple[int, int, float]] = {}
        #: after :meth:`plan_at`: (candidate kept, its target), ``None`` without recomputation
        self.last_pick: tuple[str, int] | None = None
        # the value contract's 64 KiB floor is not taken here: an arena that much above its
        # peak can miss a budget its peak fits, and a fit bought with recomputation costs
        # more than the polishing (the relative gap, 0.01 %, stays)
        self.plain = replace(config, budget_bytes=None, good_enough_bytes=0)
        self._progress, self._cancel, self._executor = progress, cancel, executor
        self._on_plan = on_plan
        self.step_flops = step_flops(graph)
        #: estimated seconds of the step without recomputation on the device profile
        self.step_seconds = float(sum(self.costs.seconds.values()))
        self.notes: list[str] = []
        if not flops_recorded(graph):
            self.notes.append("the graph has no per-op FLOPs or bytes (traced before roam "
                              "recorded them): FLOPs are estimated from the matrix products "
                              "only and bytes from the storage sizes; re-trace for torch's "
                              "counts")
        self.base = self._plan(graph)
        self._greedy: GreedyTrajectory | None = None
        self._single: GreedyTrajectory | None = None
        self._cache: dict[tuple[int, int, bool], list[tuple[str, _Choice]]] = {}
        self._others: list[tuple[str, tuple[TensorId, ...]]] | None = None
        self._below_done = False
        self._below_found: tuple[str, tuple[TensorId, ...]] | None = None
        #: the whole portfolio per just-in-time target (for :meth:`plan_fewest_flops`)
        self._portfolio: dict[int, list[Candidate]] = {}
        #: per just-in-time target: what the exact windows did (``recompute.windows``)
        self.window_reports: dict[int, WindowReport] = {}
        #: plans of expanded graphs by (recompute ops, order): a drop set chosen at several
        #: budgets (or a baseline's, chosen by roam) is planned once
        self._planned: dict[tuple[tuple[RecomputeOp, ...], tuple[OpId, ...]], Plan] = {}
        #: every finished plan with recomputation made so far (the fallback of a refused
        #: budget looks here first)
        self.made: list[Plan] = []
        #: the drop set and the method of each plan in ``made`` (to lay it out again)
        self._made_from: list[tuple[_Choice, str]] = []
        #: keys of ``_planned`` laid out again with more effort (:meth:`_relayout_pays`)
        self._relaid: set[tuple[tuple[RecomputeOp, ...], tuple[OpId, ...]]] = set()
        self._swept = False

    @property
    def device_profile(self) -> str:
        """The name of the profile the seconds are estimated on."""
        return self.costs.profile.name

    def _plan(self, graph: Graph) -> Plan:
        """The plan of ``graph`` without recomputation (the input or an expanded graph)."""
        if self._on_plan is not None:
            self._on_plan(graph)
        return plan_without_budget(graph, self.plain, progress=self._progress,
                                   cancel=self._cancel, executor=self._executor)

    def other_candidates(self) -> list[tuple[str, tuple[TensorId, ...]]]:
        """The portfolio's drop sets besides the greedy prefix: baselines, the lowest
        baseline continued by the greedy (:meth:`below_baselines`), then seeds."""
        if self._others is None:
            out: list[tuple[str, tuple[TensorId, ...]]] = []
            for name in BASELINES:
                d = baseline_drop_set(self.graph, name)
                if d:
                    out.append((name, tuple(d)))
            below = self._below(out)
            out.extend([below] if below is not None else [])
            out.extend((k, tuple(v)) for k, v in self.seeds.items() if v)
            self._others = out
        return self._others

    def below_baselines(self) -> tuple[str, tuple[TensorId, ...]] | None:
        """``("<baseline>+greedy", drops)``: the drop set of the baseline with the lowest
        just-in-time peak, continued by the greedy (at most :data:`BELOW_BASELINE_STEPS`
        more drops), or ``None`` when the greedy lowers it no further.

        The module-structure baselines keep what lies outside the blocks (GPT-2's
        embeddings and their dropout, the input of the first block), as
        ``torch.utils.checkpoint`` around every block does; the greedy drops what of it
        still lowers the peak, so roam's lowest point lies below the real every-block
        checkpoint by that margin and not only by the luck of the layout.
        """
        self.other_candidates()
        return self._below_found

    def _below(self, baselines: Sequence[tuple[str, tuple[TensorId, ...]]]
               ) -> tuple[str, tuple[TensorId, ...]] | None:
        if self._below_done:
            return self._below_found
        self._below_done = True
        if not baselines:
            return None
        ev = self._evaluator()
        name, drop = min(baselines, key=lambda nd: (ev.evaluate(nd[1]).peak_bytes, nd[0]))
        t = GreedyTrajectory(self.graph, self.base.order, evaluator=ev, start=drop).run(
            max_steps=len(drop) + BELOW_BASELINE_STEPS)
        if t.current.peak_bytes < t.points[0].peak_bytes:
            self._below_found = (f"{name}+greedy", tuple(t.dropped))
        return self._below_found

    def _evaluator(self) -> JitEvaluator:
        """The just-in-time evaluator over the plain order (the greedy run's)."""
        if self._greedy is None:
            self._greedy = GreedyTrajectory(self.graph, self.base.order,
                                            alignment_bytes=self.config.alignment_bytes,
                                            costs=self.costs)
        return self._greedy.evaluator

    def _greedy_until(self, peak_bytes: int | None = None) -> GreedyTrajectory:
        """The greedy run over the plain order, advanced until its peak is at most
        ``peak_bytes`` (or to its end): a budget pays only for the prefix it needs, and
        later budgets go on from there."""
        self._evaluator()
        assert self._greedy is not None
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
                                            evaluator=self._greedy.evaluator,
                                            group_moves=False)
        return self._single

    @property
    def trajectory(self) -> tuple[JitEvaluator, list[TensorId], list[TrajectoryPoint]]:
        """(evaluator, drop sequence, points) of the whole greedy run over the plain order."""
        t = self._greedy_until()
        return t.evaluator, t.dropped, t.points

    def knee_bytes(self) -> int:
        """The budget ``"auto"`` stands for: the peak at the trajectory's knee."""
        return max(knee(self.trajectory[2]).peak_bytes, 1)

    def lowest_bytes(self) -> int:
        """The lowest just-in-time peak of the trajectory (with group moves, or one
        storage at a time where that goes lower): an estimate, not a planned arena."""
        low = min(p.peak_bytes for p in self.trajectory[2])
        return min(low, min(p.peak_bytes for p in self._single_run().run().points))

    def frontier_budgets(self, n: int, baseline_arenas: Mapping[str, int]) -> list[int]:
        """The budgets ``roam frontier`` plans roam at, highest first: ``n`` evenly spaced
        between the lowest just-in-time peak and the plan without recomputation, each
        baseline's arena, the arena of the lowest baseline continued by the greedy (with
        the portfolio, :meth:`below_baselines`) and the midway budget between no
        recomputation and every block, rounded up to the alignment."""
        a = self.config.alignment_bytes
        hi, lo = self.base.arena_bytes, self.lowest_bytes()
        extra = list(baseline_arenas.values())
        below = self.below_baselines() if self.portfolio else None
        if below is not None:  # roam's lowest point: the lowest baseline, continued
            try:
                extra.append(self.plan_for_drops(below[1], below[0]).arena_bytes)
            except PlanInvalidError:
                pass
        if "none" in baseline_arenas and "checkpoint_blocks" in baseline_arenas:
            extra.append((baseline_arenas["none"] + baseline_arenas["checkpoint_blocks"]) // 2)
        grid = [int(lo + (hi - lo) * i / max(n - 1, 1)) for i in range(n)]
        # a baseline's arena below roam's lowest just-in-time peak is tried too: the
        # portfolio holds that baseline's drop set, and the planner's order reaches lower
        # than the JIT one
        # a budget of 0 bytes is no budget (a step that allocates nothing needs none)
        return sorted(({-(-b // a) * a for b in grid if b >= lo}
                       | {-(-b // a) * a for b in extra}) - {0}, reverse=True)

    def _choice(self, target: int, exact: bool, notes: list[str], last_resort: bool = False
                ) -> list[tuple[str, _Choice]] | None:
        """The drop sets to plan for a just-in-time ``target``, cheapest first (``None``:
        nothing to try)."""
        if exact:
            cfg = self.config
            ex = exact_recompute(self.graph, target, alignment_bytes=cfg.alignment_bytes,
                                 costs=self.costs,
                                 time_limit_s=cfg.recompute.exact_time_limit_s)
            if ex.status in ("optimal", "feasible"):
                notes.append(f"exact recomputation model: {ex.status}, cost {ex.cost:.4g} "
                             f"(bound {ex.best_bound:.4g}) in {ex.wall_time_s:.1f} s")
                return [("roam", _Choice(ex.dropped, ex.recompute, ex.order, ex.extra_flops,
                                         ex.cost or 0.0, ex.extra_seconds))]
            if ex.status == "infeasible":
                return None
        t = self._greedy_until(target)  # the same prefix as the whole run's
        points = t.points
        idx = next((i for i, p in enumerate(points) if p.peak_bytes <= target), None)
        # where the greedy prefix does not reach, the portfolio's candidates may (also when
        # aiming lower after an overshoot: the lowest baseline, continued)
        if idx is None and not (self.portfolio and self.other_candidates()):
            return None
        key = (-1 if idx is None else idx, target, last_resort)
        if key not in self._cache:
            prefix = None if idx is None else tuple(t.dropped[:points[idx].n_dropped])
            if self.portfolio:
                self._cache[key] = self._portfolio_choices(t.evaluator, prefix, target,
                                                           last_resort)
            else:
                assert prefix is not None
                self._cache[key] = self._greedy_choices(t.evaluator, prefix, target)
        return self._cache[key]

    def _greedy_choices(self, ev: JitEvaluator, prefix: tuple[TensorId, ...], target: int
                        ) -> list[tuple[str, _Choice]]:
        """The greedy prefix, pruned, then refined by windows when they are on."""
        e = prune(ev, prefix, target)
        self.own_costs[target] = (e.extra_flops, e.extra_bytes, e.extra_seconds)
        ref = self._windows(ev, e, target)
        first = [("roam+windows", ref)] if ref is not e else []
        return [(label, _choice_of(x)) for label, x in [*first, ("roam", e)]]

    def _portfolio_choices(self, ev: JitEvaluator, prefix: tuple[TensorId, ...] | None,
                           target: int, last_resort: bool) -> list[tuple[str, _Choice]]:
        """The portfolio (greedy prefix when one fits, baselines, seeds), the cheapest that
        fits refined by windows; the fitting ones then, as a last resort, a few that do not
        (the planner's order may fit what the just-in-time order does not)."""
        first = [("roam", prefix)] if prefix is not None else []
        cands = best_of(ev, target, [*first, *self.other_candidates()], keep_unfit=True)
        if cands and cands[0].fits:
            e = self._windows(ev, cands[0].evaluation, target)
            if e is not cands[0].evaluation:
                cands.insert(0, Candidate(f"{cands[0].label}+windows", e, e.extra_cost))
        self._portfolio[target] = cands
        if prefix is not None:  # roam's own search: greedy prefix, pruned, swapped
            own = min((c for c in cands if c.label in _OWN), key=lambda c: c.cost).evaluation
            self.own_costs[target] = (own.extra_flops, own.extra_bytes, own.extra_seconds)
        fit = [c for c in cands if c.fits][:3]
        fit += [c for c in cands if c.label == "roam" and all(c is not f for f in fit)]
        if last_resort:
            unfit = [c for c in cands if not c.fits]
            first_other = None if prefix is not None else self.other_candidates()[0][0]
            fit += [c for c in unfit if c.label != first_other][:max(0, 2 - len(fit))]
            low = min(unfit, key=lambda c: (c.evaluation.peak_bytes, c.cost), default=None)
            if (low is not None and not any(c.fits for c in cands)
                    and all(low is not f for f in fit)):
                fit.append(low)  # nothing fits: the lowest just-in-time peak too
        return [(c.label, _choice_of(c.evaluation)) for c in fit]

    def _windows(self, ev: JitEvaluator, start: Evaluation, target: int) -> Evaluation:
        """``start`` refined by exact CP-SAT windows (``recompute.windows`` models at most;
        the evaluation itself when off, when it does not fit or when nothing improved)."""
        cfg = self.config
        if cfg.recompute.windows <= 0 or start.peak_bytes > target or not start.dropped:
            return start
        e, rep = refine_windows(ev, start, target, window_size=cfg.recompute.window_size,
                                max_windows=cfg.recompute.windows,
                                time_limit_s=cfg.recompute.window_time_limit_s)
        self.window_reports[target] = rep
        return e

    def plan_fewest_flops(self, budget: int, than: Plan, *, max_plans: int = 3) -> Plan | None:
        """At ``budget``, a plan with fewer extra FLOPs than ``than`` (the objective's pick at
        the same budget, :meth:`plan_at`), when the portfolio holds one whose arena fits.

        The objective (estimated time) may keep a plan with a few more FLOPs and far fewer
        bytes moved; this gives the other end, so that ``roam frontier`` is a frontier in
        (peak, FLOPs) as well as in (peak, time).  The portfolio's candidates at ``budget``
        whose just-in-time peak fits are taken fewest FLOPs first, pruned by FLOPs alone
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
        for c in fewest_flops(t.evaluator, budget, cands, than.extra_flops)[:max_plans]:
            plan = self._finish(_choice_of(c.evaluation), budget,
                                [f"portfolio: the candidate with the fewest extra FLOPs "
                                 f"({c.label.split(',')[0]}'s drop set)"], "roam")
            if plan.arena_bytes <= budget and plan.extra_flops < than.extra_flops:
                self.last_pick = (c.label, budget)
                return plan
        return None

    def plan_other(self, other: Graph) -> Plan:
        """Another graph (a peer traced as its own graph) planned by the same stages, without
        a budget, with its step's estimated seconds on the same profile."""
        plan = self._plan(other)
        costs = rerun_costs(other, self.config.recompute, self.costs.profile)
        return replace(plan, step_flops=step_flops(other),
                       step_seconds=float(sum(costs.seconds.values())),
                       device_profile=self.device_profile)

    def plan_for_drops(self, dropped: Sequence[TensorId], label: str = "roam") -> Plan:
        """Plan a given drop set (a baseline policy) with the same order and layout stages."""
        rops = recompute_ops_for(self.graph, dropped)
        order = jit_order(hoist_views(self.graph, self.base.order), rops, self.graph)
        flops = sum(op_flops(self.graph, self.graph.op(r.source)) for r in rops)
        cost = sum(self.costs.cost[r.source] for r in rops)
        secs = sum(self.costs.seconds[r.source] for r in rops)
        return self._finish(_Choice(tuple(dropped), rops, order, flops, cost, secs), None, [],
                            label)

    def _finish(self, c: _Choice, budget: int | None, notes: list[str], method: str,
                stages: tuple[StageCost, ...] = ()) -> Plan:
        """The plan of the drop set ``c`` (its expanded graph planned once), with ``notes``
        and ``stages`` (what chose the drop set: the exact windows) before the planner's."""
        g = self.graph
        key = (tuple(c.recompute), tuple(c.order))
        p2 = self._planned.get(key)
        eg: Graph | None = None
        if p2 is None:  # the same drop set at another budget, or a baseline's: planned once
            eg = expand_graph(g, c.recompute, order=c.order)
            p2 = self._planned[key] = self._plan(eg)
        if self._relayout_pays(p2, budget, key):
            self._relaid.add(key)
            eg = eg if eg is not None else expand_graph(g, c.recompute, order=c.order)
            effort = self.plain.arena.with_effort(self.config.recompute.relayout_effort)
            p2 = self._planned[key] = relay_out(eg, p2, effort, self._cancel)
        sf, ss = self.step_flops, self.step_seconds
        plan = replace(
            p2, graph_fingerprint=g.fingerprint(), graph_name=g.name, method=method,
            baseline_peak_bytes=self.base.baseline_peak_bytes,
            recompute=tuple(c.recompute), extra_flops=int(c.extra_flops), step_flops=sf,
            extra_seconds=float(c.extra_seconds), step_seconds=ss,
            device_profile=self.device_profile,
            settings={**self.config.to_dict(), "method": method, "budget_bytes": budget},
            stages=(*stages, *p2.stages),
            notes=(*p2.notes, *self.notes, *notes,
                   f"recomputes {len(c.recompute)} ops ({len(c.dropped)} storages dropped) "
                   f"for +{1e3 * c.extra_seconds:.3f} ms "
                   f"({100 * c.extra_seconds / max(ss, 1e-12):.2f}% of the step, estimated "
                   f"on {self.device_profile}), +{100 * c.extra_flops / max(sf, 1):.2f}% FLOPs"
                   + (f"; budget {format_bytes(budget)}" if budget is not None else "")))
        bad = check_plan(g, plan)
        if bad:
            raise PlanInvalidError(bad)
        self.made.append(plan)
        self._made_from.append((c, method))
        return plan

    def _relayout_pays(self, p2: Plan, budget: int | None,
                       key: tuple[tuple[RecomputeOp, ...], tuple[OpId, ...]]) -> bool:
        """Whether ``p2`` (an expanded graph's plan) is worth laying out again: its planned
        peak fits ``budget`` but its arena does not (the overshoot is the layout's), it was
        not laid out again before, and ``recompute.relayout_effort`` is on."""
        return (budget is not None and self.config.recompute.relayout_effort > 0
                and p2.planned_peak_bytes <= budget < p2.arena_bytes and key not in self._relaid)

    def relaid_keys(self) -> frozenset[tuple[tuple[RecomputeOp, ...], tuple[OpId, ...]]]:
        """The drop sets (recompute ops, order) laid out again with more effort so far."""
        return frozenset(self._relaid)

    def _timed(self, plan: Plan) -> Plan:
        """``plan`` (without recomputation) with the step's estimated seconds."""
        return replace(plan, step_flops=self.step_flops, step_seconds=self.step_seconds,
                       device_profile=self.device_profile)

    def plan_at(self, budget: int | str) -> Plan:
        """The cheapest plan found whose arena is at most ``budget`` (or ``"auto"``).

        The search for ``budget`` (the greedy prefix or the portfolio, aiming lower while
        the arena overshoots) comes first; when it finds nothing, every plan this planner
        made so far and the frontier's own plans (:meth:`sweep`: roam at the frontier's
        budgets with the portfolio, and each baseline's drop set) are tried, and the
        cheapest whose arena fits is returned, so a budget at or above any peak the
        frontier reaches is never refused.  A candidate whose planned peak fits but whose
        arena overshoots is laid out again with more effort first
        (``recompute.relayout_effort``), in the search and, for the cheapest made plans,
        before a refusal.

        Raises
        ------
        ConfigError
            ``budget`` is neither a positive number of bytes nor ``"auto"``.
        BudgetInfeasibleError
            No plan fits; the message states the smallest arena planned.
        """
        t0 = time.perf_counter()
        g, cfg = self.graph, self.config
        notes: list[str] = []
        self.last_pick = None
        _check_budget(budget)
        if budget == "auto":
            budget = self.knee_bytes()
            k = knee(self.trajectory[2])
            notes.append(f"budget auto: the frontier's knee, {format_bytes(budget)} "
                         f"(+{1e3 * k.extra_seconds:.3f} ms estimated on "
                         f"{self.device_profile}, "
                         f"+{100 * k.extra_flops / max(self.step_flops, 1):.1f}% FLOPs)")
        assert isinstance(budget, int)
        if self.base.arena_bytes <= budget:
            return replace(self._timed(self.base),
                           settings={**cfg.to_dict(), "method": "roam", "budget_bytes": budget},
                           notes=(*self.base.notes, *self.notes, *notes,
                                  "fits the budget without recomputation"))
        plan = self._search(budget, notes)
        if plan is None:
            plan = self._from_made(budget)
        if plan is None and not self._swept:
            self.sweep()
            plan = self._from_made(budget)
        if plan is None and self.relay_out_made(budget):
            plan = self._from_made(budget)
        if plan is not None:
            return replace(plan, solve_seconds=time.perf_counter() - t0)
        smallest = min((p.arena_bytes for p in self.made), default=self.base.arena_bytes)
        raise BudgetInfeasibleError(
            f"graph {g.name!r}: no plan fits {format_bytes(budget)}; the smallest peak roam "
            f"planned with recomputation is {format_bytes(smallest)} (without recomputation "
            f"{format_bytes(self.base.arena_bytes)}; resident "
            f"{format_bytes(self.base.resident_bytes)})", budget, smallest)

    def _search(self, budget: int, notes: list[str]) -> Plan | None:
        """The search for ``budget``: candidates for a just-in-time target, aiming lower
        while the planned arena overshoots (``None``: nothing fitted)."""
        exact = len(self.graph.ops) <= self.config.recompute.exact_max_ops
        target = budget
        for attempt in range(4):
            cs = self._choice(target, exact, notes, last_resort=attempt == 0)
            if not cs:
                return None
            plan, lowest_arena, first_over = self._first_that_fits(cs, budget, target, notes)
            if plan is not None:
                if first_over is None:
                    return plan
                return self._cheaper_aimed_lower(plan, budget, target, first_over, exact, notes)
            target -= max(lowest_arena - budget, self.config.alignment_bytes)
        return None

    def _cheaper_aimed_lower(self, fit: Plan, budget: int, target: int, over: int,
                             exact: bool, notes: list[str]) -> Plan:
        """``fit``, or a cheaper plan: the cheapest candidate overshot ``budget`` (its arena
        ``over``) and a costlier one fitted, so the cheapest candidate for a target lower by
        that overshoot is planned once (GPT2-XL at the real every-block checkpoint's arena:
        every block's drop set pruned to the budget re-runs 3.5 ms less than the candidate
        that fits, but its layout leaves 9.5 MiB of holes above its planned peak)."""
        fit_cost = sum(self.costs.cost[r.source] for r in fit.recompute)
        lower = target - max(over - budget, self.config.alignment_bytes)
        cs = [(lab, c) for lab, c in self._choice(lower, exact, []) or []
              if c.extra_cost < fit_cost][:1]
        if not cs:
            return fit
        pick = self.last_pick
        note = (f"the cheapest candidate's arena overshot by {format_bytes(over - budget)}; "
                "aimed that much lower")
        plan, _, _ = self._first_that_fits(cs, budget, lower, [*notes, note])
        if plan is None:
            self.last_pick = pick
            return fit
        return plan

    def relay_out_made(self, budget: int) -> bool:
        """Lay out again (:meth:`_relayout_pays`) the cheapest :data:`RELAYOUT_MADE` plans
        made so far whose planned peak fits ``budget`` but whose arena does not (a baseline's
        drop set, planned without a budget by :meth:`sweep`, or one made for another
        budget); whether any was."""
        cost = self.costs.cost
        tries = sorted(
            ((sum(cost[r.source] for r in p.recompute), i) for i, p in enumerate(self.made)
             if p.planned_peak_bytes <= budget < p.arena_bytes),
            key=lambda t: t[0])
        done = 0
        for _, i in tries:
            c, method = self._made_from[i]
            key = (tuple(c.recompute), tuple(c.order))
            if done >= RELAYOUT_MADE or key in self._relaid:
                continue
            self._finish(c, budget, [], method)
            done += 1
        return done > 0

    def _from_made(self, budget: int) -> Plan | None:
        """The cheapest plan made so far whose arena fits ``budget`` (a note says where it
        came from), or ``None``."""
        fits = [p for p in self.made if p.arena_bytes <= budget]
        if not fits:
            return None
        cost = self.costs.cost
        best = min(fits, key=lambda p: (sum(cost[r.source] for r in p.recompute),
                                        p.arena_bytes))
        made_for = best.settings.get("budget_bytes")
        why = (f"the plan made for a budget of {format_bytes(made_for)}"
               if isinstance(made_for, int) else f"{best.method}'s drop set")
        self.last_pick = ("roam" if best.method == "roam" else best.method, budget)
        return replace(best, method="roam",
                       settings={**self.config.to_dict(), "method": "roam",
                                 "budget_bytes": budget},
                       notes=(*best.notes, f"the search for {format_bytes(budget)} overshot; "
                                           f"{why} fits it (arena "
                                           f"{format_bytes(best.arena_bytes)})"))

    def sweep(self) -> None:
        """Make the frontier's own plans (once): each baseline's and seed's drop set, and
        roam with the portfolio at the frontier's budgets (:meth:`frontier_budgets`, 8
        evenly spaced).  :meth:`plan_at` calls it before refusing a budget."""
        self._swept = True
        arenas: dict[str, int] = {"none": self.base.arena_bytes}
        for name, drop in self.other_candidates():
            try:
                arenas[name] = self.plan_for_drops(drop, name).arena_bytes
            except PlanInvalidError:
                continue
        if not self.portfolio:
            self.portfolio = True
            self._cache.clear()
        for b in self.frontier_budgets(8, arenas):
            if b >= self.base.arena_bytes:
                continue
            self._search(b, [])

    def _first_that_fits(self, cs: Sequence[tuple[str, _Choice]], budget: int, target: int,
                         notes: list[str]) -> tuple[Plan | None, int, int | None]:
        """Plan the choices for ``target`` cheapest first until an arena fits ``budget``:
        that plan (``last_pick`` says which), or ``None`` and the lowest arena made; third,
        the arena of the cheapest choice when it overshot (``None`` when it fitted)."""
        rep = self.window_reports.get(target)
        over: int | None = None
        first_over: int | None = None
        for label, c in cs:  # cheapest first; the next one when the arena overshoots
            base_label = label.removesuffix("+windows")
            why = [] if base_label in _OWN else [
                f"portfolio: {base_label}'s drop set, pruned to the budget, was cheaper "
                "than roam's greedy prefix"]
            if rep is not None and label.endswith("+windows"):
                why.append(rep.note(self.step_flops))
            elif rep is not None:
                why.append(f"exact windows: {rep.windows} CP-SAT windows, "
                           + ("no cheaper drop set found" if not rep.improved else
                              "their drop set's arena did not fit; this one did")
                           + f" ({rep.cpu_s:.1f} CPU s, {rep.stopped})")
            plan = self._finish(c, budget, [*notes, *why], "roam",
                                () if rep is None else (rep.stage_cost(),))
            if plan.arena_bytes <= budget:
                self.last_pick = (label, target)
                return plan, plan.arena_bytes, first_over
            first_over = plan.arena_bytes if over is None else first_over
            over = plan.arena_bytes if over is None else min(over, plan.arena_bytes)
        assert over is not None
        return None, over, first_over


def plan_with_budget(graph: Graph, config: PlannerConfig, *,
                     progress: Callable[[PlanProgress], None] | None = None,
                     cancel: CancelToken = None, executor: cf.Executor | None = None) -> Plan:
    """Plan ``graph`` so that its arena is at most ``config.budget_bytes``.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        ``budget_bytes`` is an int (bytes, resident included) or ``"auto"``.
    progress, cancel, executor
        As for :func:`~roam_core.planner.facade.make_plan`, passed to every plan without a
        budget that this makes.

    Raises
    ------
    ConfigError
        ``config.budget_bytes`` is neither a positive number of bytes nor ``"auto"``, or
        ``config.recompute.device_profile`` is unknown or not calibrated.
    BudgetInfeasibleError
        No plan fits; the message states the smallest arena planned.
    """
    budget = config.budget_bytes
    _check_budget(budget)
    assert budget is not None
    t0 = time.perf_counter()
    bp = BudgetPlanner(graph, config, progress=progress, cancel=cancel, executor=executor)
    plan = bp.plan_at(budget)
    return replace(plan, solve_seconds=time.perf_counter() - t0)
