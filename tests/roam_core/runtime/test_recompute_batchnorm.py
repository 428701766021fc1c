"""Re-running batch norm: same outputs from the batch, running statistics updated once."""

from __future__ import annotations

import copy

import pytest
import torch

from roam_core.model.recompute_ops import (
    droppable_storages,
    expand_graph,
    recompute_blocker,
    running_stats_writes,
)
from roam_core.oracle.validate import check_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.runtime import PlannedStep, execute_plan
from roam_core.trace import trace_fx

CFG = PlannerConfig(workers=1, layout_time_limit_s=2.0)


def _cnn(affine: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8, affine=affine),
        torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 4))


def _loss(y: torch.Tensor) -> torch.Tensor:
    return y.square().mean()


def _bn_plan(model: torch.nn.Module, x: torch.Tensor):  # type: ignore[no-untyped-def]
    g = trace_fx(model, [x], _loss, "adamw").graph
    bns = [op for op in g.ops if op.target == "aten.native_batch_norm.default"]
    assert len(bns) == 2
    for op in bns:
        assert running_stats_writes(g, op) == frozenset(op.mutates) != frozenset()
        assert recompute_blocker(g, op.id) is None
    # the backward reads each ReLU's output: dropping it re-runs the ReLU on a re-run of
    # its batch norm (whose output was freed after the forward)
    relus = [op for op in g.ops if op.target == "aten.relu.default"]
    drops = [g.storage_of(op.outputs[0]) for op in relus]
    assert len(drops) == 2
    assert set(drops) <= set(droppable_storages(g))
    drops += [g.storage_of(op.outputs[0]) for op in bns]  # the chain: ReLU on batch norm
    plan = BudgetPlanner(g, CFG).plan_for_drops(drops)
    assert {r.source for r in plan.recompute} >= {op.id for op in bns}
    return g, plan


@pytest.mark.slow
def test_batch_norm_reruns_leave_the_running_statistics_alone() -> None:
    model, x = _cnn(), torch.randn(4, 3, 8, 8)
    g, plan = _bn_plan(model, x)
    assert check_plan(g, plan) == []
    # in the expanded graph the re-runs write nothing in place
    g2 = expand_graph(g, plan.recompute)
    for r in plan.recompute:
        assert g2.op(r.id).mutates == ()
    rep = execute_plan(model, [x], plan, loss_fn=_loss, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0


@pytest.mark.slow
def test_batch_norm_recompute_plan_trains_bit_exact_with_statistics_updated_once() -> None:
    for affine in (True, False):  # without weight and bias the statistics move in the inputs
        model, x = _cnn(affine), torch.randn(4, 3, 8, 8)
        _g, plan = _bn_plan(model, x)
        ref = copy.deepcopy(model)
        opt = torch.optim.AdamW(ref.parameters(), foreach=False, fused=False)
        step = PlannedStep(model, plan, _loss, "adamw", example_inputs=[x])
        for i in range(3):
            xi = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(i))
            loss = step(xi)
            opt.zero_grad(set_to_none=True)
            want = _loss(ref(xi))
            want.backward()
            opt.step()
            assert torch.equal(torch.as_tensor(loss), want.detach())
            for a, b in zip(model.parameters(), ref.parameters(), strict=True):
                assert torch.equal(a.detach(), b.detach())
            # running mean / variance and the batch counter: one update a step, as eager
            for a, b in zip(model.buffers(), ref.buffers(), strict=True):
                assert torch.equal(a, b)


@pytest.mark.slow
def test_the_control_a_rerun_with_running_statistics_updates_them_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the runtime avoids: re-running batch norm as traced (``torch.utils.checkpoint``
    does) moves the running statistics a second time, though the step's values agree."""
    import roam_core.runtime.recompute_replay as rr

    monkeypatch.setattr(rr, "_without_running_stats", lambda node: None)
    model, x = _cnn(), torch.randn(4, 3, 8, 8)
    _g, plan = _bn_plan(model, x)
    ref = copy.deepcopy(model)
    step = PlannedStep(model, plan, _loss, "adamw", example_inputs=[x])
    loss = step(x)
    assert torch.equal(torch.as_tensor(loss), _loss(ref(x)).detach())  # same values
    (rm, ref_rm) = (dict(m.named_buffers())["1.running_mean"] for m in (model, ref))
    assert not torch.equal(rm, ref_rm)
