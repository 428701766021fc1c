"""The five things people do every day that once gave results different from eager without a
word (issue "never silently different").  Each now either equals the eager loop bit for bit
on CPU or raises a StepMismatchError naming what changed, before anything changed.

* ``clip_grad_norm_(model.parameters(), 1.0)`` after a step clipped nothing: it raises now,
  and ``max_grad_norm=`` clips inside the plan;
* ``with torch.autocast(...)`` on a plan traced without it ran in fp32: it raises;
* ``layer.requires_grad_(False)`` after set-up kept updating the layer: it raises;
* ``model.eval()`` for validation, forgetting ``model.train()``, trained in the traced mode:
  it raises;
* two PlannedSteps on one model (a smaller last batch) trained with stale AdamW moments: one
  step plans both shapes with one optimizer; alternating two steps raises.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roam_core.runtime import GradientsNotKeptError, PlannedStep, StepMismatchError
from roam_core.trace import make_optimizer_factory
from tests.roam_core.runtime.train_helpers import (
    EagerLoop,
    assert_same_training,
    batches,
    fast_planner,
    snapshot,
    unchanged,
)


class DropNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(12, 16), nn.Dropout(0.3), nn.Linear(16, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc2(self.drop(torch.relu(self.fc1(x)))), y)


EXAMPLE = [torch.zeros(6, 12), torch.zeros(6, dtype=torch.long)]


def _pair(**kw):
    torch.manual_seed(0)
    model = DropNet()
    eager = copy.deepcopy(model)
    step = PlannedStep(model, None, optimizer="adamw", example_inputs=EXAMPLE,
                       planner=fast_planner(), plan_cache=False, **kw)
    loop = EagerLoop(eager, make_optimizer_factory("adamw")[1], **kw)
    return model, step, eager, loop


def _train(step, loop, data, seed=100):
    for i, b in enumerate(data):
        torch.manual_seed(seed + i)
        le = loop(*b)
        torch.manual_seed(seed + i)
        assert torch.equal(step(*b), le), f"loss {i} differs"


def _refused(step, model, batch, match):
    snap = snapshot(model, step.optimizer)
    calls = step.calls
    with pytest.raises(StepMismatchError, match=match):
        step(*batch)
    assert unchanged(model, step.optimizer, snap)
    assert step.calls == calls


# ------------------------------------------------------------------ row 1: clipping
def test_clipping_by_hand_after_a_planned_step_raises() -> None:
    model, step, _, _ = _pair()
    step(*batches(EXAMPLE, 1, 0, 5)[0])
    with pytest.raises(GradientsNotKeptError, match=r"'fc1.weight'.*max_grad_norm="):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with pytest.raises(GradientsNotKeptError):  # a second optimizer step by hand, too
        step.optimizer.step()
    model.zero_grad()  # clears the markers; the next call puts them back
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    step(*batches(EXAMPLE, 1, 1, 5)[0])
    assert type(model.fc1.weight.grad).__name__ == "AbsentGrad"


@pytest.mark.slow
def test_max_grad_norm_clips_inside_the_plan_like_eager() -> None:
    model, step, eager, loop = _pair(max_grad_norm=0.05)
    _train(step, loop, batches(EXAMPLE, 4, 1, 5))
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert torch.equal(step.last_grad_norm, loop.last_grad_norm)
    assert float(loop.last_grad_norm) > 0.05  # the clip really scaled the gradients
    norms = [n.target for n in step.traced.gm.graph.nodes
             if "linalg_vector_norm" in str(n.target)]
    assert len(norms) == 5  # one per gradient and the total: the clip is in the graph


# ------------------------------------------------------------------ row 2: autocast
def test_autocast_on_a_plan_traced_without_it_raises() -> None:
    model, step, _, _ = _pair()
    data = batches(EXAMPLE, 2, 2, 5)
    step(*data[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _refused(step, model, data[1], r"autocast\('cpu', dtype=torch.bfloat16\) but was planned "
                                             "under no autocast")


@pytest.mark.slow
def test_a_step_built_under_autocast_runs_under_it_like_eager() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    eager = copy.deepcopy(model)
    example = [torch.zeros(6, 12)]
    loss_fn = lambda out: out.float().square().mean()  # noqa: E731
    with torch.autocast("cpu", dtype=torch.bfloat16):
        step = PlannedStep(model, None, loss_fn, "adamw", example_inputs=example,
                           planner=fast_planner(), plan_cache=False)
    loop = EagerLoop(eager, make_optimizer_factory("adamw")[1], loss_fn)
    for b in batches(example, 3, 3, 5):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(step(*b), loop(*b))
    assert_same_training(eager, model, loop.opt, step.optimizer)
    _refused(step, model, example, r"runs under no autocast but was planned under "
                                   r"torch.autocast\('cpu', dtype=torch.bfloat16\)")


# ------------------------------------------------------------------ row 3: frozen layers
def test_freezing_a_layer_after_set_up_raises() -> None:
    model, step, _, _ = _pair()
    data = batches(EXAMPLE, 2, 4, 5)
    step(*data[0])
    model.fc1.requires_grad_(False)
    _refused(step, model, data[1], r"parameter 'fc1.weight' has requires_grad=False")
    model.fc1.requires_grad_(True)
    step(*data[1])


def test_layers_frozen_before_set_up_train_like_eager() -> None:
    torch.manual_seed(0)
    model = DropNet()
    model.fc1.requires_grad_(False)
    eager = copy.deepcopy(model)
    step = PlannedStep(model, None, optimizer="adamw", example_inputs=EXAMPLE,
                       planner=fast_planner(), plan_cache=False)
    loop = EagerLoop(eager, make_optimizer_factory("adamw")[1])
    frozen = model.fc1.weight.detach().clone()
    _train(step, loop, batches(EXAMPLE, 3, 5, 5))
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert torch.equal(model.fc1.weight, frozen)
    assert model.fc1.weight.grad is None  # frozen: no gradient marker either


# ------------------------------------------------------------------ row 4: eval mode
def test_forgetting_model_train_after_validation_raises() -> None:
    model, step, _, _ = _pair()
    data = batches(EXAMPLE, 3, 6, 5)
    step(*data[0])
    model.eval()
    with torch.no_grad():
        model(*data[1])  # validation, eagerly, on the arena's parameters
    _refused(step, model, data[2], r"module 'drop' \(Dropout\) is in eval mode.*model.train\(\)")
    model.train()
    step(*data[2])


def test_changing_a_dropout_probability_raises() -> None:
    model, step, _, _ = _pair()
    step(*EXAMPLE)
    model.drop.p = 0.5
    _refused(step, model, EXAMPLE, r"module 'drop' \(Dropout\) changed.*p 0.3 -> 0.5")


# ------------------------------------------------------------------ row 5: two shapes
@pytest.mark.slow
def test_one_step_trains_two_shapes_with_one_optimizer_like_eager() -> None:
    model, step, eager, loop = _pair()
    full = batches(EXAMPLE, 2, 7, 5)
    last = batches([torch.zeros(3, 12), torch.zeros(3, dtype=torch.long)], 2, 8, 5)
    epoch = [full[0], full[1], last[0]]
    with pytest.warns(UserWarning, match=r"new batch \(3, 12\) float32, \(3,\) int64"):
        _train(step, loop, epoch, seed=10)
    _train(step, loop, epoch, seed=20)  # next epoch: no new plan
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert len(step.variants) == 2
    assert float(next(iter(step.optimizer.state.values()))["step"]) == 6


def test_alternating_two_planned_steps_on_one_model_raises() -> None:
    torch.manual_seed(0)
    model = DropNet()
    small = [torch.zeros(3, 12), torch.zeros(3, dtype=torch.long)]
    a = PlannedStep(model, None, optimizer="adamw", example_inputs=EXAMPLE,
                    planner=fast_planner(), plan_cache=False)
    b = PlannedStep(model, None, optimizer="adamw", example_inputs=small,
                    planner=fast_planner(), plan_cache=False)
    a(*EXAMPLE)
    b(*small)  # b never ran before: it starts its own optimizer (a fresh one, as asked)
    _refused(a, model, EXAMPLE, "trained by another PlannedStep")


# ------------------------------------------------------------------ the rest of the context
def test_replacing_a_layer_or_the_optimizer_groups_raises() -> None:
    model, step, _, _ = _pair()
    step(*EXAMPLE)
    old = model.fc2
    model.fc2 = nn.Linear(16, 5)
    _refused(step, model, EXAMPLE, r"submodule 'fc2' of the model was replaced")
    model.fc2 = old
    extra = nn.Parameter(torch.zeros(3))
    step.optimizer.add_param_group({"params": [extra]})
    _refused(step, model, EXAMPLE, r"2 param groups but the step was planned with 1")


def test_close_takes_the_gradient_markers_off() -> None:
    model, step, _, _ = _pair()
    step(*EXAMPLE)
    step.close()
    assert all(p.grad is None for p in model.parameters())
