"""torch's min-cut partitioner as a frontier baseline: torch's decision mapped onto roam's graph."""

from __future__ import annotations

import json

import pytest
import torch

from roam_core.oracle.validate import check_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.trace import min_cut as mc
from roam_core.trace import trace_fx
from tests.builders import random_train_graph

CFG = PlannerConfig(workers=1, layout_time_limit_s=2.0)


def _mlp(width: int = 64):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.Dropout(0.1),
                               torch.nn.GELU(), torch.nn.Linear(width, 64),
                               torch.nn.Dropout(0.1), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def _loss(y):  # type: ignore[no-untyped-def]
    return y.square().mean()


def _masks(g):  # type: ignore[no-untyped-def]
    """The dropout masks: storages written in place by a random op."""
    return {s for o in g.ops if o.random for s in o.mutates}


def _dropout_mlp_decisions():  # type: ignore[no-untyped-def]
    model, x = _mlp(), torch.randn(64, 32)
    traced = trace_fx(model, [x], _loss, "adamw")
    res = mc.torch_min_cut(traced, model, [x], _loss, budgets=(0.1, 1.0))
    assert res.reason is None, res.reason
    return model, x, traced.graph, res


@pytest.mark.slow
def test_min_cut_on_a_small_mlp_maps_and_its_plan_validates():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    traced = trace_fx(model, [x], _loss, "sgd")
    res = mc.torch_min_cut(traced, model, [x], _loss, budgets=(0.1,))
    assert res.reason is None, res.reason
    (d,) = res.decisions
    assert d.dropped  # the GELU's input is re-run from the first layer's input
    plan = BudgetPlanner(traced.graph, CFG).plan_for_drops(d.dropped)
    assert check_plan(traced.graph, plan) == []
    assert plan.extra_flops == d.recomputed_flops


@pytest.mark.slow
def test_min_cut_on_a_dropout_mlp_maps_completely_and_plans_validate():
    _model, _x, g, res = _dropout_mlp_decisions()
    assert [d.method for d in res.decisions] == ["torch_min_cut_0.1", "torch_min_cut_1.0"]
    assert res.matched_ops >= res.forward_ops - 1  # at most one view without a counterpart
    low, full = res.decisions
    # torch's default cut saves the masks (as bool; roam keeps its float mask); the low
    # budget's knapsack re-runs dropout in the backward, so roam re-draws the masks
    assert not _masks(g) & set(full.dropped)
    assert _masks(g) <= set(low.dropped)
    assert full.recomputed_flops == 0 < low.recomputed_flops
    assert low.saved_bytes < full.saved_bytes
    assert full.retained_bytes > low.retained_bytes
    bp = BudgetPlanner(g, CFG)
    for d in res.decisions:
        plan = bp.plan_for_drops(d.dropped, label=d.method)
        assert check_plan(g, plan) == []
        # roam's re-runs are torch's re-runs: the same FLOPs by roam's per-op counts
        assert plan.extra_flops == d.recomputed_flops
        assert any(g.op(r.source).random for r in plan.recompute) == (d is low)


@pytest.mark.slow
def test_the_mapped_min_cut_plan_replays_dropout_bit_exact():
    from roam_core.runtime import execute_plan

    model, x, g, res = _dropout_mlp_decisions()
    plan = BudgetPlanner(g, CFG).plan_for_drops(res.decisions[0].dropped)
    rep = execute_plan(model, [x], plan, loss_fn=_loss, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0


@pytest.mark.slow
def test_a_decision_for_another_model_is_refused():
    x = torch.randn(16, 32)
    traced = trace_fx(_mlp(64), [x], _loss, "adamw")
    res = mc.torch_min_cut(traced, _mlp(48), [x], _loss, budgets=(1.0,))
    assert res.decisions == ()
    assert res.reason is not None
    assert "does not map onto roam's graph" in res.reason


@pytest.mark.slow
def test_missing_torch_apis_make_it_not_applicable(monkeypatch):
    from roam_core.commands.frontier import frontier_dict
    from roam_core.zoo.min_cut import zoo_min_cut

    monkeypatch.setattr(mc, "_apis", lambda: "torch 0.0 lacks AOT autograd's min-cut "
                                             "partitioner")
    x = torch.randn(8, 32)
    res = mc.torch_min_cut(trace_fx(_mlp(), [x], _loss, "adamw"), _mlp(), [x], _loss)
    assert res.reason == "torch 0.0 lacks AOT autograd's min-cut partitioner"
    assert mc.min_cut_available() is not None
    g = random_train_graph(3, 6)
    assert "torch 0.0" in (zoo_min_cut(g).reason or "")
    d = frontier_dict(g, CFG, budgets=2)
    assert d["torch_min_cut"]["applicable"] is False
    assert not any(p["method"].startswith("torch_min_cut") for p in d["points"])
    assert any("torch_min_cut: not applicable" in n for n in d["notes"])


def test_non_zoo_graphs_and_bad_budgets_are_not_applicable():
    from roam_core.zoo.min_cut import zoo_min_cut

    assert "not a zoo model" in (zoo_min_cut(random_train_graph(3, 6)).reason or "")
    x = torch.randn(8, 32)
    traced = trace_fx(_mlp(), [x], _loss, "adamw")
    assert "[0, 1]" in (mc.torch_min_cut(traced, _mlp(), [x], _loss, (1.5,)).reason or "")


def test_method_names_and_defaults():
    from roam_core.commands import frontier

    assert mc.min_cut_method(0.5) == "torch_min_cut_0.5"
    assert mc.min_cut_method(1.0) == "torch_min_cut_1.0"
    assert mc.min_cut_method(0.05) == "torch_min_cut_0.05"
    from roam_core.zoo import min_cut as zmc

    assert frontier.MIN_CUT_BUDGETS == mc.MIN_CUT_BUDGETS
    assert frontier.NOT_ZOO == zmc.NOT_ZOO
    assert frontier._budget_list("0.1, 0.5") == (0.1, 0.5)
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        frontier._budget_list("0.1,2")


@pytest.mark.slow
def test_min_cut_on_the_tiny_gpt_zoo_graph():
    """Every budget maps completely; peaks are recorded, not required monotone (torch's
    choice need not be, pytorch issue #197838)."""
    from roam_core.zoo import trace_zoo
    from roam_core.zoo.min_cut import zoo_min_cut

    traced = trace_zoo("tiny_gpt", 2, 16, attention="math")
    g = traced.graph
    budgets = (0.1, 0.5, 1.0)
    res = zoo_min_cut(g, budgets, traced=traced)
    assert res.reason is None, res.reason
    assert [d.budget for d in res.decisions] == list(budgets)
    assert res.matched_ops >= 0.95 * res.forward_ops
    bp = BudgetPlanner(g, CFG)
    peaks = []
    for d in res.decisions:
        plan = bp.plan_for_drops(d.dropped, label=d.method)
        assert check_plan(g, plan) == []
        assert plan.extra_flops == d.recomputed_flops
        assert d.kept_by_rules == ()
        peaks.append(plan.arena_bytes)
    assert res.decisions[0].recomputed_flops > res.decisions[-1].recomputed_flops == 0
    assert min(peaks) < bp.base.arena_bytes


@pytest.mark.slow
def test_cli_frontier_has_min_cut_points(tmp_path, capsys):
    from roam_core.cli import main
    from roam_core.formats.graph_io import save_graph
    from roam_core.zoo import trace_zoo

    save_graph(trace_zoo("mlp", 4).graph, tmp_path / "g.json")
    assert main(["frontier", str(tmp_path / "g.json"), "--budgets", "3", "--json",
                 "--time-limit", "1", "--min-cut-budgets", "0.5,1", "--plans",
                 str(tmp_path / "plans")]) == 0
    d = json.loads(capsys.readouterr().out)
    methods = {p["method"] for p in d["points"]}
    assert {"torch_min_cut_0.5", "torch_min_cut_1.0"} <= methods
    assert d["torch_min_cut"]["applicable"] is True
    assert [b["method"] for b in d["torch_min_cut"]["budgets"]] == ["torch_min_cut_0.5",
                                                                  "torch_min_cut_1.0"]
    assert main(["check", str(tmp_path / "g.json"),
                 str(tmp_path / "plans" / "torch_min_cut_0.5.json")]) == 0
    # the graph file was traced again (fingerprint checked) and mapped completely
    assert d["torch_min_cut"]["matched_ops"] >= d["torch_min_cut"]["forward_ops"] - 3
    capsys.readouterr()
    assert main(["frontier", str(tmp_path / "g.json"), "--budgets", "2", "--json",
                 "--time-limit", "1", "--no-min-cut"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["torch_min_cut"] is None
    assert not any(p["method"].startswith("torch_min_cut") for p in d["points"])
