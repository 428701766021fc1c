"""Exact windows (roam_core.recompute.windows): the accounting, the model, the refinement."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from ortools.sat.python import cp_model

from roam_core.base.cpsat import make_solver
from roam_core.base.errors import ConfigError
from roam_core.formats.graph_io import load_graph
from roam_core.model.recompute_ops import expand_graph
from roam_core.model.stage_cost import format_stages
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_plan
from roam_core.planner import make_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.exact import exact_recompute
from roam_core.recompute.greedy import greedy_trajectory, prune
from roam_core.recompute.objective import rerun_costs
from roam_core.recompute.window_model import build_window_model, jit_accounting
from roam_core.recompute.windows import refine_windows
from tests.builders import random_train_graph
from tests.paths import SAMPLE_DIR

# the numbers below were found under the FLOPs + bytes objective; the windows' logic does
# not depend on the objective
FAST = PlannerConfig(workers=1, layout_time_limit_s=2.0).with_recompute(objective="flops")
PLAIN = replace(FAST, solve_layout=False)


def _costs(g):  # type: ignore[no-untyped-def]
    return rerun_costs(g, FAST.recompute)


def _pool(ev: JitEvaluator) -> list[str]:
    return [s for s in ev.droppable if ev.size[s]]


@pytest.mark.parametrize("seed", range(6))
def test_accounting_agrees_with_the_simulator(seed):
    g = random_train_graph(seed, 7)
    ev = JitEvaluator(g, g.op_ids, costs=_costs(g))
    rnd = random.Random(seed)
    for _ in range(4):
        drop = [s for s in _pool(ev) if rnd.random() < 0.5]
        e = ev.evaluate(drop)
        acc = jit_accounting(ev, drop)
        prof = simulate(expand_graph(g, e.recompute, order=e.order), e.order)
        live = np.asarray(prof.live_bytes)
        epos = np.asarray(e.positions.base_steps)
        # at base ops: the simulator's live bytes exactly
        assert (acc[1::2] == live[epos]).all()
        # at the re-run steps of a gap: at least the simulator's live bytes there
        base_at = set(epos.tolist())
        for k in range(len(e.order)):
            if k not in base_at:
                assert acc[2 * int(np.searchsorted(epos, k))] >= live[k]
        assert int(acc.max()) + ev.resident >= e.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_window_model_memory_and_cost_equal_the_accounting(seed):
    """With the window's decisions fixed, the model's live bytes at every coordinate and its
    cost equal the concrete accounting and the evaluator's cost of that drop set."""
    g = random_train_graph(seed, 7)
    ev = JitEvaluator(g, g.op_ids, costs=_costs(g))
    rnd = random.Random(100 + seed)
    pool = _pool(ev)
    for _ in range(4):
        drop = [s for s in pool if rnd.random() < 0.5]
        win = rnd.sample(pool, min(6, len(pool)))
        fixed = [s for s in drop if s not in win]
        assign = {s: rnd.random() < 0.5 for s in win}
        wm = build_window_model(ev, drop, win, None)
        for s, v in wm.variables.drop.items():
            wm.model.add(v == int(assign[s]))
        solver = make_solver(time_limit_s=5.0)
        assert solver.solve(wm.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        chosen = fixed + [s for s in win if assign[s]]
        acc = jit_accounting(ev, chosen)
        mem = wm.fixed.copy()
        for a, b, expr in wm.segments:
            mem[a:b + 1] += expr if isinstance(expr, int) else int(solver.value(expr))
        assert (mem == acc).all()
        e = ev.evaluate(chosen)
        cost = wm.cost if isinstance(wm.cost, int) else solver.value(wm.cost)
        assert abs(cost - e.extra_cost) <= len(e.recompute) + 1  # integer rounding per op


def _greedy(g, frac):  # type: ignore[no-untyped-def]
    """The greedy prefix that fits ``frac`` of the planned bytes over program order, pruned
    (program order: these tests do not depend on the orderers)."""
    ev = JitEvaluator(g, g.op_ids, costs=_costs(g))
    res = g.resident_bytes()
    b = res + int((simulate(g, g.op_ids).peak_bytes - res) * frac)
    d, pts = greedy_trajectory(g, g.op_ids, evaluator=ev)
    idx = next((i for i, p in enumerate(pts) if p.peak_bytes <= b), None)
    if idx is None:
        return ev, b, None
    return ev, b, prune(ev, d[:pts[idx].n_dropped], b)


def _refined(ev, e, b):  # type: ignore[no-untyped-def]
    """The windows' refinement of ``e``, checked: it fits ``b``, costs no more than ``e``,
    its cost is the evaluator's and the report's end cost."""
    r, rep = refine_windows(ev, e, b)
    assert r.peak_bytes <= b
    assert r.extra_cost <= e.extra_cost
    assert ev.evaluate(r.dropped).extra_cost == r.extra_cost
    assert rep.end_cost == r.extra_cost
    return r, rep


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_windows_never_worse_than_the_greedy(seed):
    g = random_train_graph(seed, 8)
    for frac in (0.8, 0.9):
        ev, b, e = _greedy(g, frac)
        if e is None:
            continue
        _refined(ev, e, b)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_windows_never_worse_and_near_the_exact_optimum(seed):
    """On <= 60-op graphs: the windowed drop set fits, costs no more than the greedy's, and
    is within 2% of the exact optimum wherever that optimum's drop set fits the planner's
    order (the exact model also chooses the order; the windows keep the order fixed)."""
    g = random_train_graph(seed, 8)
    assert len(g.ops) <= 60
    for frac in (0.8, 0.9):
        ev, b, e = _greedy(g, frac)
        if e is None:
            continue
        r, rep = _refined(ev, e, b)
        ex = exact_recompute(g, b, time_limit_s=10.0, costs=_costs(g))
        assert ex.status == "optimal"
        if ev.evaluate(ex.dropped).peak_bytes <= b:  # the optimum fits this order too
            assert r.extra_cost <= 1.02 * ex.cost + 1
        assert rep.windows >= rep.improved


def test_windows_close_a_gap_the_greedy_leaves():
    """seed 1 at 90%: greedy + prune cost 15,114, the exact optimum 6,636; the windows
    reach it (a test that can fail if the windows do nothing)."""
    g = random_train_graph(1, 8)
    ev, b, e = _greedy(g, 0.9)
    assert e is not None
    r, rep = refine_windows(ev, e, b)
    assert e.extra_cost == 15_114
    assert r.extra_cost < e.extra_cost
    assert rep.improved >= 1
    assert r.extra_cost <= 1.02 * 6_636  # exact_recompute's optimum (the slow test above)


@pytest.mark.parametrize(("max_windows", "stopped"), [(1, "work"), (2, "work"), (3, "done"),
                                                       (16, "done")])
def test_windows_say_why_they_stopped(max_windows, stopped):
    """seed 1 at 90%: the first window improves the drop set, the second (around the new
    one) does not, and no third is left: a budget of 1 or 2 models stops the windows with
    some untried (``work``), 3 or more let them finish (``done``).  The report is the
    plan's ``recompute.windows`` stage."""
    g = random_train_graph(1, 8)
    ev, b, e = _greedy(g, 0.9)
    assert e is not None
    r, rep = refine_windows(ev, e, b, max_windows=max_windows)
    assert rep.stopped == stopped
    assert rep.windows == min(max_windows, 2)
    assert r.extra_cost < e.extra_cost
    s = rep.stage_cost()
    assert (s.stage, s.work_done, s.work_limit, s.work_unit, s.stopped) == (
        "recompute.windows", rep.windows, max_windows, "solves", stopped)
    assert s.within_budget


def test_windows_are_deterministic():
    g = random_train_graph(6, 8)
    ev, b, e = _greedy(g, 0.8)
    assert e is not None
    a, _ = refine_windows(ev, e, b)
    ev2, _, e2 = _greedy(g, 0.8)
    c, _ = refine_windows(ev2, e2, b)
    assert sorted(a.dropped) == sorted(c.dropped)


def test_a_drop_set_over_the_limit_is_returned_as_is():
    g = random_train_graph(1, 8)
    ev, _, e = _greedy(g, 0.9)
    r, rep = refine_windows(ev, e, e.peak_bytes - 1)
    assert r is e
    assert rep.windows == 0
    assert rep.stopped == "skipped"


@pytest.mark.parametrize("windows", [0, 16])
def test_budget_planner_uses_the_windows(windows):
    """Through make_plan (greedy path forced): the plan fits, passes the validator, and with
    the windows costs no more than without; the notes say what the windows did."""
    g = random_train_graph(1, 8)
    p0 = make_plan(g, PLAIN)
    res = g.resident_bytes()
    b = res + int((p0.planned_peak_bytes - res) * 0.9)
    cfg = FAST.with_recompute(exact_max_ops=0, windows=windows)
    bp = BudgetPlanner(g, cfg)
    plan = bp.plan_at(b)
    assert plan.arena_bytes <= b
    assert check_plan(g, plan) == []
    off = BudgetPlanner(g, cfg.with_recompute(windows=0)).plan_at(b)
    assert plan.extra_flops <= off.extra_flops or windows == 0
    if windows:
        assert any(n.startswith("exact windows") for n in plan.notes)
        assert bp.window_reports
        # the windows are the plan's first stage, with their budget and stop reason
        first = plan.stages[0]
        assert (first.stage, first.work_limit, first.work_unit) == (
            "recompute.windows", windows, "solves")
        assert first.stopped == "done"
        assert "recompute.windows" in format_stages(plan.stages)
        assert plan.stages[1].stage == "baselines"
    else:
        assert not any(n.startswith("exact windows") for n in plan.notes)
        assert all(s.stage != "recompute.windows" for s in plan.stages)


@pytest.mark.slow
def test_budget_planner_windows_on_a_teaching_sample():
    """teach_recompute (the teaching sample): with the portfolio, the windowed planner is
    never worse than without at three budgets, and every plan passes the validator."""

    path = SAMPLE_DIR / \
        "teach_recompute-b256-steady.json.gz"
    g = load_graph(path)
    cfg = FAST.with_recompute(portfolio=True, windows=16)
    on = BudgetPlanner(g, cfg)
    off = BudgetPlanner(g, cfg.with_recompute(windows=0))
    hi, lo = on.base.arena_bytes, on.lowest_bytes()
    for k in (1, 2, 3):
        b = -(-(lo + (hi - lo) * k // 4) // 512) * 512
        a, z = on.plan_at(b), off.plan_at(b)
        assert check_plan(g, a) == []
        assert a.arena_bytes <= b
        cost = on.costs.cost
        ca = sum(cost[r.source] for r in a.recompute)
        cz = sum(cost[r.source] for r in z.recompute)
        assert ca <= cz


def test_config_validates_the_window_fields():
    with pytest.raises(ConfigError):
        PlannerConfig().with_recompute(windows=-1)
    with pytest.raises(ConfigError):
        PlannerConfig().with_recompute(window_size=0)
    assert PlannerConfig().recompute.windows == 0  # off by default (see the config)


def test_roam_plan_windows_flag(tmp_path, capsys):
    """``roam plan --budget B --windows N`` turns the windows on: the plan's notes say what
    they did, the plan fits and passes ``roam check``; ``--windows 0`` is refused."""
    import json

    from roam_core.cli import main

    g = SAMPLE_DIR / \
        "teach_recompute-b256-steady.json.gz"
    out = tmp_path / "plan.json"
    assert main(["plan", str(g), "-o", str(out), "--budget", "6MiB", "--windows", "4",
                 "--json", "--no-progress"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert any(n.startswith("exact windows:") for n in d["notes"])
    assert d["arena_bytes"] <= 6 * 2**20
    assert main(["check", str(g), str(out)]) == 0
    with pytest.raises(SystemExit):
        main(["plan", str(g), "-o", str(out), "--budget", "6MiB", "--windows", "0"])
