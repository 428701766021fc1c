"""Hold an exported checkpointing policy against the plan it came from.

:func:`check_checkpoint_plan` wraps the model with
:func:`~roam_core.runtime.checkpoint_policy.apply_checkpoint_plan`, traces the wrapped step
with roam's tracer (which records selective checkpointing as eager runs it: the ops torch
caches, the re-runs it does in the backward), takes the wrapped model off again, and
compares peaks:

* ``wrapped_planned_peak_bytes``: the wrapped step planned by roam without a budget -- what
  the policy gives when its ops are ordered as well as roam orders the budget plan's (the
  goal: within 5 % of ``budget_peak_bytes``);
* ``wrapped_eager_peak_bytes``: the wrapped step in the order it was traced, i.e. what
  eager PyTorch runs (torch re-runs a checkpointed call at once when its backward starts,
  roam's plan re-runs each op just in time);
* ``eager_peak_bytes``: the unwrapped step in eager order, for scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from roam_core.model.checkpoint_policy import CheckpointPolicyExport
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import step_flops
from roam_core.oracle.simulate import simulate
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from roam_core.runtime.checkpoint_policy import apply_checkpoint_plan
from roam_core.trace.optimizers import OptimizerFactory
from roam_core.trace.tracer import trace_fx

__all__ = ["CheckpointCheck", "check_checkpoint_plan"]


@dataclass(frozen=True, slots=True)
class CheckpointCheck:
    """Peaks of the exported policy beside the plan's (bytes, resident included).

    Parameters
    ----------
    export : CheckpointPolicyExport
        The policy that was applied.
    budget_peak_bytes : int
        The budget plan's planned peak.
    wrapped_planned_peak_bytes : int
        The wrapped model's traced step, planned by roam without a budget.
    wrapped_eager_peak_bytes : int
        The wrapped model's traced step in eager order.
    eager_peak_bytes : int
        The unwrapped step in eager order.
    plan_extra_flops : int
        FLOPs the plan's re-runs add.
    wrapped_extra_flops : int
        FLOPs the wrapped step adds to the unwrapped one (torch's re-runs, as traced).
    """

    export: CheckpointPolicyExport
    budget_peak_bytes: int
    wrapped_planned_peak_bytes: int
    wrapped_eager_peak_bytes: int
    eager_peak_bytes: int
    plan_extra_flops: int
    wrapped_extra_flops: int

    @property
    def ratio(self) -> float:
        """Wrapped planned peak / budget plan peak (the goal: at most 1.05)."""
        return self.wrapped_planned_peak_bytes / self.budget_peak_bytes


def check_checkpoint_plan(model: nn.Module, example_inputs: Sequence[Any],
                          loss_fn: Callable[[Any], torch.Tensor] | None,
                          optimizer: str | OptimizerFactory | None, plan: Plan, graph: Graph,
                          *, config: PlannerConfig | None = None, device: str = "cpu",
                          **trace_kwargs: Any) -> CheckpointCheck:
    """Apply ``plan`` as a checkpointing policy, trace and plan the wrapped step, compare.

    Parameters
    ----------
    model, example_inputs, loss_fn, optimizer
        The step ``graph`` was traced from (as for
        :func:`~roam_core.trace.tracer.trace_training_step`); the model is left unwrapped.
    plan : Plan
        A budget plan for ``graph``.
    graph : Graph
        Its graph.
    config : PlannerConfig, optional
        Settings of the plan of the wrapped step (its budget is ignored); default
        ``PlannerConfig()``.
    device : str
        Where the fake tensors of the trace live: the device ``graph`` was traced on.
    **trace_kwargs
        Passed to the tracer (``setting=...``), as when ``graph`` was traced.

    Returns
    -------
    CheckpointCheck
    """
    applied = apply_checkpoint_plan(model, plan, graph)
    try:
        wrapped = trace_fx(model, example_inputs, loss_fn, optimizer, device=device,
                           **trace_kwargs).graph
    finally:
        applied.remove()
    cfg = replace(config or PlannerConfig(), budget_bytes=None)
    planned = make_plan(wrapped, cfg)
    return CheckpointCheck(
        export=applied.export, budget_peak_bytes=plan.planned_peak_bytes,
        wrapped_planned_peak_bytes=planned.planned_peak_bytes,
        wrapped_eager_peak_bytes=simulate(wrapped).peak_bytes,
        eager_peak_bytes=simulate(graph).peak_bytes, plan_extra_flops=plan.extra_flops,
        wrapped_extra_flops=step_flops(wrapped) - step_flops(graph))
