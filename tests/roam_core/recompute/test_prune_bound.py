"""The exact skip of :func:`roam_core.recompute.greedy.prune` (KeepBound) and the plan cache
of :class:`roam_core.planner.budget.BudgetPlanner`: faster, with the same results."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from roam_core.model.graph import Graph
from roam_core.planner import make_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.baselines import BASELINES, baseline_drop_set
from roam_core.recompute.evaluator import Evaluation, JitEvaluator, KeepBound
from roam_core.recompute.greedy import prune
from tests.builders import random_train_graph

FAST = PlannerConfig(workers=1, layout_time_limit_s=2.0, solve_layout=False)


def _prune_reference(ev: JitEvaluator, dropped: Sequence[str], limit: int) -> Evaluation:
    """prune without the skip: one evaluation per dropped storage."""
    cur = list(dropped)
    best = ev.evaluate(cur)
    g = ev.graph

    def own(s: str) -> float:
        p = g.tensors[s].producer
        assert p is not None
        return ev.cost[p]

    allowed = max(limit, best.peak_bytes)
    for s in sorted(dropped, key=lambda s: (-own(s), s)):
        trial = [x for x in cur if x != s]
        e = ev.evaluate(trial)
        if e.peak_bytes <= allowed and e.extra_cost <= best.extra_cost:
            cur, best = trial, e
    return best


def _graph(name: str) -> Graph:
    if name == "tiny_gpt":  # a real model: module-structure drop sets, chains, views
        from roam_core.zoo import trace_zoo

        return trace_zoo("tiny_gpt", 2, 16, "steady", "adamw", attention="math").graph
    seed, layers = map(int, name.split("-"))
    return random_train_graph(seed, layers)


GRAPHS = ["0-12", "3-16", "5-20", pytest.param("tiny_gpt", marks=pytest.mark.slow)]


def _drop_sets(g: Graph, ev: JitEvaluator, seed: int) -> list[list[str]]:
    sets = [list(d) for d in (baseline_drop_set(g, n) for n in BASELINES) if d]
    rng = random.Random(seed)
    cands = [s for s in ev.droppable if ev.size[s]]
    for _ in range(8):
        sets.append(rng.sample(cands, max(1, len(cands) // 2)))
    return sets


@pytest.mark.parametrize("name", GRAPHS)
def test_keep_bound_is_below_every_trial_peak(name: str) -> None:
    g = _graph(name)
    checked = tight = 0
    ev = JitEvaluator(g, make_plan(g, FAST).order)
    for dropped in _drop_sets(g, ev, 1):
        e = ev.evaluate(dropped)
        bound = KeepBound(ev, e)
        for s in e.dropped:
            trial = ev.evaluate([x for x in e.dropped if x != s])
            b = bound.peak_with(s)
            assert b <= trial.peak_bytes, s
            checked += 1
            tight += b == trial.peak_bytes
    assert checked > 20
    assert tight > 0  # the bound is met exactly somewhere: it can skip


@pytest.mark.parametrize("name", GRAPHS)
def test_prune_with_the_skip_equals_the_plain_loop(name: str) -> None:
    g = _graph(name)
    ev = JitEvaluator(g, make_plan(g, FAST).order)
    none = ev.evaluate(()).peak_bytes
    for dropped in _drop_sets(g, ev, 2):
        pk = ev.evaluate(dropped).peak_bytes
        for frac in (0.0, 0.3, 0.7):
            limit = int(pk + frac * (none - pk))
            assert prune(ev, dropped, limit) == _prune_reference(ev, dropped, limit)


def test_a_drop_set_chosen_twice_is_planned_once() -> None:
    g = random_train_graph(0, 7)
    calls: list[int] = []
    cfg = FAST.with_recompute(exact_max_ops=0)
    bp = BudgetPlanner(g, cfg, on_plan=lambda graph: calls.append(len(graph.ops)))
    assert calls == [len(g.ops)]  # the plain plan
    ev = JitEvaluator(g, bp.base.order)
    drop = sorted(s for s in ev.droppable if ev.size[s])[:3]
    first = bp.plan_for_drops(drop, label="a")
    n = len(calls)
    assert n == 2
    assert calls[1] > len(g.ops)  # the expanded graph, with its recompute ops
    again = bp.plan_for_drops(drop, label="b")
    assert len(calls) == n  # not planned again
    assert (again.order, again.arena_bytes, again.extra_flops) == (
        first.order, first.arena_bytes, first.extra_flops)
    assert again.method == "b"
