"""Helpers of the training tests: a fast test planner, the eager loop PlannedStep must
equal, and snapshots to show that a refused call changed nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order


def fast_planner(seed: int = 0) -> Callable[[Graph], Plan]:
    """A planner for tests: a random valid order and a byte-reusing first-fit layout."""
    calls: list[str] = []

    def plan(graph: Graph) -> Plan:
        calls.append(graph.fingerprint())
        return first_fit_plan(graph, random_order(graph, seed=seed + len(calls)))

    plan.roam_cache_key = f"test-first-fit-{seed}"  # type: ignore[attr-defined]
    plan.calls = calls  # type: ignore[attr-defined]
    return plan


class EagerLoop:
    """The eager loop a PlannedStep with the same settings equals (one call per
    micro-batch)::

        loss = loss_fn(model(*batch)); (loss / k).backward()
        every k-th call: clip_grad_norm_(model.parameters(), max_norm); opt.step();
                         opt.zero_grad(set_to_none=True)
    """

    def __init__(self, model: nn.Module, factory: Callable[[list[Any]], Any],
                 loss_fn: Callable[[Any], torch.Tensor] | None = None, *,
                 max_grad_norm: float | None = None, accumulation_steps: int = 1) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.opt = factory(list(dict.fromkeys(model.parameters())))
        self.max_grad_norm, self.k = max_grad_norm, accumulation_steps
        self.micro = 0
        self.last_grad_norm: torch.Tensor | None = None

    def __call__(self, *batch: Any) -> torch.Tensor:
        out = self.model(*batch)
        loss = out if self.loss_fn is None else self.loss_fn(out)
        (loss / self.k if self.k > 1 else loss).backward()
        self.micro = (self.micro + 1) % self.k
        if self.micro == 0:
            if self.max_grad_norm is not None:
                self.last_grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.max_grad_norm)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return loss.detach()


def assert_same_training(eager: nn.Module, planned: nn.Module,
                         eager_opt: torch.optim.Optimizer | None = None,
                         planned_opt: torch.optim.Optimizer | None = None) -> None:
    """Parameters, buffers and optimizer state bit-equal."""
    se, sp = eager.state_dict(), planned.state_dict()
    assert se.keys() == sp.keys()
    for k in se:
        assert torch.equal(se[k], sp[k]), f"{k} differs"
    if eager_opt is not None and planned_opt is not None:
        oe, op = eager_opt.state_dict()["state"], planned_opt.state_dict()["state"]
        assert oe.keys() <= op.keys()
        for i in op.keys() - oe.keys():  # eager creates state at its first step, the
            assert all(not torch.as_tensor(v).any() for v in op[i].values())  # step: zeros
        for i in oe:
            for k in oe[i]:
                assert torch.equal(torch.as_tensor(oe[i][k]), torch.as_tensor(op[i][k])), \
                    f"optimizer state {i}:{k} differs"


def snapshot(model: nn.Module, opt: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Everything a refused call must leave as it was."""
    return {"params": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "opt": copy.deepcopy(opt.state_dict()) if opt is not None else None}


def unchanged(model: nn.Module, opt: torch.optim.Optimizer | None,
              snap: dict[str, Any]) -> bool:
    now = model.state_dict()
    if any(not torch.equal(now[k], v) for k, v in snap["params"].items()):
        return False
    if opt is None:
        return True
    state = opt.state_dict()["state"]
    return all(torch.equal(torch.as_tensor(state[i][k]), torch.as_tensor(v))
               for i, st in snap["opt"]["state"].items() for k, v in st.items())


def batches(example: Sequence[Any], n: int, seed: int, high: int) -> list[list[Any]]:
    """``n`` random batches shaped like ``example`` (integer tensors below ``high``)."""
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(x.shape, generator=gen, dtype=x.dtype) if x.dtype.is_floating_point
             else torch.randint(0, high, tuple(x.shape), generator=gen, dtype=x.dtype)
             for x in example] for _ in range(n)]
