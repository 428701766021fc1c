"""A Hugging Face causal LM (GPT-2 from a tiny config, dropout on, offline) trained 20 steps
with PlannedStep in the loops people write: accumulation, a shape change, clipping, frozen
layers, autocast; bit-equal with the eager loop on CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from roam_core.runtime import NewShapeWarning, PlannedStep
from roam_core.trace import make_optimizer_factory
from tests.roam_core.runtime.train_helpers import EagerLoop, assert_same_training, fast_planner

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow


class CausalLM(nn.Module):
    """``loss = lm(input_ids=ids, labels=ids).loss`` around a tiny GPT-2."""

    def __init__(self, n_layer: int = 2) -> None:
        super().__init__()
        cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=32, n_head=2, vocab_size=64,
                                      n_positions=32)  # dropout 0.1 everywhere (HF default)
        self.lm = transformers.GPT2LMHeadModel(cfg).train()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, labels=ids).loss


def _ids(batch: int, seq: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 64, (batch, seq), generator=gen)


def _run(step: PlannedStep, loop: EagerLoop, data: list[torch.Tensor], *, seed: int = 0,
         autocast: bool = False) -> None:
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else _Null
    for i, ids in enumerate(data):
        torch.manual_seed(seed + i)
        with ctx():
            le = loop(ids)
        torch.manual_seed(seed + i)
        with ctx():
            lp = step(ids)
        assert torch.equal(lp, le), f"step {i}: eager {le.item()} planned {lp.item()}"


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_hf_causal_lm_accumulation_shapes_clipping_frozen_20_steps() -> None:
    torch.manual_seed(0)
    model = CausalLM()
    model.lm.transformer.wpe.requires_grad_(False)  # frozen layers, before set-up
    model.lm.transformer.h[0].requires_grad_(False)
    eager = copy.deepcopy(model)
    factory = make_optimizer_factory("adamw", lr=1e-3)[1]
    kw = {"max_grad_norm": 0.5, "accumulation_steps": 2}
    gen = torch.Generator().manual_seed(1)
    data = [_ids(2, 12, gen) if i % 5 else _ids(1, 8, gen) for i in range(40)]
    step = PlannedStep(model, None, optimizer=factory, example_inputs=[data[1]],
                       planner=fast_planner(), plan_cache=False, **kw)
    loop = EagerLoop(eager, factory, **kw)
    frozen = model.lm.transformer.h[0].attn.c_attn.weight.detach().clone()
    with pytest.warns(NewShapeWarning, match=r"\(1, 8\) int64"):
        _run(step, loop, data)
    assert_same_training(eager, model, loop.opt, step.optimizer)
    assert torch.equal(step.last_grad_norm, loop.last_grad_norm)
    assert torch.equal(model.lm.transformer.h[0].attn.c_attn.weight, frozen)
    assert float(next(iter(step.optimizer.state.values()))["step"]) == 20
    assert len(step.variants) == 4  # two shapes, each accumulating and updating
    # the tied LM head stays tied: one slot
    assert model.lm.lm_head.weight is model.lm.transformer.wte.weight


def test_hf_causal_lm_under_bf16_autocast_20_steps() -> None:
    torch.manual_seed(0)
    model = CausalLM(n_layer=1)
    eager = copy.deepcopy(model)
    factory = make_optimizer_factory("adamw", lr=1e-3)[1]
    gen = torch.Generator().manual_seed(2)
    data = [_ids(2, 8, gen) for _ in range(20)]
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the step is traced under autocast
        step = PlannedStep(model, None, optimizer=factory, example_inputs=[data[0]],
                           planner=fast_planner(), plan_cache=False, max_grad_norm=1.0)
    loop = EagerLoop(eager, factory, max_grad_norm=1.0)
    _run(step, loop, data, autocast=True)
    assert_same_training(eager, model, loop.opt, step.optimizer)
