"""``fp16-mixed`` in the loops people write: a grad scaler with gradient clipping and with
gradient accumulation, bit-equal with the eager loop on CPU::

    for micro in range(k):
        scaler.scale(loss_fn(model(*batch[micro])) / k).backward()
    scaler.unscale_(opt)                                  # once, after the last backward
    clip_grad_norm_(model.parameters(), max_grad_norm)    # on the unscaled sums
    scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)

including steps whose gradients overflow (the update is skipped and the scale backs off), on
a GPT-2-like zoo model and a non-transformer (an MLP with batch and layer norms), through
``PlannedStep`` and ``execute_plan``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roam_core as rc
from roam_core.runtime import PlannedStep
from roam_core.runtime.compare_training import eager_call
from roam_core.trace import make_optimizer_factory, trace_fx
from roam_core.trace.precision import StepPrecision
from roam_core.trace.step_spec import StepSpec
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order
from tests.roam_core.runtime.train_helpers import fast_planner

#: A scale at which every fp16 gradient overflows (the default is 2 ** 16).
_HUGE_SCALE = 2.0 ** 100


class NormMLP(nn.Module):
    """Linear -> BatchNorm -> GELU -> LayerNorm -> Linear -> cross entropy."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.bn = nn.Linear(8, 16), nn.BatchNorm1d(16)
        self.ln, self.fc2 = nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc2(self.ln(F.gelu(self.bn(self.fc1(x))))), y)


def _mlp(seed: int) -> tuple[nn.Module, list[list[Any]], Callable | None, Callable]:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data = [[torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)]
            for _ in range(8)]
    return NormMLP(), data, None, make_optimizer_factory("adamw")[1]


def _tiny_gpt(seed: int) -> tuple[nn.Module, list[list[Any]], Callable | None, Callable]:
    from roam_core.zoo import build_zoo_step

    zs = build_zoo_step("tiny_gpt", 2, 16, device="cpu", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    vocab = max(m.num_embeddings for m in zs.model.modules() if isinstance(m, nn.Embedding))
    data = [[torch.randint(0, vocab, tuple(x.shape), generator=gen)
             for x in zs.example_inputs] for _ in range(8)]
    return zs.model, data, zs.loss_fn, zs.optimizer_factory


MODELS = {"mlp": _mlp, "tiny_gpt": _tiny_gpt}


def _train(name: str, *, max_grad_norm: float | None, k: int, calls: int,
           overflow_at: Sequence[int] = ()) -> list[bool]:
    """Train planned and eager side by side; before each call in ``overflow_at`` both
    scales are set to :data:`_HUGE_SCALE`, so that update overflows and is skipped."""
    model, data, loss_fn, factory = MODELS[name](0)
    eager = copy.deepcopy(model)
    step = PlannedStep(model, None, loss_fn=loss_fn, optimizer=factory,
                       example_inputs=data[0], precision="fp16-mixed",
                       max_grad_norm=max_grad_norm, accumulation_steps=k,
                       planner=fast_planner(), plan_cache=False)
    opt = factory(list(eager.parameters()))
    mixed = StepPrecision("fp16-mixed", torch.device("cpu"))
    planned_skips, eager_skips = [], []
    for i in range(calls):
        batch = data[i % len(data)]
        if i in overflow_at:
            step.scaler._scale.fill_(_HUGE_SCALE)
            mixed.scaler._scale.fill_(_HUGE_SCALE)
        before = _step_count(opt)
        torch.manual_seed(100 + i)
        le = eager_call(eager, opt, loss_fn, batch, call=i, accumulation_steps=k,
                        max_grad_norm=max_grad_norm, mixed=mixed)
        torch.manual_seed(100 + i)
        lp = step(*batch)
        torch.testing.assert_close(lp, le, rtol=0, atol=0, equal_nan=True, msg=f"loss {i}")
        if i % k == k - 1:  # an update call
            planned_skips.append(step.skipped)
            eager_skips.append(_step_count(opt) == before)
            assert step.scaler.get_scale() == mixed.scaler.get_scale(), f"scale after {i}"
            assert (step.last_grad_norm is not None) == (max_grad_norm is not None)
    assert planned_skips == eager_skips
    for (n, a), b in zip(eager.state_dict().items(), model.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True, msg=n)
    # the planned optimizer's state exists from the start (zeros, step 0), eager's from the
    # first update that ran
    planned_state = step.optimizer.state_dict()["state"]
    for i, a in opt.state_dict()["state"].items():
        for key in a:
            torch.testing.assert_close(planned_state[i][key], a[key], rtol=0, atol=0, msg=key)
    return planned_skips


def _step_count(opt: torch.optim.Optimizer) -> float:
    return max((float(s["step"]) for s in opt.state.values() if "step" in s), default=0.0)


#: (max_grad_norm, accumulation_steps, calls, calls before which the scale overflows)
CASES = {
    "clip": (0.5, 1, 3, (1,)),
    "accumulate-2": (None, 2, 4, ()),
    "accumulate-3": (None, 3, 6, (3,)),
    "clip-accumulate-2": (0.5, 2, 6, (2,)),
    "clip-accumulate-3": (0.5, 3, 6, ()),
}


def _params() -> list[Any]:
    """Every case on both models (slow tier: each trains for seconds)."""
    return [pytest.param(m, c, id=f"{m}-{c}", marks=pytest.mark.slow)
            for m in MODELS for c in CASES]


@pytest.mark.parametrize(("model", "case"), _params())
def test_planned_step_fp16_with_clipping_and_accumulation_trains_like_eager(
        model: str, case: str) -> None:
    norm, k, calls, overflow_at = CASES[case]
    skips = _train(model, max_grad_norm=norm, k=k, calls=calls, overflow_at=overflow_at)
    for i in overflow_at:  # the update of that call's accumulation round is skipped
        assert skips[i // k], skips
    if not overflow_at:
        assert not all(skips), skips  # some updates ran


@pytest.mark.slow
@pytest.mark.parametrize(("model", "overflow"), [("mlp", False), ("mlp", True),
                                                 ("tiny_gpt", False)])
def test_execute_plan_fp16_with_clipping_is_bit_exact(model: str, overflow: bool) -> None:
    """One clipped step (unscale, clip, gated update, scale update) against eager: with
    ``overflow`` the inputs overflow fp16 so the update is skipped and the scale halves;
    parameters, AdamW state and the scaler's scale and growth tracker all compare."""
    net, data, loss_fn, factory = MODELS[model](0)
    inputs = data[0]
    if overflow:  # fc1's fp16 output overflows (the GPT's overflow: through PlannedStep)
        inputs = [inputs[0] * 1e5, inputs[1]]
        mixed, probe = StepPrecision("fp16-mixed", torch.device("cpu")), copy.deepcopy(net)
        with mixed.autocast():
            loss = probe(*inputs)
        mixed.backward(loss)
        mixed.unscale(factory(list(probe.parameters())))
        assert mixed.found_inf()  # so the compared step is a skipped one
    g = rc.trace_training_step(net, inputs, loss_fn, optimizer=factory,
                               precision="fp16-mixed", max_grad_norm=0.5)
    plan = first_fit_plan(g, random_order(g, 1))
    report = rc.execute_plan(net, inputs, plan, loss_fn=loss_fn, optimizer=factory,
                             precision="fp16-mixed", max_grad_norm=0.5)
    assert report.numerics_ok
    assert report.max_abs_diff == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "tiny_gpt"])
def test_roam_train_fp16_mixed_with_clipping_and_accumulation(model: str, capsys) -> None:
    import json

    from roam_core.cli import main

    args = ["-t", "16"] if model == "tiny_gpt" else []
    assert main(["train", model, "-b", "2", *args, "--steps", "2", "--method", "eager",
                 "--precision", "fp16-mixed", "--max-grad-norm", "1.0",
                 "--accumulation-steps", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["precision"] == "fp16-mixed"
    assert r["max_abs_diff"] == 0.0
    assert r["losses_eager"] == r["losses_planned"]


def _fp16_trace(spec: StepSpec) -> Any:
    net, data, _, factory = _mlp(0)
    return trace_fx(net, data[0], None, factory, setting="steady", precision="fp16-mixed",
                    spec=spec)


def test_the_unscale_comes_before_the_clip_and_only_the_update_is_gated() -> None:
    traced = _fp16_trace(StepSpec(max_grad_norm=1.0, accumulation_steps=2))
    nodes = list(traced.gm.graph.nodes)
    unscale = [i for i, n in enumerate(nodes)
               if n.target is torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default]
    norms = [i for i, n in enumerate(nodes)  # clip_grad_norm_'s per-gradient norms
             if n.target is torch.ops.aten.linalg_vector_norm.default]
    assert len(unscale) == 1
    assert norms
    assert unscale[0] < min(norms)
    gated = {n.name for n in nodes if n.name in traced.amp.step_ops}
    assert gated
    assert not gated & {nodes[i].name for i in norms}
    # the micro-batch that only accumulates: no unscale, nothing gated
    acc = _fp16_trace(StepSpec(max_grad_norm=1.0, accumulation_steps=2, updates=False))
    assert acc.amp is None
    assert not any("_amp_foreach" in str(n.target) for n in acc.gm.graph.nodes)


def test_execute_plan_refuses_a_micro_batch_graph_that_only_accumulates() -> None:
    """The update micro-batch's graph runs a whole optimizer step
    (``test_execute_accumulation.py``); the accumulate-only graph alone does not."""
    from roam_core.base.errors import ExecutorError
    from roam_core.runtime import execute_traced

    net, data, _, factory = _mlp(0)
    traced = _fp16_trace(StepSpec(accumulation_steps=2, updates=False))
    plan = first_fit_plan(traced.graph, random_order(traced.graph, 1))
    with pytest.raises(ExecutorError, match="accumulate_plan"):
        execute_traced(traced, net, data[0], plan, optimizer=factory)


def test_execute_plan_refuses_to_measure_a_clipping_step_in_a_subprocess() -> None:
    """A recipe rebuilds the step without the clip: an explicit ``measure="subprocess"`` is
    refused, not silently measured in this process."""
    from roam_core.base.errors import ExecutorError

    net, data, loss_fn, factory = _mlp(0)
    traced = _fp16_trace(StepSpec(max_grad_norm=1.0))
    plan = first_fit_plan(traced.graph, random_order(traced.graph, 1))
    with pytest.raises(ExecutorError, match="measure='in-process'"):
        rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                        precision="fp16-mixed", max_grad_norm=1.0, measure="subprocess")
