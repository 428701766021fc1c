"""The budget portfolio and swap pass (roam_core.recompute.improve)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from roam_core.model.recompute_ops import recompute_cost
from roam_core.oracle.validate import check_plan
from roam_core.planner import make_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.budget_frontier import recompute_frontier
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.greedy import greedy_trajectory, prune
from roam_core.recompute.improve import best_of, swap_improve
from tests.builders import random_train_graph

FAST = PlannerConfig(workers=1, layout_time_limit_s=2.0)
GREEDY = FAST.with_recompute(exact_max_ops=0)  # the scalable path, not the CP-SAT model


def _setup(seed: int, layers: int):  # type: ignore[no-untyped-def]
    g = random_train_graph(seed, layers)
    base = make_plan(g, replace(FAST, solve_layout=False))
    ev = JitEvaluator(g, base.order)
    dropped, pts = greedy_trajectory(g, base.order, evaluator=ev)
    return g, ev, dropped, pts


def _greedy_at(ev, dropped, pts, limit):  # type: ignore[no-untyped-def]
    idx = next(i for i, p in enumerate(pts) if p.peak_bytes <= limit)
    return prune(ev, dropped[:pts[idx].n_dropped], limit)


def _optimum(ev, limit):  # type: ignore[no-untyped-def]
    """The cheapest drop set whose just-in-time peak fits (brute force)."""
    cands = [s for s in ev.droppable if ev.size[s]]
    best = None
    for r in range(len(cands) + 1):
        for c in itertools.combinations(cands, r):
            e = ev.evaluate(c)
            if e.peak_bytes <= limit and (best is None or e.cost(1.0) < best.cost(1.0)):
                best = e
    assert best is not None
    return best


def test_swap_replaces_a_costly_drop_by_a_cheaper_one():
    # the greedy's ratio rule drops h5; dropping h3 instead fits the same limit for less
    _g, ev, dropped, pts = _setup(0, 7)
    limit = 22016
    gp = _greedy_at(ev, dropped, pts, limit)
    opt = _optimum(ev, limit)
    assert opt.cost(1.0) < gp.cost(1.0)  # the plain greedy misses the optimum here
    sw = swap_improve(ev, gp, limit)
    assert sw.peak_bytes <= limit
    assert sw.cost(1.0) == opt.cost(1.0) < gp.cost(1.0)
    # a drop set that does not fit comes back unchanged
    assert swap_improve(ev, gp, gp.peak_bytes - 512) is gp


@pytest.mark.parametrize("seed", range(6))
def test_swap_never_raises_the_cost_or_breaks_the_limit(seed):
    g, ev, dropped, pts = _setup(seed, 7)
    for p in pts[1:]:
        gp = _greedy_at(ev, dropped, pts, p.peak_bytes)
        sw = swap_improve(ev, gp, p.peak_bytes)
        assert sw.peak_bytes <= p.peak_bytes
        assert sw.cost(1.0) <= gp.cost(1.0)
        assert (sw.extra_flops, sw.extra_bytes) == recompute_cost(g, sw.recompute)


def test_a_seed_beats_the_plain_greedy_and_the_portfolio_keeps_it():
    _g, ev, dropped, pts = _setup(3, 6)
    limit = 22528
    gp = _greedy_at(ev, dropped, pts, limit)
    opt = _optimum(ev, limit)
    assert opt.cost(1.0) < gp.cost(1.0)
    cands = best_of(ev, limit, [("roam", dropped[:len(dropped)]), ("seed", opt.dropped)],
                    swaps=0)
    assert cands[0].label == "seed"
    assert cands[0].cost == opt.cost(1.0)
    assert all(c.evaluation.peak_bytes <= limit for c in cands)
    assert [c.cost for c in cands] == sorted(c.cost for c in cands)
    # a seed that does not fit is left out
    assert all(c.label == "roam" for c in best_of(ev, limit, [("roam", dropped),
                                                               ("seed", ())]))


def test_budget_planner_keeps_the_cheaper_seed():
    g = random_train_graph(3, 6)
    bp0 = BudgetPlanner(g, GREEDY, portfolio=False)
    seed = bp0.plan_for_drops(("h3",), label="seed")
    plain = bp0.plan_at(seed.arena_bytes)
    bp = BudgetPlanner(g, GREEDY, seeds={"seed": ("h3",)}, portfolio=True)
    p = bp.plan_at(seed.arena_bytes)
    assert check_plan(g, p) == []
    assert p.arena_bytes <= seed.arena_bytes

    def cost(plan):  # type: ignore[no-untyped-def]
        return sum(recompute_cost(g, plan.recompute))

    assert cost(p) <= cost(seed)
    assert cost(p) < cost(plain)  # the greedy alone pays more at this budget
    assert bp.last_pick is not None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_roam_is_never_worse_than_a_supplied_seed_at_its_peak(seed):
    g = random_train_graph(seed, 7)
    rnd = random.Random(seed)
    ev = JitEvaluator(g, g.op_ids)
    seeds = {f"s{i}": tuple(s for s in ev.droppable if rnd.random() < 0.5) for i in range(3)}
    _sf, points, _ = recompute_frontier(g, GREEDY, budgets=3,
                                       baselines=False, extra_baselines=seeds)
    roam = [p for p in points if p.method == "roam"]
    for p in points:
        if p.method in seeds:
            assert any(r.peak_bytes <= p.peak_bytes
                       and r.extra_flops + r.extra_bytes_moved
                       <= p.extra_flops + p.extra_bytes_moved for r in roam), p
    for r in roam:
        assert r.search_extra_flops is not None
        if r.kept == "roam":
            assert (r.search_extra_flops, r.search_extra_bytes_moved) == (
                r.extra_flops, r.extra_bytes_moved)


@pytest.mark.slow
def test_the_portfolio_follows_the_config_for_a_single_budget(tmp_path, capsys):
    """``make_plan(budget)`` uses the greedy prefix alone unless ``recompute.portfolio``;
    ``roam plan --portfolio`` turns it on."""
    import json

    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph

    g = random_train_graph(3, 6)
    assert BudgetPlanner(g, GREEDY).portfolio is False
    on = GREEDY.with_recompute(portfolio=True)
    assert BudgetPlanner(g, on).portfolio is True
    assert BudgetPlanner(g, on, portfolio=False).portfolio is False
    path = tmp_path / "g.json"
    save_graph(g, path)
    budget = BudgetPlanner(g, GREEDY).plan_for_drops(("h3",)).arena_bytes
    for flag, want in (([], False), (["--portfolio"], True)):
        out = tmp_path / f"plan{len(flag)}.json"
        assert main(["plan", str(path), "-o", str(out), "--budget", str(budget),
                     "--workers", "1", "--json", "--no-progress", *flag]) == 0
        capsys.readouterr()
        saved = json.loads(out.read_text())
        assert saved["settings"]["recompute"]["portfolio"] is want
        assert saved["arena_bytes"] <= budget
