"""make_plan: valid, never worse than the baselines, cancellable, deterministic."""

from __future__ import annotations

import concurrent.futures as cf
import threading

import pytest
from hypothesis import given, settings

from roam_core.base.errors import ConfigError
from roam_core.base.status import SolveStatus
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order, check_plan
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.registry import best_heuristic_order, run_method
from roam_core.planner import PlanProgress, make_plan, order_methods
from roam_core.planner.config import PlannerConfig
from tests.builders import tied_branches, wide_branches
from tests.strategies import random_graphs

FAST = PlannerConfig(node_limit=4, workers=1, solve_layout=False,
                     order=OrderSolverConfig(time_limit_s=2.0))
STAGES = ["baseline", "rewrite", "decompose", "order", "layout", "done"]


def _valid(graph: Graph, plan: Plan) -> None:
    assert check_order(graph, plan.order) == []
    assert check_plan(graph, plan) == []
    prof = simulate(graph, plan.order, alignment_bytes=plan.alignment_bytes)
    assert plan.planned_peak_bytes == prof.peak_bytes
    assert plan.live_bytes == prof.live_bytes
    assert plan.arena_bytes >= plan.planned_peak_bytes >= plan.lower_bound_bytes
    assert plan.baseline_peak_bytes == simulate(graph).peak_bytes
    if plan.method == "roam":
        assert set(plan.task_of_op) == set(graph.op_ids)
    else:
        assert plan.task_of_op == {}
    pos = {op: i for i, op in enumerate(plan.order)}
    assert all(pos[e.src] < pos[e.dst] for e in plan.extra_edges)


@pytest.mark.slow  # ~3-16 s: CP-SAT / exact search on many instances
@settings(max_examples=20)
@given(random_graphs(max_ops=20))
def test_plans_are_valid_and_never_worse_than_the_best_baseline(graph: Graph) -> None:
    plan = make_plan(graph, FAST)
    _valid(graph, plan)
    best = best_heuristic_order(graph).profile.peak_bytes
    assert plan.planned_peak_bytes <= best
    assert plan.method == "roam"
    assert plan.task_tree is not None
    assert plan.task_tree["id"] == "root"


def test_progress_is_monotone_and_reaches_done() -> None:
    seen: list[PlanProgress] = []
    make_plan(tiny_train_step(), FAST, progress=seen.append)
    stages = [STAGES.index(p.stage) for p in seen]
    assert stages == sorted(stages)
    assert seen[-1].stage == "done"
    order_steps = [p.done for p in seen if p.stage == "order"]
    assert order_steps == sorted(order_steps)
    assert order_steps[-1] == [p.total for p in seen if p.stage == "order"][-1]
    peaks = [p.best_peak_bytes for p in seen if p.best_peak_bytes is not None]
    assert peaks == sorted(peaks, reverse=True)


@settings(max_examples=10)
@given(random_graphs(max_ops=20, min_ops=8))
def test_cancel_and_tiny_time_limits_still_give_valid_plans(graph: Graph) -> None:
    ev = threading.Event()
    ev.set()
    _valid(graph, make_plan(graph, FAST, cancel=ev))
    tiny = PlannerConfig(node_limit=3, workers=1, solve_layout=False, time_limit_s=1e-6,
                         order=OrderSolverConfig(time_limit_s=0.01))
    _valid(graph, make_plan(graph, tiny))
    calls = [0]

    def after_two() -> bool:
        calls[0] += 1
        return calls[0] > 2

    _valid(graph, make_plan(graph, FAST, cancel=after_two))


def test_cancelled_run_says_so_in_the_notes() -> None:
    ev = threading.Event()
    ev.set()
    plan = make_plan(tiny_train_step(), FAST, cancel=ev)
    assert any("not solved (cancelled)" in n for n in plan.notes) or all(
        r.status in ("trivial", "bound") for r in plan.provenance if r.stage == "order")


@settings(max_examples=8)
@given(random_graphs(max_ops=20, min_ops=10))
def test_deterministic_for_a_fixed_seed(graph: Graph) -> None:
    a = make_plan(graph, FAST)
    b = make_plan(graph, FAST)
    assert a.order == b.order
    assert a.offsets == b.offsets


@settings(max_examples=5)
@given(random_graphs(max_ops=20, min_ops=10))
def test_executor_results_match_in_process(graph: Graph) -> None:
    with cf.ThreadPoolExecutor(2) as ex:
        a = make_plan(graph, FAST, executor=ex)
    b = make_plan(graph, FAST)
    assert a.order == b.order


def test_default_process_pool() -> None:
    cfg = PlannerConfig(node_limit=3, workers=2, solve_layout=False,
                        order=OrderSolverConfig(time_limit_s=1.0, stop_at_lower_bound=False))
    g = tiny_train_step()
    _valid(g, make_plan(g, cfg))


@pytest.mark.parametrize("method", ["eager", "lpmf", "lpmf_updates"])
def test_baseline_methods_return_their_order(method: str) -> None:
    g = tiny_train_step()
    plan = make_plan(g, FAST, method=method)
    assert plan.method == method
    assert plan.order == run_method(g, method)
    _valid(g, plan)


def test_method_registry_starts_with_roam() -> None:
    assert order_methods()[0] == "roam"
    assert "lpmf_updates" in order_methods()


def test_layout_solver_path() -> None:
    g = tiny_train_step()
    cfg = PlannerConfig(node_limit=4, workers=1, layout_time_limit_s=2.0)
    plan = make_plan(g, cfg)
    _valid(g, plan)
    assert any(r.stage == "layout" for r in plan.provenance)


def test_cli_plan_json(tmp_path, capsys) -> None:
    import json

    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph
    from roam_core.formats.plan_io import load_plan

    g = tiny_train_step()
    src, out = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(g, src)
    rc = main(["plan", str(src), "-o", str(out), "--json", "--workers", "1",
               "--time-limit", "1", "--node-limit", "4", "--setting-note"])
    assert rc == 0
    cap = capsys.readouterr()
    summary = json.loads(cap.out)
    for key in ("baseline_peak_bytes", "planned_peak_bytes", "arena_bytes",
                "lower_bound_bytes", "solve_seconds", "method", "fragmentation"):
        assert key in summary
    assert "roam plan:" in cap.err  # the progress bar
    plan = load_plan(out, g)
    assert check_plan(g, plan) == []
    assert summary["planned_peak_bytes"] == plan.planned_peak_bytes
    # what each stage spent, in the summary and in the plan file
    assert [s["stage"] for s in summary["stages"]] == [s.stage for s in plan.stages]
    assert summary["stages"][0]["stage"] == "baselines"
    assert summary["stages"][-1]["stage"] == "validate"


def test_cli_plan_prints_the_stages_on_one_line(tmp_path, capsys) -> None:
    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph

    src, out = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(tiny_train_step(), src)
    assert main(["plan", str(src), "-o", str(out), "--workers", "1", "--no-progress"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("stages")]
    assert len(lines) == 1
    assert "baselines" in lines[0]
    assert "layout." in lines[0]
    assert lines[0].rstrip().endswith("s")  # validate 0.00 s


def test_cli_plan_baseline_method(tmp_path, capsys) -> None:
    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph

    src, out = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(tiny_train_step(), src)
    assert main(["plan", str(src), "-o", str(out), "--method", "lescea", "--no-progress"]) == 0
    assert "method lescea" in capsys.readouterr().out


@pytest.mark.parametrize(("make", "words"), [
    (lambda: PlannerConfig(workers=0), "workers must be at least 1"),
    (lambda: PlannerConfig(time_limit_s=-1.0), "time_limit_s must be at least 0"),
    (lambda: PlannerConfig(node_limit=0), "node_limit must be at least 1"),
    (lambda: PlannerConfig(alignment_bytes=0), "alignment_bytes must be at least 1"),
    (lambda: PlannerConfig(update_policy="sometimes"), "unknown update policy 'sometimes'"),
    (lambda: PlannerConfig(baselines="lpmf"), "baselines must be a tuple"),
    (lambda: PlannerConfig(workers=2.5), "workers must be an integer"),
    (lambda: PlannerConfig(layout_time_limit_s=float("nan")), "layout_time_limit_s"),
    (lambda: OrderSolverConfig(time_limit_s=-0.5), r"order\.time_limit_s must be at least"),
    (lambda: OrderSolverConfig(num_search_workers=0), "num_search_workers"),
])
def test_impossible_settings_raise_config_error_when_made(make, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=words):
        make()


def test_unknown_names_raise_config_error() -> None:
    g = tiny_train_step()
    with pytest.raises(ConfigError, match="unknown ordering method 'nope'"):
        make_plan(g, FAST, method="nope")
    with pytest.raises(ConfigError, match=r"unknown ordering method.*'lpmff'"):
        make_plan(g, PlannerConfig(workers=1, solve_layout=False, baselines=("lpmff",)))


def test_the_planner_orders_at_its_alignment() -> None:
    g = tied_branches()  # the branches tie at 512 B; in exact bytes one order is 400 B lower
    exact = PlannerConfig(workers=1, solve_layout=False, alignment_bytes=1)
    plan = make_plan(g, exact, method="inductor")
    assert (plan.alignment_bytes, plan.planned_peak_bytes) == (1, 1110)
    rounded = make_plan(g, FAST, method="inductor")
    assert simulate(g, rounded.order, alignment_bytes=1).peak_bytes == 1510
    assert make_plan(g, exact).planned_peak_bytes == 1110


def test_statuses_are_solve_status_members() -> None:
    plan = make_plan(tiny_train_step(), FAST)
    assert plan.provenance
    assert all(type(r.status) is SolveStatus for r in plan.provenance)


def test_arena_settings_are_reachable_and_recorded() -> None:
    from roam_core.layout.config import ArenaConfig

    cfg = PlannerConfig(workers=1, node_limit=4, layout_time_limit_s=3.0,
                        arena=ArenaConfig(shake_rounds=2, use_cpsat=False),
                        order=OrderSolverConfig(time_limit_s=1.0, random_seed=7))
    # alignment, budget and seed follow the planner's own settings (one source each)
    assert (cfg.arena.alignment_bytes, cfg.arena.time_limit_s, cfg.arena.seed) == (512, 3.0, 7)
    assert PlannerConfig.from_dict(cfg.to_dict()) == cfg
    plan = make_plan(tiny_train_step(), cfg)
    assert plan.settings["arena"]["shake_rounds"] == 2
    assert plan.settings["arena"]["use_cpsat"] is False
    assert PlannerConfig.from_dict(plan.settings).arena == cfg.arena
    with pytest.raises(ConfigError, match=r"arena\.num_workers must be at least 1"):
        ArenaConfig(num_workers=0)
    moved = cfg.with_order(random_seed=9)  # a copy keeps them in step
    assert moved.arena.seed == 9


@pytest.mark.slow  # ~2-4 s: two CP-SAT solves in a process pool, stopped after about 1 s
def test_cancel_stops_the_pool_solves_that_are_running() -> None:
    import multiprocessing

    g = wide_branches(60)  # two fan-outs: two sub-tasks that each take minutes to prove
    cfg = PlannerConfig(node_limit=122, workers=2, solve_layout=False, polish_rounds=0,
                        baselines=("eager",),
                        order=OrderSolverConfig(time_limit_s=120.0, stop_at_lower_bound=False))
    ev = threading.Event()
    timer: list[threading.Timer] = []

    def progress(p: PlanProgress) -> None:
        if p.stage == "order" and p.done == 0 and not timer:  # the solves are being submitted
            timer.append(threading.Timer(1.5, ev.set))
            timer[0].start()

    plan = make_plan(g, cfg, progress=progress, cancel=ev)
    _valid(g, plan)
    orders = [r for r in plan.provenance if r.stage == "order"]
    assert len(orders) == 2
    # both were running when the cancel came, and both came back stopped, long before their
    # 120 s (deterministic) limit, with what they had found by then
    assert [r.status for r in orders] == [SolveStatus.CANCELLED] * 2
    assert all(0.0 < r.wall_time_s < 60.0 for r in orders)
    assert any("stopped early (cancelled)" in n for n in plan.notes)
    assert multiprocessing.active_children() == []  # the pool is gone, nothing runs on


@pytest.mark.slow
def test_a_bound_that_proves_the_base_order_optimal_skips_the_sub_task_solves() -> None:
    """On a GPT-2 steady step the forward-value choice bound proves the base order optimal:
    it is computed before the sub-tasks, which then all stop at their floor, and the polish
    and the whole-order search do not run.  Without the tighter bounds the plan has the same
    order quality (the same peak) but a lower proven bound."""
    transformers = pytest.importorskip("transformers")
    from roam_core.zoo.hf import trace_hf

    cfg = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=256,
                                  n_positions=32, bos_token_id=0, eos_token_id=0)
    g = trace_hf(cfg, 1, 32, setting="steady").graph
    p = make_plan(g, PlannerConfig(workers=1, solve_layout=False))
    stages = [(r.stage, r.task_id) for r in p.provenance]
    assert p.planned_peak_bytes == p.lower_bound_bytes
    first_order = min(k for k, s in enumerate(stages) if s[0] == "order")
    assert stages.index(("bound", "forward_values")) < first_order
    assert {r.status for r in p.provenance if r.stage == "order"} <= {
        SolveStatus.BOUND, SolveStatus.TRIVIAL}
    assert not any(s[0] in ("polish", "search") for s in stages)
    loose = make_plan(g, PlannerConfig(workers=1, solve_layout=False, tighten_bound=False))
    assert loose.planned_peak_bytes == p.planned_peak_bytes
    assert loose.lower_bound_bytes < p.lower_bound_bytes
