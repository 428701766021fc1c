"""Every precision mode replays bit-exactly against eager on CPU (execute_plan, PlannedStep).

The plans use a random valid order and a first-fit layout built without the planner, so the
equality is the replay's, not the planner's.  ``fp16-mixed`` also covers the grad scaler's
skipped step: a batch whose gradients overflow in fp16 leaves the parameters and the
optimizer's step count unchanged and halves the scale, in eager and planned alike.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roam_core as rc
from roam_core.runtime import PlannedStep
from roam_core.trace.precision import PRECISIONS, StepPrecision, resolve_precision
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order


class NormNet(nn.Module):
    """Linear -> GELU -> LayerNorm -> Conv1d -> BatchNorm -> GroupNorm -> Linear: under
    autocast every normalisation gets a reduced-precision input and fp32 weights."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln = nn.Linear(8, 16), nn.LayerNorm(16)
        self.conv, self.bn, self.gn = nn.Conv1d(3, 3, 3, padding=1), nn.BatchNorm1d(3), \
            nn.GroupNorm(1, 3)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.ln(F.gelu(self.fc1(x)))
        h = self.gn(self.bn(self.conv(h.view(-1, 3, 16))))
        return F.cross_entropy(self.fc2(h.view(-1, 16)), y)


def _tiered(fast: str) -> list:
    """Every precision; all but ``fast`` in the slow tier (each replay takes seconds)."""
    return [pytest.param(p, marks=() if p == fast else pytest.mark.slow) for p in PRECISIONS]


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)


def _plan(model: nn.Module, inputs: list, precision: str, seed: int = 1) -> rc.Plan:
    g = rc.trace_training_step(model, inputs, optimizer="adamw", precision=precision)
    return first_fit_plan(g, random_order(g, seed))


@pytest.mark.parametrize("precision", _tiered("bf16-mixed"))
def test_execute_plan_is_bit_exact_in_every_precision(precision: str) -> None:
    torch.manual_seed(0)
    model, (x, y) = NormNet(), _data()
    plan = _plan(model, [x, y], precision)
    report = rc.execute_plan(model, [x, y], plan, optimizer="adamw", precision=precision)
    assert report.numerics_ok
    assert report.max_abs_diff == 0.0


def _eager_loop(model: nn.Module, batches: list,
                precision: str) -> tuple[list, list, StepPrecision]:
    """An ordinary loop in ``precision``: returns the losses and whether each step updated."""
    prec = resolve_precision(precision)
    prec.cast_module(model)
    opt = torch.optim.AdamW(model.parameters(), foreach=False, fused=False)
    mixed = StepPrecision(prec, torch.device("cpu"))
    losses, stepped = [], []
    for x, y in batches:
        with mixed.autocast():
            loss = model(prec.cast(x), y)
        mixed.backward(loss)
        stepped.append(mixed.eager_step(opt))
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return losses, stepped, mixed


@pytest.mark.parametrize("precision", _tiered("fp16-mixed"))
def test_planned_step_trains_like_eager_in_every_precision(precision: str) -> None:
    torch.manual_seed(0)
    model, example = NormNet(), list(_data())
    batches = [_data(s) for s in range(3)]
    if precision == "fp16-mixed":  # overflows in fp16: the scaler skips that update
        batches[1] = (batches[1][0] * 1e5, batches[1][1])
    eager = copy.deepcopy(model)
    plan = _plan(model, example, precision)
    step = PlannedStep(model, plan, optimizer="adamw", example_inputs=example,
                       precision=precision)
    planned, skipped = [], []
    for x, y in batches:
        planned.append(step(x, y))
        skipped.append(step.skipped)
    losses, stepped, mixed = _eager_loop(eager, batches, precision)
    assert [not s for s in skipped] == stepped
    for a, b in zip(losses, planned, strict=True):  # bit-equal; NaN where eager has NaN
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values(),
                            strict=True):  # the overflowing batch leaves NaN running stats
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=name)
    if precision == "fp16-mixed":
        assert stepped == [True, False, True]
        assert step.scaler.get_scale() == mixed.scaler.get_scale() == 2.0 ** 15
        steps = {float(s["step"]) for s in step.optimizer.state_dict()["state"].values()}
        assert steps == {2.0}  # the skipped step does not count
    else:
        assert step.scaler is None
        assert not any(skipped)
    if precision == "bf16":
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.slow
def test_recomputation_recasts_bf16_weight_copies_and_replays_bit_exactly() -> None:
    """Under a budget the planner drops bf16 weight copies (a re-cast is cheap) and fp32
    islands, and the plan replays bit-exactly."""
    from roam_core.oracle.precision_bytes import weight_copies
    from roam_core.runtime import execute_traced
    from roam_core.zoo import build_zoo_step, trace_zoo

    ts = trace_zoo("tiny_gpt", 4, 32, precision="bf16-mixed")
    g = ts.graph
    casts = {g.tensors[t].producer for t in weight_copies(g)}
    base = rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2))
    plan = rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2,
                                            budget_bytes=int(base.arena_bytes * 0.75)))
    assert plan.arena_bytes < base.arena_bytes
    assert any(r.source in casts for r in plan.recompute)
    step = build_zoo_step("tiny_gpt", 4, 32, device="meta")
    report = execute_traced(ts, step.model, step.example_inputs, plan, loss_fn=step.loss_fn,
                            optimizer=step.optimizer_factory)
    assert report.max_abs_diff == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16"])
def test_planned_step_with_clipping_and_accumulation_in_reduced_precision(
        precision: str) -> None:
    """Precision and the loop's clipping and accumulation together: bit-equal to eager."""
    from roam_core.runtime.compare_training import eager_call

    torch.manual_seed(0)
    model, example = NormNet(), list(_data())
    eager = copy.deepcopy(model)
    step = PlannedStep(model, None, optimizer="adamw", example_inputs=example,
                       precision=precision, max_grad_norm=0.5, accumulation_steps=2,
                       plan_cache=False)
    resolve_precision(precision).cast_module(eager)
    opt = torch.optim.AdamW(eager.parameters(), foreach=False, fused=False)
    mixed = StepPrecision(precision, torch.device("cpu"))
    for i, (x, y) in enumerate(_data(s) for s in range(4)):
        planned = step(x, y)
        loss = eager_call(eager, opt, None, [x, y], call=i, accumulation_steps=2,
                          max_grad_norm=0.5, mixed=mixed)
        torch.testing.assert_close(loss, planned, rtol=0, atol=0)
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
