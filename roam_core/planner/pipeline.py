"""The planner façade: graph in, validated :class:`~roam_core.model.plan.Plan` out.

:func:`make_plan` is the only place that knows the order of the steps (ROAM, ``roam_method.md``
§6):

1. baseline: the eager peak (program order), the lower bound, the best cheap order;
2. weight-update placement rewrites (:mod:`roam_core.ordering.rewrites`): extra control edges and a
   valid reference order;
3. the task tree (:mod:`roam_core.ordering.decompose`) cut from the better of the reference order
   and
   the best cheap order (when that one honours the rewrites);
4. one CP-SAT ordering solve per sub-task (:mod:`roam_core.ordering.order_ilp`), run through a
   ``concurrent.futures.Executor`` (default: a local process pool), each warm-started from
   the base order; results merged into one order (sub-tasks own disjoint step ranges of the
   base order, so they are independent and the merge is exact);
5. the arena layout (:mod:`roam_core.layout.arena`);
6. the guard: the result is never worse than the best baseline order (if it would be, that
   order is returned and ``Plan.notes`` says so), and every plan passes the independent
   validator (:func:`~roam_core.oracle.validate.check_plan`), else ``PlanInvalidError``.

Determinism: each sub-task is solved with one CP-SAT worker, a fixed ``random_seed`` and a
*deterministic* time limit, and results are merged by sub-task id whatever order they finish
in, so a fixed seed gives the same plan on any machine (unless a wall-clock safety limit or
``PlannerConfig.time_limit_s`` cuts a solve short).

Cancellation: ``cancel`` (an ``Event`` or a callable) is checked between sub-tasks and, for
in-process solves, inside CP-SAT; a cancelled or timed-out run still returns a valid plan
(solved sub-tasks merged, the base order elsewhere).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from roam_core.base.cancel import as_cancel_flag
from roam_core.base.config import PlannerConfig
from roam_core.base.errors import PlanInvalidError
from roam_core.base.status import SolveStatus
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import Plan, SolveRecord
from roam_core.oracle.simulate import lifetimes, simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.decompose import TaskTree, decompose
from roam_core.ordering.order_ilp import (
    OrderProblem,
    OrderResult,
    build_order_problem,
    merge_orders,
    needs_solver,
    solve_order_problem,
)

__all__ = ["PlanProgress", "make_plan", "order_methods"]

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


def order_methods() -> tuple[str, ...]:
    """Names accepted by ``make_plan(method=...)``: ``"roam"`` then the baselines."""
    from roam_core.ordering.registry import ORDER_METHODS

    return ("roam", *ORDER_METHODS)


def _lower_bound(graph: Graph, a: int, notes: list[str]) -> int:
    try:
        from roam_core.oracle.bounds import best_lower_bound

        return int(best_lower_bound(graph, a).bound_bytes)
    except Exception as e:
        notes.append(f"lower bound unavailable ({type(e).__name__}: {e}); reported as 0")
        return 0


def _baselines(graph: Graph, config: PlannerConfig) -> tuple[Any, tuple[OpId, ...] | None]:
    """The best baseline and, when it is among them, the ``lpmf_updates`` order.

    ``lpmf_updates`` is exactly the cost-aware update insertion that the rewrites start from,
    so it is run once and handed to :func:`~roam_core.ordering.rewrites.place_weight_updates` as its
    reference order (saves a second insertion pass on large graphs).  When another baseline
    has a strictly lower peak, that order is the reference instead: the updates are pinned
    where it runs them, so the decomposition starts from the best order known and the plan
    can only improve on it.
    """
    from dataclasses import replace

    from roam_core.ordering.registry import DEFAULT_METHODS, best_heuristic_order, run_method

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
        from roam_core.ordering.registry import HeuristicResult

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


def _layout(graph: Graph, order: Sequence[OpId], tree: TaskTree | None, cfg: PlannerConfig,
            cancel: Any, t_start: float) -> Any:
    from dataclasses import replace

    from roam_core.layout.arena import greedy_arena, plan_arena

    if not cfg.solve_layout:
        return greedy_arena(graph, order, alignment_bytes=cfg.alignment_bytes)
    budget = cfg.layout_time_limit_s
    if cfg.time_limit_s is not None:  # the overall limit caps the layout too (at least 1 s)
        budget = min(budget, max(1.0, cfg.time_limit_s - (time.perf_counter() - t_start)))
    acfg = replace(cfg.arena, time_limit_s=budget)  # alignment and seed: the planner's
    return plan_arena(graph, order, task_tree=tree, config=acfg, cancel=cancel)


def _solve_all(problems: list[OrderProblem], cfg: PlannerConfig, executor: cf.Executor | None,
               cancel: Callable[[], bool] | None, deadline: float | None,
               on_result: Callable[[OrderResult], None]) -> list[str]:
    """Solve every problem; returns the ids that were not solved (cancelled / out of time)."""
    def stop() -> bool:
        return bool((cancel is not None and cancel())
                    or (deadline is not None and time.monotonic() > deadline))

    pending = []
    for p in problems:  # answered without a model: no need to ship them to a worker
        if needs_solver(p):
            pending.append(p)
        else:
            on_result(solve_order_problem(p))
    workers = cfg.workers if cfg.workers is not None else (os.cpu_count() or 1)
    if executor is None and (workers <= 1 or len(pending) <= 1):
        left = []
        for p in pending:
            if stop():
                left.append(p.task_id)
                continue
            on_result(solve_order_problem(p, stop))
        return left
    own = executor is None
    ex = executor if executor is not None else cf.ProcessPoolExecutor(
        max_workers=min(workers, len(pending)))
    futures = {ex.submit(solve_order_problem, p): p.task_id for p in pending}
    left: list[str] = []
    try:
        waiting = set(futures)
        while waiting:
            done, waiting = cf.wait(waiting, timeout=0.1, return_when=cf.FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: futures[f]):
                if f.cancelled():
                    left.append(futures[f])
                    continue
                on_result(f.result())
            if waiting and stop():
                for f in waiting:
                    f.cancel()
                left.extend(futures[f] for f in waiting)
                break
    finally:
        if own:
            ex.shutdown(wait=False, cancel_futures=True)
    return left


def _polish(g2: Graph, graph: Graph, order: tuple[OpId, ...], prof: Any,
            config: PlannerConfig, floor: int, cancel: Callable[[], bool] | None,
            deadline: float | None, records: list[SolveRecord]) -> tuple[tuple[OpId, ...], Any]:
    """Re-solve windows centred on the peak step while that lowers the peak.

    Any run of consecutive steps of a valid order is a valid sub-problem, so a window may
    straddle the borders of the task tree's sub-tasks (whose borders were fixed before the
    solve).  Windows honour the placement rewrites (``g2``); solving them against the input
    graph instead was tried and is far slower to prove (update branches widen every window).
    Each round keeps the new order only if its peak (whole graph) is not higher.
    """
    a = config.alignment_bytes
    width = 2 * config.node_limit
    tried: set[tuple[int, int]] = set()
    for k in range(config.polish_rounds):
        if (cancel is not None and cancel()) or (deadline is not None
                                                 and time.monotonic() > deadline):
            break
        n = len(order)
        peak_live = max(prof.live_bytes)
        steps = [i for i, b in enumerate(prof.live_bytes) if b == peak_live]
        lo = max(0, min(steps[0] - width // 2, n - width))
        hi = min(n, lo + width)
        if (lo, hi) in tried or peak_live <= floor:
            break
        tried.add((lo, hi))
        problem = build_order_problem(g2, order, order[lo:hi], task_id=f"polish{k + 1}",
                                      config=config.order, floor_bytes=floor,
                                      alignment_bytes=a)
        res = solve_order_problem(problem, cancel)
        new = merge_orders(order, problem, res)
        new_prof = simulate(graph, new, alignment_bytes=a)
        records.append(SolveRecord("polish", res.task_id, res.status,
                                   res.peak_bytes + prof.resident_bytes,
                                   None if res.best_bound_bytes is None
                                   else res.best_bound_bytes + prof.resident_bytes,
                                   res.wall_time_s, res.num_ops))
        if new_prof.peak_bytes > prof.peak_bytes or new == order:
            if res.peak_bytes >= res.hint_peak_bytes:
                break
            continue
        order, prof = new, new_prof
    return order, prof


def make_plan(
    graph: Graph,
    config: PlannerConfig = PlannerConfig(),  # noqa: B008 - frozen, never mutated
    *,
    method: str = "roam",
    progress: Callable[[PlanProgress], None] | None = None,
    cancel: Any = None,
    executor: cf.Executor | None = None,
) -> Plan:
    """Plan ``graph``: an operator order and an arena layout with a low peak.

    Parameters
    ----------
    graph : Graph
        The training-step graph.
    config : PlannerConfig
        Settings.
    method : str
        ``"roam"`` or the name of a baseline ordering method (:func:`order_methods`); a
        baseline gets its order plus the layout.
    progress : callable, optional
        Called with a :class:`PlanProgress` after each stage and each sub-task.
    cancel : threading.Event or callable, optional
        Cooperative cancellation; the best valid plan so far is returned.
    executor : concurrent.futures.Executor, optional
        Where sub-tasks are solved (default: a local process pool of ``config.workers``;
        ``workers=1`` solves in-process).

    Returns
    -------
    Plan

    Raises
    ------
    GraphError
        For an unknown method name.
    BudgetInfeasibleError
        ``config.budget_bytes`` is below every plan's arena, recomputation included (the
        message gives the smallest reachable peak).
    PlanInvalidError
        If the plan fails the independent validator (a bug, never expected).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.base.config import PlannerConfig
    >>> p = make_plan(tiny_train_step(), PlannerConfig(workers=1, solve_layout=False))
    >>> p.method, p.planned_peak_bytes <= p.baseline_peak_bytes, len(p.order)
    ('roam', True, 8)
    """
    from roam_core.ordering.registry import run_method

    if config.budget_bytes is not None and method == "roam":
        from roam_core.planner.budget import plan_with_budget

        return plan_with_budget(graph, config, make_plan=make_plan, progress=progress,
                                cancel=cancel, executor=executor)
    t_start = time.perf_counter()
    t_mono = time.monotonic()
    cancel_fn = as_cancel_flag(cancel)
    a = config.alignment_bytes
    notes: list[str] = []
    records: list[SolveRecord] = []
    best_peak: list[int | None] = [None]

    def emit(stage: str, done: int, total: int, message: str) -> None:
        if progress is not None:
            progress(PlanProgress(stage, done, total, best_peak[0], message))

    baseline = simulate(graph, alignment_bytes=a)
    emit("baseline", 0, 1, "scoring baselines")
    lower = _lower_bound(graph, a, notes)
    if method != "roam":
        t0 = time.perf_counter()
        order = run_method(graph, method, alignment_bytes=a)
        prof = simulate(graph, order, alignment_bytes=a)
        records.append(SolveRecord("order", "global", SolveStatus.HEURISTIC, prof.peak_bytes, None,
                                   time.perf_counter() - t0, len(order)))
        best_peak[0] = prof.peak_bytes
        return _finish(graph, config, method, order, prof, baseline.peak_bytes, lower, None,
                       {}, (), records, notes, t_start, cancel, emit)
    t0 = time.perf_counter()
    heur, reference = _baselines(graph, config)
    records.append(SolveRecord("baseline", "global", SolveStatus.HEURISTIC,
                               heur.profile.peak_bytes, None,
                               time.perf_counter() - t0, len(graph.ops)))
    best_peak[0] = heur.profile.peak_bytes
    emit("baseline", 1, 1, f"best baseline {heur.method}")
    # 2. rewrites
    from roam_core.ordering.rewrites import place_weight_updates

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
    records.append(SolveRecord("rewrite", "global", SolveStatus.HEURISTIC,
                               base_prof.peak_bytes, None,
                               time.perf_counter() - t0, len(rw.edges)))
    emit("rewrite", 1, 1, f"{len(rw.edges)} placement edges, {rw.num_delayed} updates delayed")
    # 3. task tree
    tree = decompose(g2, base, node_limit=config.node_limit)
    emit("decompose", 1, 1, f"{len(tree.subtasks)} sub-tasks")
    # 4. order each sub-task
    lts = lifetimes(g2, base)
    floor = max(0, lower - base_prof.resident_bytes)
    problems = [
        build_order_problem(g2, base, st.op_ids, task_id=st.id, config=config.order,
                            floor_bytes=floor, alignment_bytes=a, base_lifetimes=lts,
                            base_live_bytes=base_prof.live_bytes)
        for st in tree.walk() if st.op_ids
    ]
    hint_peak = {p.task_id: max((max(base_prof.live_bytes[r.start:r.start + len(r.ops)])
                                 for r in p.ranges), default=0) for p in problems}
    problems.sort(key=lambda p: (-hint_peak[p.task_id], p.task_id))
    results: dict[str, OrderResult] = {}
    total = len(problems)

    def on_result(res: OrderResult) -> None:
        results[res.task_id] = res
        emit("order", len(results), total,
             f"{res.task_id}: {res.status} {res.hint_peak_bytes} -> {res.peak_bytes} bytes")

    deadline = (t_mono + config.time_limit_s if config.time_limit_s is not None else None)
    emit("order", 0, total, "ordering sub-tasks")
    left = _solve_all(problems, config, executor, cancel_fn, deadline, on_result)
    if left:
        why = "cancelled" if cancel_fn is not None and cancel_fn() else "out of time"
        notes.append(f"{len(left)} of {total} sub-tasks not solved ({why}); "
                     "they keep the base order")
    order = base
    by_id = {p.task_id: p for p in problems}
    res_ = base_prof.resident_bytes
    for tid in sorted(results):
        res = results[tid]
        order = merge_orders(order, by_id[tid], res)
        records.append(SolveRecord(
            "order", tid, res.status, res.peak_bytes + res_,
            None if res.best_bound_bytes is None else res.best_bound_bytes + res_,
            res.wall_time_s, res.num_ops))
    for tid in left:
        records.append(SolveRecord("order", tid, SolveStatus.CANCELLED, hint_peak[tid] + res_, None,
                                   0.0, by_id[tid].num_ops))
    assert not check_order(g2, order), "merged sub-task orders must honour the rewrites"
    prof = simulate(graph, order, alignment_bytes=a)
    if config.polish_rounds > 0 and prof.peak_bytes > lower and not (
            cancel_fn is not None and cancel_fn()):
        emit("order", total, total, "polishing around the peak")
        order, prof = _polish(g2, graph, order, prof, config, floor, cancel_fn, deadline,
                              records)
    if prof.peak_bytes > heur.profile.peak_bytes:
        notes.append(f"returned the best baseline order ({heur.method}): the ROAM order "
                     f"peaked at {prof.peak_bytes} bytes, above its {heur.profile.peak_bytes}")
        order, prof = tuple(heur.order), heur.profile
    pos = {op: i for i, op in enumerate(order)}
    extra = tuple(e for e in rw.edges if pos[e.src] < pos[e.dst])  # the rewrites it honours
    best_peak[0] = prof.peak_bytes
    task_of = tree.task_of_op()
    return _finish(graph, config, "roam", order, prof, baseline.peak_bytes, lower, tree,
                   task_of, extra, records, notes, t_start, cancel, emit)


def _finish(graph: Graph, config: PlannerConfig, method: str, order: Sequence[OpId],
            prof: Any, baseline_peak: int, lower: int, tree: TaskTree | None,
            task_of: dict[OpId, str], extra: Sequence[Any], records: list[SolveRecord],
            notes: list[str], t_start: float, cancel: Any,
            emit: Callable[[str, int, int, str], None]) -> Plan:
    from roam_core.oracle.validate import check_plan

    bad = check_order(graph, order)
    if bad:
        raise PlanInvalidError(bad)
    emit("layout", 0, 1, "laying out the arena")
    layout = _layout(graph, order, tree, config, cancel, t_start)
    records.extend(layout.provenance)
    summary = tree.to_summary(order, records, config.alignment_bytes) if tree else None
    plan = Plan(
        graph_fingerprint=graph.fingerprint(),
        graph_name=graph.name,
        method=method,
        order=tuple(order),
        offsets=dict(layout.offsets),
        alignment_bytes=config.alignment_bytes,
        arena_bytes=int(layout.arena_bytes),
        planned_peak_bytes=prof.peak_bytes,
        resident_bytes=prof.resident_bytes,
        baseline_peak_bytes=baseline_peak,
        lower_bound_bytes=lower,
        live_bytes=tuple(prof.live_bytes),
        solve_seconds=time.perf_counter() - t_start,
        task_tree=summary,
        task_of_op=task_of,
        extra_edges=tuple(extra),
        provenance=tuple(records),
        settings={**config.to_dict(), "method": method},
        notes=tuple(notes),
    )
    bad = check_plan(graph, plan)
    if bad:
        raise PlanInvalidError(bad)
    emit("done", 1, 1, f"peak {prof.peak_bytes} bytes, arena {plan.arena_bytes} bytes")
    return plan
