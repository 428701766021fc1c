"""autocast's repeated casts of one activation made once: fewer bytes, eager's numerics."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

import roam_core as rc
from roam_core.trace.identical_casts import merge_identical_casts
from tests.roam_core.trace.cast_models import Fanout

CAST = "aten._to_copy.default"


def _casts(g: rc.Graph) -> int:
    return Counter(op.target for op in g.ops)[CAST]


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_repeated_casts_are_merged_and_replay_bit_exactly(precision: str) -> None:
    from roam_core.runtime import execute_traced
    from roam_core.trace.tracer import trace_fx

    torch.manual_seed(0)
    model, x = Fanout(), torch.randn(4, 8)
    plain = trace_fx(model, [x], optimizer="adamw", precision=precision)
    merged = trace_fx(model, [x], optimizer="adamw", precision=precision, merge_casts=True)
    # three casts of h become one (the weights' casts are autocast's own, one each)
    assert _casts(plain.graph) - _casts(merged.graph) == 2
    assert merged.graph.origin["merged_casts"] == 2
    assert "merge_casts" not in plain.graph.origin
    act = sum(t.size_bytes for t in merged.graph.tensors.values())
    assert act < sum(t.size_bytes for t in plain.graph.tensors.values())
    # the linears' views of h alias the one cast left (no storage of their own)
    kept = {merged.graph.storage_of(v) for op in merged.graph.ops if op.target == CAST
            for v in op.outputs}
    views = [op for op in merged.graph.ops if op.target == "aten.view.default"
             and merged.graph.storage_of(op.inputs[0]) in kept]
    assert all(merged.graph.storage_of(op.outputs[0]) in kept for op in views)
    plan = rc.make_plan(merged.graph, rc.PlannerConfig(workers=1, time_limit_s=1))
    assert rc.check_plan(merged.graph, plan) == []
    report = execute_traced(merged, model, [x], plan, optimizer="adamw", steps=2)
    assert report.numerics_ok, report.summary()
    assert report.max_abs_diff == 0.0


def test_a_write_between_two_casts_keeps_both() -> None:
    """A mutation between two casts may change their input: the second is kept."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.bfloat16})
    w = g.call_function(torch.ops.aten.add_.Tensor, (x, x))
    b = g.call_function(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.bfloat16})
    c = g.call_function(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.bfloat16})
    g.output((a, w, b, c))
    val = torch.empty(2, dtype=torch.bfloat16)
    for n in (a, b, c):
        n.meta["val"] = val
    gm = torch.fx.GraphModule(nn.Module(), g)
    assert merge_identical_casts(gm) == 1  # c reads b; a and b stay apart
    kept = [n for n in gm.graph.nodes if n.target is torch.ops.aten._to_copy.default]
    assert kept == [a, b]


@pytest.mark.slow
def test_a_small_llama_in_bf16_mixed_merges_its_projection_casts() -> None:
    """Per layer, q/k/v read one cast of the first RMSNorm's output, gate/up one of the
    second's: 3 casts fewer per layer; the plan under a budget replays bit-exactly."""
    from roam_core.oracle.simulate import simulate
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.runtime import execute_traced
    from roam_core.zoo.hf import hf_step_from_origin, trace_hf

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 128, "max_position_embeddings": 64}
    plain = trace_hf(cfg, 2, 16, precision="bf16-mixed").graph
    ts = trace_hf(cfg, 2, 16, precision="bf16-mixed", merge_casts=True)
    assert _casts(plain) - _casts(ts.graph) == 3 * 2
    # the projections' views alias the kept cast: the saved bytes fall by the merged ones
    merged_bytes = 3 * 2 * 2 * 16 * 64 * 2  # per layer 3 casts of B x T x hidden bf16
    assert simulate(plain).peak_bytes - simulate(ts.graph).peak_bytes == merged_bytes
    bp = BudgetPlanner(ts.graph, rc.PlannerConfig(workers=1, time_limit_s=2))
    plan = bp.plan_at((bp.base.arena_bytes + bp.lowest_bytes()) // 2)
    assert plan.recompute
    assert rc.check_plan(ts.graph, plan) == []
    step = hf_step_from_origin(ts.graph.origin)
    report = execute_traced(ts, step.model, step.example_inputs, plan, loss_fn=step.loss_fn,
                            optimizer=step.optimizer_factory, steps=2)
    assert report.numerics_ok, report.summary()
    assert report.max_abs_diff == 0.0
