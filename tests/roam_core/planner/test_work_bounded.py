"""The ordering's CP-SAT solves are bounded by work, so the plan does not depend on the load.

A solve is cut by CP-SAT's deterministic time; behind it stand a CPU-time safety limit (it
does not grow with the machine's load) and, far behind, the wall clock.  The slow tests
plan a small FSDP rank (tiny_gpt, world size 2) twice, once with the machine kept busy by a
child process, and assert the same plan and that no stage stopped for ``time``.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
from pathlib import Path

import pytest

from roam_core.base.cpsat import make_solver, solve_with_stop
from roam_core.model.stage_cost import format_stages, worst_stop
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.order_ilp import solve_order_problem
from roam_core.ordering.order_model import build_order_model
from roam_core.ordering.order_problem import build_order_problem


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def _problem(limit_s: float):  # type: ignore[no-untyped-def]
    from roam_core.model.samples import diamond

    g = diamond()
    return build_order_problem(g, g.op_ids, list(g.op_ids), task_id="all",
                               config=OrderSolverConfig(time_limit_s=limit_s),
                               alignment_bytes=1)


def test_worst_stop_reports_the_reason_that_says_most() -> None:
    assert worst_stop(["done", "at_bound"]) == "at_bound"
    assert worst_stop(["done", "work", "time"]) == "time"
    assert worst_stop([], "skipped") == "skipped"


def test_a_small_solve_finishes_and_says_done() -> None:
    res = solve_order_problem(_problem(1.0))
    assert res.stopped in ("done", "at_bound")


def _golomb(marks: int):  # type: ignore[no-untyped-def]
    """A Golomb ruler: small to state, long to prove (what a limit must cut)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    xs = [m.new_int_var(0, marks * marks, f"x{i}") for i in range(marks)]
    m.add(xs[0] == 0)
    diffs = []
    for i in range(marks):
        for j in range(i + 1, marks):
            d = m.new_int_var(1, marks * marks, f"d{i}_{j}")
            m.add(d == xs[j] - xs[i])
            diffs.append(d)
    m.add_all_different(diffs)
    for i in range(marks - 1):
        m.add(xs[i] < xs[i + 1])
    m.minimize(xs[-1])
    return m


def test_the_cpu_safety_limit_stops_a_solve_and_says_time() -> None:
    solver = make_solver(time_limit_s=50.0, wall_slack=4.0)
    out = solve_with_stop(solver, _golomb(10), cpu_limit_s=0.1)
    assert out.stopped == "time", out
    assert out.wall_time_s < 10


def test_the_deterministic_limit_says_work() -> None:
    solver = make_solver(time_limit_s=0.02, wall_slack=1000.0)
    out = solve_with_stop(solver, _golomb(10), cpu_limit_s=20.0)
    assert out.stopped == "work", out
    assert out.deterministic_time_s >= 0.0198


def _plan_file(path: str, out: str) -> None:
    """Plan the graph at ``path`` (default settings, one worker) into ``out`` (pickle)."""
    from roam_core.formats.graph_io import load_graph
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    plan = make_plan(load_graph(path), PlannerConfig(workers=1))
    Path(out).write_bytes(pickle.dumps((plan.order, plan.planned_peak_bytes, plan.arena_bytes,
                                        [(s.stage, s.stopped) for s in plan.stages],
                                        format_stages(plan.stages))))


@pytest.mark.slow
def test_a_small_fsdp_rank_plans_the_same_under_load(tmp_path: Path) -> None:
    from roam_core.formats.graph_io import save_graph
    from roam_core.model.parallel import ParallelSetting
    from roam_core.zoo.steps import trace_zoo

    g = trace_zoo("tiny_gpt", 2, 16, parallel=ParallelSetting("fsdp", 2)).graph
    gpath = tmp_path / "g.json"
    save_graph(g, gpath)
    ctx = multiprocessing.get_context("spawn")
    results = []
    for busy in (False, True):
        spinners = [ctx.Process(target=_spin, args=(120.0,)) for _ in range(3 if busy else 0)]
        for p in spinners:
            p.start()
        try:
            out = tmp_path / f"plan{int(busy)}.pkl"
            _plan_file(str(gpath), str(out))
            results.append(pickle.loads(out.read_bytes()))
        finally:
            for p in spinners:
                p.terminate()
                p.join()
    (order0, peak0, arena0, stops0, text0), (order1, peak1, arena1, _, text1) = results
    assert all(why != "time" for _, why in stops0), text0
    assert (order0, peak0, arena0) == (order1, peak1, arena1), (text0, text1)
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_the_polish_window_is_cut_by_work_not_the_clock() -> None:
    # one 120-op window of a tiny_gpt FSDP rank solved with a deterministic limit far below
    # its proof: the solve stops for work (never the wall clock), and twice gives one order
    from roam_core.model.parallel import ParallelSetting
    from roam_core.zoo.steps import trace_zoo

    g = trace_zoo("tiny_gpt", 1, 16, parallel=ParallelSetting("fsdp", 2)).graph
    order = list(g.op_ids)
    mid = len(order) // 2
    cfg = OrderSolverConfig(time_limit_s=0.2)
    p = build_order_problem(g, order, order[mid - 60:mid + 60], task_id="w", config=cfg,
                            alignment_bytes=512)
    a, b = solve_order_problem(p), solve_order_problem(p)
    assert a.stopped in ("work", "done", "at_bound"), a
    assert a.orders == b.orders
    assert build_order_model(p).scale >= 1
