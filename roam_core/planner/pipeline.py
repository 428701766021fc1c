"""The planning pipeline without a budget: graph in, validated
:class:`~roam_core.model.plan.Plan` out.

:func:`plan_without_budget` is the only place that knows the order of the steps (ROAM,
``docs/design/roam_method.md`` §6); :func:`~roam_core.planner.facade.make_plan` (the
planner's one door) runs it, or the budget planner (:mod:`roam_core.planner.budget`), which
runs it on the graph and on each expanded graph:

1. baseline: the eager peak (program order), the lower bound, the best cheap order;
2. weight-update placement rewrites (:mod:`roam_core.ordering.rewrites`): extra control edges
   and a valid reference order;
3. the task tree (:mod:`roam_core.ordering.decompose`) cut from the better of the reference
   order and the best cheap order (when that one honours the rewrites);
4. one CP-SAT ordering solve per sub-task (:mod:`roam_core.ordering.order_ilp`), run through a
   ``concurrent.futures.Executor`` (default: a local process pool), each warm-started from
   the base order; results merged into one order (sub-tasks own disjoint step ranges of the
   base order, so they are independent and the merge is exact);
5. polish: windows around the peak step re-solved (:mod:`roam_core.planner.polish`), then
   the peak-directed search over the whole order on the input graph and, when a gap is left,
   the chain-group bound (:mod:`roam_core.planner.search`); the cheapest tighter bound (the
   forward-value choice bound) is computed before step 3 when the base order is above the
   lower bound, so that a base order it proves optimal skips the sub-task solves (each stops
   at its floor), the polish and the search;
6. the arena layout (:mod:`roam_core.layout.arena_layout`);
7. the guard: the result is never worse than the best baseline order (if it would be, that
   order is returned and ``Plan.notes`` says so), and every plan passes the independent
   validator (:func:`~roam_core.oracle.validate.check_plan`), else ``PlanInvalidError``.

Determinism: each sub-task is solved with one CP-SAT worker, a fixed ``random_seed`` and a
*deterministic* time limit, and results are merged by sub-task id whatever order they finish
in, so a fixed seed gives the same plan on any machine (unless a wall-clock safety limit or
``PlannerConfig.time_limit_s`` cuts a solve short).

Cancellation: ``cancel`` (an ``Event`` or a callable) is checked between sub-tasks and
inside every CP-SAT solve, in-process or in the pool (:mod:`roam_core.planner.pool` hands the
workers a stop file); a cancelled or timed-out run still returns a valid plan (finished and
stopped sub-tasks merged, the base order elsewhere).

Modules: this one runs the steps (each a named function below); :mod:`~roam_core.planner.pool`
solves the sub-tasks, :mod:`~roam_core.planner.polish` re-solves around the peak and
:mod:`~roam_core.planner.summary` lays the order out and assembles the validated plan.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from roam_core.base.cancel import CancelToken, as_cancel_flag
from roam_core.base.collector import gc_paused
from roam_core.base.status import SolveStatus
from roam_core.base.units import format_bytes
from roam_core.model.graph import ControlEdge, Graph, OpId
from roam_core.model.plan import Plan, SolveRecord
from roam_core.model.reach import forget_reachability
from roam_core.model.stage_cost import StageClock, StageCost, worst_stop
from roam_core.oracle.bounds import best_lower_bound
from roam_core.oracle.simulate import MemoryProfile, lifetimes, simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.decompose import TaskTree, decompose
from roam_core.ordering.order_problem import (
    OrderProblem,
    OrderResult,
    build_order_problem,
    merge_all_orders,
)
from roam_core.ordering.registry import (
    DEFAULT_METHODS,
    HeuristicResult,
    best_heuristic_order,
    run_method,
)
from roam_core.ordering.rewrites import place_weight_updates
from roam_core.planner.config import PlannerConfig
from roam_core.planner.polish import polish_peak
from roam_core.planner.pool import solve_subtasks
from roam_core.planner.search import TIGHTER_BOUNDS, search_whole_order, tighter_bound
from roam_core.planner.summary import ChosenOrder, finish_plan

__all__ = ["PlanProgress", "plan_without_budget"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlanProgress:
    """One progress report.

    Parameters
    ----------
    stage : str
        ``"baseline"``, ``"rewrite"``, ``"decompose"``, ``"order"``, ``"layout"``, ``"done"``.
    done, total : int
        Sub-tasks finished / to do in the ``"order"`` stage (0/1 or 1/1 elsewhere).
    best_peak_bytes : int or None
        Best simulated peak known so far (resident bytes included).
    message : str
        A short human-readable line.
    """

    stage: str
    done: int
    total: int
    best_peak_bytes: int | None
    message: str = ""


@dataclass
class _Run:
    """The state of one :func:`make_plan` call shared by its steps."""

    graph: Graph
    config: PlannerConfig
    progress: Callable[[PlanProgress], None] | None
    cancel: CancelToken
    cancel_fn: Callable[[], bool] | None
    t_start: float = field(default_factory=time.perf_counter)
    t_mono: float = field(default_factory=time.monotonic)
    notes: list[str] = field(default_factory=list)
    records: list[SolveRecord] = field(default_factory=list)
    best_peak: int | None = None
    #: what each ordering stage spent and gained (``Plan.stages``; the layout adds its own)
    stages: list[StageCost] = field(default_factory=list)

    @property
    def a(self) -> int:
        return self.config.alignment_bytes

    @property
    def deadline(self) -> float | None:
        limit = self.config.time_limit_s
        return self.t_mono + limit if limit is not None else None

    def cancelled(self) -> bool:
        return self.cancel_fn is not None and bool(self.cancel_fn())

    def emit(self, stage: str, done: int, total: int, message: str) -> None:
        if self.progress is not None:
            self.progress(PlanProgress(stage, done, total, self.best_peak, message))

    def cost(self, stage: str, clock: StageClock, before: int, after: int,
             unit: str = "", done: int = 0, limit: int = 0, stopped: str = "done") -> None:
        """Record ``stage``: the seconds since ``clock`` and the peak bytes it gained."""
        self.stages.append(clock.cost(stage, max(0, before - after), done, limit, unit,
                                      stopped))

    def finish(self, chosen: ChosenOrder, baseline_peak: int, lower: int) -> Plan:
        self.best_peak = chosen.profile.peak_bytes
        return finish_plan(self.graph, self.config, chosen, baseline_peak_bytes=baseline_peak,
                           lower_bound_bytes=lower, records=self.records, notes=self.notes,
                           t_start=self.t_start, cancel=self.cancel, emit=self.emit,
                           stages=self.stages)


@dataclass(frozen=True)
class _Base:
    """The order the sub-tasks start from (step 2) and the graph with the rewrites."""

    rewritten: Graph
    order: tuple[OpId, ...]
    profile: MemoryProfile
    edges: tuple[ControlEdge, ...]


def plan_without_budget(
    graph: Graph,
    config: PlannerConfig = PlannerConfig(),  # noqa: B008 - frozen, never mutated
    *,
    method: str = "roam",
    progress: Callable[[PlanProgress], None] | None = None,
    cancel: CancelToken = None,
    executor: cf.Executor | None = None,
) -> Plan:
    """Plan ``graph`` without recomputation (``config.budget_bytes`` is not looked at).

    The parameters, the result and the errors are those of
    :func:`~roam_core.planner.facade.make_plan`, which calls this without a budget (and
    the budget planner calls it on each expanded graph).  Python's cyclic garbage collector
    is paused meanwhile (see ``make_plan``).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> p = plan_without_budget(tiny_train_step(), PlannerConfig(workers=1, solve_layout=False))
    >>> p.method, p.recompute
    ('roam', ())
    """
    with gc_paused(promote_survivors=True):
        return _pipeline(graph, config, method, progress, cancel, executor)


def _pipeline(graph: Graph, config: PlannerConfig, method: str,
              progress: Callable[[PlanProgress], None] | None, cancel: CancelToken,
              executor: cf.Executor | None) -> Plan:
    run = _Run(graph, config, progress, cancel, as_cancel_flag(cancel))
    clock = StageClock()
    baseline_peak, lower = _eager_and_bound(run)
    if method != "roam":
        return run.finish(_baseline_method(run, method), baseline_peak, lower)
    heur, reference = _best_baseline(run)
    run.cost("baselines", clock, baseline_peak, heur.profile.peak_bytes)
    clock = StageClock()
    base = _rewrite(run, heur, reference)
    run.cost("rewrite", clock, heur.profile.peak_bytes, base.profile.peak_bytes)
    early: tuple[str, ...] = ()
    clock = StageClock()
    if config.tighten_bound and base.profile.peak_bytes > lower and not run.cancelled():
        # the cheapest tighter bound before the sub-tasks: where it proves the base order
        # optimal (GPT-2 steady steps from 48 layers), every sub-task stops at once (its
        # floor is met) and the polish and the whole-order search are skipped
        early = TIGHTER_BOUNDS[:1]
        lower = tighter_bound(graph, lower, base.profile.peak_bytes, config, run.records,
                              run.notes, bounds=early)
    # the input graph's reachability stays cached for the whole-order search and the bound
    # (on shared whole ints it is small: GPT-2 360 layers 84 MiB of them, and the plan's
    # max RSS fell 849 -> 766 MiB without a second computation), so it is computed
    # once; the decomposition counts key points without it
    if early:
        run.cost("bound", clock, 0, 0)
    clock = StageClock()
    tree = decompose(base.rewritten, base.order, node_limit=config.node_limit)
    run.emit("decompose", 1, 1, f"{len(tree.subtasks)} sub-tasks")
    floor = max(0, lower - base.profile.resident_bytes)
    problems, hint_peak = _subtask_problems(run, base, tree, floor)
    results, left = _order_subtasks(run, problems, executor)
    order, prof = _merge(run, base, problems, results, left, hint_peak)
    run.cost("subtasks", clock, base.profile.peak_bytes, prof.peak_bytes, "solves",
             len(problems), stopped=_subtasks_stop(run, results, left))
    if config.polish_rounds > 0 and prof.peak_bytes > lower and not run.cancelled():
        run.emit("order", len(problems), len(problems), "polishing around the peak")
        clock, before = StageClock(), prof.peak_bytes
        order, prof, work = polish_peak(base.rewritten, graph, order, prof, config, floor,
                                        run.cancel_fn, run.deadline, run.records)
        run.cost("polish", clock, before, prof.peak_bytes, "dtime_ms", work.done_ms,
                 work.limit_ms, work.stopped)
    if config.search_evaluations > 0 and prof.peak_bytes > lower and not run.cancelled():
        run.emit("order", len(problems), len(problems), "searching the whole order")
        clock, before = StageClock(), prof.peak_bytes
        order, prof, sw = search_whole_order(graph, order, prof, config, floor,
                                             run.cancel_fn, run.deadline, run.records)
        run.cost("search", clock, before, prof.peak_bytes, "evaluations", sw.evaluations,
                 sw.limit, sw.stopped)
    order, prof = _never_worse(run, order, prof, heur)
    if config.tighten_bound and prof.peak_bytes > lower and not run.cancelled():
        clock = StageClock()
        lower = tighter_bound(graph, lower, prof.peak_bytes, config, run.records, run.notes,
                              order, bounds=[b for b in TIGHTER_BOUNDS if b not in early])
        run.cost("bound", clock, 0, 0)
    pos = {op: i for i, op in enumerate(order)}
    extra = tuple(e for e in base.edges if pos[e.src] < pos[e.dst])  # the rewrites it honours
    chosen = ChosenOrder("roam", order, prof, tree, tree.task_of_op(), extra)
    forget_reachability()  # the layout and the validator need no bitsets
    return run.finish(chosen, baseline_peak, lower)


def _eager_and_bound(run: _Run) -> tuple[int, int]:
    """Step 1a: the eager peak (program order) and the lower bound."""
    baseline = simulate(run.graph, alignment_bytes=run.a)
    run.emit("baseline", 0, 1, "scoring baselines")
    return baseline.peak_bytes, _lower_bound(run.graph, run.a, run.notes)


def _lower_bound(graph: Graph, a: int, notes: list[str]) -> int:
    try:
        return int(best_lower_bound(graph, a).bound_bytes)
    except Exception as e:
        notes.append(f"lower bound unavailable ({type(e).__name__}: {e}); reported as 0")
        return 0


def _baseline_method(run: _Run, method: str) -> ChosenOrder:
    """A baseline ordering method instead of ROAM: its order, then the layout."""
    t0 = time.perf_counter()
    order = run_method(run.graph, method, alignment_bytes=run.a)
    prof = simulate(run.graph, order, alignment_bytes=run.a)
    run.records.append(SolveRecord("order", "global", SolveStatus.HEURISTIC, prof.peak_bytes,
                                   None, time.perf_counter() - t0, len(order)))
    return ChosenOrder(method, order, prof)


def _best_baseline(run: _Run) -> tuple[HeuristicResult, tuple[OpId, ...] | None]:
    """Step 1b: the best cheap order (see :func:`_baselines`)."""
    t0 = time.perf_counter()
    heur, reference = _baselines(run.graph, run.config)
    run.records.append(SolveRecord("baseline", "global", SolveStatus.HEURISTIC,
                                   heur.profile.peak_bytes, None,
                                   time.perf_counter() - t0, len(run.graph.ops)))
    run.best_peak = heur.profile.peak_bytes
    run.emit("baseline", 1, 1, f"best baseline {heur.method}")
    return heur, reference


def _baselines(graph: Graph, config: PlannerConfig
               ) -> tuple[HeuristicResult, tuple[OpId, ...] | None]:
    """The best baseline and, when it is among them, the ``lpmf_updates`` order.

    ``lpmf_updates`` is exactly the cost-aware update insertion that the rewrites start from,
    so it is run once and handed to
    :func:`~roam_core.ordering.rewrites.place_weight_updates` as its reference order (saves
    a second insertion pass on large graphs).  When another baseline has a strictly lower
    peak, that order is the reference instead: the updates are pinned where it runs them, so
    the decomposition starts from the best order known and the plan can only improve on it.
    """
    methods = tuple(config.baselines) if config.baselines is not None else DEFAULT_METHODS
    a = config.alignment_bytes
    if config.update_policy != "cost_aware" or "lpmf_updates" not in methods:
        return best_heuristic_order(graph, methods, alignment_bytes=a), None
    t0 = time.perf_counter()
    ref = run_method(graph, "lpmf_updates", alignment_bytes=a)
    ref_prof = simulate(graph, ref, alignment_bytes=a)
    ref_s = time.perf_counter() - t0
    others = tuple(m for m in methods if m != "lpmf_updates")
    if not others:
        return HeuristicResult(ref, ref_prof, "lpmf_updates", {"lpmf_updates": ref_prof.peak_bytes},
                               {"lpmf_updates": ref_s}), ref
    heur = best_heuristic_order(graph, others, alignment_bytes=a)
    scores = {**heur.scores, "lpmf_updates": ref_prof.peak_bytes}
    seconds = {**heur.seconds, "lpmf_updates": ref_s}
    if ref_prof.peak_bytes < heur.profile.peak_bytes:
        heur = replace(heur, order=ref, profile=ref_prof, method="lpmf_updates")
    elif heur.profile.peak_bytes < ref_prof.peak_bytes:
        ref = heur.order  # pin the updates where the better order has them
    return replace(heur, scores=scores, seconds=seconds), ref


def _rewrite(run: _Run, heur: HeuristicResult, reference: tuple[OpId, ...] | None) -> _Base:
    """Step 2: pin the weight updates; the base order is the rewrites' reference order, or
    the best baseline when that one is lower and honours the rewrites."""
    graph, config, a = run.graph, run.config, run.a
    t0 = time.perf_counter()
    rw = place_weight_updates(graph, policy=config.update_policy, reference=reference,
                              zero_fanin_just_in_time=config.zero_fanin_just_in_time,
                              alignment_bytes=a)
    g2 = rw.graph
    assert not check_order(g2, rw.order), "rewrites must return a valid reference order"
    base = tuple(rw.order)
    base_prof = simulate(graph, base, alignment_bytes=a)
    if (heur.profile.peak_bytes < base_prof.peak_bytes and not check_order(g2, heur.order)):
        base, base_prof = tuple(heur.order), heur.profile
    run.records.append(SolveRecord("rewrite", "global", SolveStatus.HEURISTIC,
                                   base_prof.peak_bytes, None,
                                   time.perf_counter() - t0, len(rw.edges)))
    run.emit("rewrite", 1, 1,
             f"{len(rw.edges)} placement edges, {rw.num_delayed} updates delayed")
    return _Base(g2, base, base_prof, tuple(rw.edges))


def _subtask_problems(run: _Run, base: _Base, tree: TaskTree, floor: int
                      ) -> tuple[list[OrderProblem], dict[str, int]]:
    """Step 3: one ordering problem per sub-task with ops, hardest (highest base peak) first,
    and the base order's peak inside each."""
    lts = lifetimes(base.rewritten, base.order)
    live = base.profile.live_bytes
    pos = {op: i for i, op in enumerate(base.order)}  # once, not once per sub-task
    problems = [
        build_order_problem(base.rewritten, base.order, st.op_ids, task_id=st.id,
                            config=run.config.order, floor_bytes=floor, alignment_bytes=run.a,
                            base_lifetimes=lts, base_live_bytes=live, base_positions=pos)
        for st in tree.walk() if st.op_ids
    ]
    hint_peak = {p.task_id: max((max(live[r.start:r.start + len(r.ops)]) for r in p.ranges),
                                default=0) for p in problems}
    problems.sort(key=lambda p: (-hint_peak[p.task_id], p.task_id))
    return problems, hint_peak


def _order_subtasks(run: _Run, problems: list[OrderProblem], executor: cf.Executor | None
                    ) -> tuple[dict[str, OrderResult], list[str]]:
    """Step 4: solve every sub-task (:func:`~roam_core.planner.pool.solve_subtasks`); the
    results by id and the ids left unsolved, with a note when a cancel or the time limit
    cut the stage short."""
    results: dict[str, OrderResult] = {}
    total = len(problems)

    def on_result(res: OrderResult) -> None:
        results[res.task_id] = res
        run.emit("order", len(results), total,
                 f"{res.task_id}: {res.status} {format_bytes(res.hint_peak_bytes)} -> "
                 f"{format_bytes(res.peak_bytes)}")

    run.emit("order", 0, total, "ordering sub-tasks")
    left = solve_subtasks(problems, run.config, executor, run.cancel_fn, run.deadline,
                          on_result)
    stopped = sum(r.status == SolveStatus.CANCELLED for r in results.values())
    if left or stopped:
        why = "cancelled" if run.cancelled() else "out of time"
        if left:
            run.notes.append(f"{len(left)} of {total} sub-tasks not solved ({why}); "
                             "they keep the base order")
        if stopped:
            run.notes.append(f"{stopped} of {total} sub-task solves stopped early ({why}); "
                             "they keep the best order found by then")
    return results, left


def _subtasks_stop(run: _Run, results: dict[str, OrderResult], left: list[str]) -> str:
    """Why the sub-task stage stopped: the reason of its solve that says most, where a
    solve (or a sub-task left unsolved) stopped by the planner's deadline says ``time``."""
    why = "cancelled" if run.cancelled() else "time"
    reasons = [why if r.stopped == "cancelled" else r.stopped for r in results.values()]
    return worst_stop(reasons + [why] * bool(left))


def _merge(run: _Run, base: _Base, problems: list[OrderProblem],
           results: dict[str, OrderResult], left: list[str], hint_peak: dict[str, int]
           ) -> tuple[tuple[OpId, ...], MemoryProfile]:
    """Step 4b: merge the sub-task orders into the base order (by sub-task id, so the result
    does not depend on finishing order) and record every solve."""
    by_id = {p.task_id: p for p in problems}
    res_ = base.profile.resident_bytes
    # one list spliced in place (merge_orders copies the whole order per sub-task)
    order = merge_all_orders(base.order, ((by_id[tid], results[tid]) for tid in sorted(results)))
    for tid in sorted(results):
        res = results[tid]
        run.records.append(SolveRecord(
            "order", tid, res.status, res.peak_bytes + res_,
            None if res.best_bound_bytes is None else res.best_bound_bytes + res_,
            res.wall_time_s, res.num_ops))
    for tid in left:
        run.records.append(SolveRecord("order", tid, SolveStatus.CANCELLED,
                                       hint_peak[tid] + res_, None, 0.0, by_id[tid].num_ops))
    assert not check_order(base.rewritten, order), "merged orders must honour the rewrites"
    return order, simulate(run.graph, order, alignment_bytes=run.a)


def _never_worse(run: _Run, order: tuple[OpId, ...], prof: MemoryProfile,
                 heur: HeuristicResult) -> tuple[tuple[OpId, ...], MemoryProfile]:
    """Step 7 (the guard): never return an order worse than the best baseline."""
    if prof.peak_bytes > heur.profile.peak_bytes:
        run.notes.append(f"returned the best baseline order ({heur.method}): the ROAM order "
                         f"peaked at {format_bytes(prof.peak_bytes)}, above its "
                         f"{format_bytes(heur.profile.peak_bytes)}")
        return tuple(heur.order), heur.profile
    return order, prof
