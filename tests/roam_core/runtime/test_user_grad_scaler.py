"""A user's own ``torch.amp.GradScaler`` (init scale, growth and backoff factors, growth
interval) in ``fp16-mixed``: traced into the scale update, replayed bit-exactly."""

from __future__ import annotations

import copy

import pytest
import torch

import roam_core as rc
from roam_core.base.errors import TraceError
from roam_core.runtime import PlannedStep
from roam_core.runtime.compare_training import eager_call
from roam_core.trace.precision import StepPrecision
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order
from tests.roam_core.runtime.test_fp16_loops import MODELS


def _scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_factor=4.0,
                                backoff_factor=0.25, growth_interval=2)


@pytest.mark.slow
def test_planned_step_with_the_users_grad_scaler_trains_like_eager() -> None:
    """Six steps, one of them overflowing: the scale grows every 2 good steps by 4x and
    backs off by 0.25x, exactly as the eager loop with the same scaler."""
    net, data, loss_fn, factory = MODELS["mlp"](0)
    eager_net = copy.deepcopy(net)
    opt = factory(list(eager_net.parameters()))
    mixed = StepPrecision("fp16-mixed", torch.device("cpu"), scaler=_scaler())
    step = PlannedStep(net, None, loss_fn, factory, example_inputs=data[0],
                       precision="fp16-mixed", grad_scaler=_scaler(), plan_cache=False)
    scales = []
    for i in range(6):
        batch = data[i] if i != 3 else [data[i][0] * 1e5, data[i][1]]  # overflows fp16
        torch.manual_seed(i)
        le = eager_call(eager_net, opt, loss_fn, batch, mixed=mixed)
        torch.manual_seed(i)
        lp = step(*batch)
        assert torch.equal(le, lp) or bool(le.isnan() and lp.isnan())
        assert torch.equal(mixed.scaler._scale, step.scaler._scale)
        scales.append(float(step.scaler.get_scale()))
    assert scales == [256.0, 1024.0, 1024.0, 256.0, 256.0, 1024.0]
    for a, b in zip(eager_net.state_dict().values(), net.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # BN stats: NaN


@pytest.mark.slow
def test_execute_plan_with_the_users_grad_scaler_is_bit_exact() -> None:
    net, data, loss_fn, factory = MODELS["mlp"](0)
    g = rc.trace_training_step(net, data[0], loss_fn, optimizer=factory,
                               precision="fp16-mixed", grad_scaler=_scaler())
    assert g.origin["grad_scaler"]["growth_interval"] == 2
    plan = first_fit_plan(g, random_order(g, 1))
    report = rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                             precision="fp16-mixed", grad_scaler=_scaler(),
                             accumulation_steps=1)
    assert report.max_abs_diff == 0.0


def test_a_grad_scaler_needs_fp16_mixed_and_an_enabled_scaler() -> None:
    net = torch.nn.Linear(4, 2)
    x = [torch.randn(3, 4)]
    with pytest.raises(TraceError, match="fp16-mixed"):
        rc.trace_training_step(net, x, lambda y: y.sum(), precision="bf16-mixed",
                               grad_scaler=_scaler())
    with pytest.raises(TraceError, match="disabled"):
        rc.trace_training_step(net, x, lambda y: y.float().sum(), precision="fp16-mixed",
                               grad_scaler=torch.amp.GradScaler("cpu", enabled=False))
