"""Real tensors for a traced step: model copy, optimizer, eager step, planned step, comparison.

The traced step's placeholders are, in order, the model's deduplicated parameters, its
buffers, the resident optimizer state (``steady`` setting: per parameter, the tensor entries
of ``opt.state[p]`` in insertion order), the grad scaler's ``scale`` and ``growth_tracker``
(``fp16-mixed``) and the tensor example inputs (see :func:`roam_core.trace.trace_fx`).
:func:`prepare_state` builds the same list from a real model on the device, in the traced
step's precision (:mod:`roam_core.trace.precision`), running the same warm optimizer step as
the tracer, so that the eager step and the planned replay start from identical values.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from roam_core.base.errors import ExecutorError
from roam_core.model.graph import OpId, TensorId, TensorKind
from roam_core.runtime.arena_runner import ArenaRunner
from roam_core.trace.params import (
    retie,
    tie_groups,
    unique_named_buffers,
    unique_named_parameters,
)
from roam_core.trace.precision import StepPrecision, new_grad_scaler, resolve_precision

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = [
    "Comparison",
    "StepState",
    "compare",
    "created_state_ids",
    "eager_step",
    "eager_values",
    "load_arena",
    "materialize",
    "planned_values",
    "prepare_state",
    "real_input",
    "run_planned_step",
]

_logger = logging.getLogger(__name__)


@dataclass
class StepState:
    """A real model, its optimizer and the flat placeholder tensors of the traced step."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: list[Any]
    flat: list[torch.Tensor]  # placeholder order
    names: list[str]  # placeholder node names
    mixed: StepPrecision | None = None  # autocast and grad scaler (None: fp32)
    max_grad_norm: float | None = None  # the traced step clips the gradients to this norm


def materialize(model: nn.Module, device: torch.device, seed: int) -> nn.Module:
    """A copy of ``model`` on ``device``; meta parameters get a seeded ``N(0, 0.02)`` init.

    Tied and shared tensors stay tied: ``to_empty`` replaces parameters module by module,
    which unties them, so the tie groups are recorded first and restored after
    (:func:`roam_core.trace.params.retie`).  Parameters that were not on the meta device
    keep their values.
    """
    metas = [t for t in list(model.parameters()) + list(model.buffers()) if t.is_meta]
    if not metas:
        return copy.deepcopy(model).to(device)
    groups = tie_groups(model)
    real = {n: t for n, t in unique_named_parameters(model) + unique_named_buffers(model)
            if not t.is_meta}
    m = retie(copy.deepcopy(model).to_empty(device=device), groups)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, t in unique_named_parameters(m) + unique_named_buffers(m):
            if name in real:
                t.copy_(real[name])
            elif t.dtype.is_floating_point:
                if name.endswith(("running_var", "weight")) and t.dim() == 1:
                    t.fill_(1.0)  # norm scales and running variances
                elif t.dim() <= 1:
                    t.zero_()  # biases, running means
                else:
                    t.normal_(0.0, 0.02, generator=gen)
            else:
                t.zero_()
    return m


def real_input(x: Any, device: torch.device, gen: torch.Generator) -> Any:
    """``x`` on ``device``: a copy of a real tensor, a meta one drawn from ``gen`` (``randn``
    floats, zero ids and labels); anything else as is."""
    if not isinstance(x, torch.Tensor):
        return x
    if not x.is_meta:
        return x.detach().to(device).clone()
    if x.dtype.is_floating_point:
        return torch.randn(x.shape, generator=gen, dtype=x.dtype).to(device)
    return torch.zeros(x.shape, dtype=x.dtype, device=device)  # valid token ids / labels


def prepare_state(traced: TracedStep, model: nn.Module, example_inputs: Sequence[Any],
                  factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
                  device: str | torch.device, *, seed: int = 0) -> StepState:
    """Real model, optimizer (after the tracer's warm step) and placeholder tensors.

    Parameters
    ----------
    traced : roam_core.trace.TracedStep
        The traced step (for the placeholder list and the setting).
    model : nn.Module
        The model (real or meta parameters); it is copied, never modified.
    example_inputs : sequence
        The model's positional inputs (meta tensors get seeded random/zero values).
    factory : callable
        ``params -> Optimizer``, the same factory the tracer used.
    device : str or torch.device
        Where to put everything.
    seed : int
        Seed for meta-parameter init and meta inputs.
    """
    dev = torch.device(device)
    precision = resolve_precision(traced.precision)
    m = precision.cast_module(materialize(model, dev, seed))
    m.train()
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    inputs = [precision.cast(real_input(x, dev, gen)) for x in example_inputs]
    params = [p for _, p in unique_named_parameters(m)]
    buffers = [b for _, b in unique_named_buffers(m)]
    opt = factory(params)
    if traced.setting == "steady":
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        opt.step()
        opt.zero_grad(set_to_none=True)
    state = [v for p in params for v in opt.state.get(p, {}).values()
             if isinstance(v, torch.Tensor)]
    mixed = StepPrecision(precision, dev, scaler=(
        new_grad_scaler(dev, traced.spec.grad_scaler) if precision.grad_scaler else None))
    flat = (params + buffers + state + mixed.state()
            + [x for x in inputs if isinstance(x, torch.Tensor)])
    names = [r.node for r in traced.placeholders]
    if len(flat) != len(names):
        raise ExecutorError(
            f"the model has {len(flat)} parameters/buffers/state/inputs but the traced step "
            f"has {len(names)} inputs: the plan was made for another model or settings")
    return StepState(m, opt, inputs, flat, names, mixed, traced.spec.max_grad_norm)


def eager_step(st: StepState, loss_fn: Callable[[Any], torch.Tensor] | None,
               seed: int) -> torch.Tensor:
    """One ordinary PyTorch training step (seeded) in the state's precision: autocast
    around the forward and the loss, and with a grad scaler ``scaler.scale(loss).backward()``,
    ``scaler.step(optimizer)``, ``scaler.update()``; with ``st.max_grad_norm`` the gradients
    are clipped before the step (unscaled first: ``scaler.unscale_(optimizer)``); returns the
    detached loss."""
    mixed = st.mixed if st.mixed is not None else StepPrecision("fp32", torch.device("cpu"))
    torch.manual_seed(seed)
    with mixed.autocast():
        out = st.model(*st.inputs)
        loss = out if loss_fn is None else loss_fn(out)
    mixed.backward(loss)
    if st.max_grad_norm is not None:
        mixed.unscale(st.optimizer)
        torch.nn.utils.clip_grad_norm_(st.model.parameters(), st.max_grad_norm)
    mixed.eager_step(st.optimizer)
    st.optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def created_state_ids(traced: TracedStep) -> list[TensorId]:
    """Optimizer-state storages created inside the step (``roam`` setting), in creation
    order (which is the optimizer's parameter order and state insertion order)."""
    g = traced.graph
    pos = {op: i for i, op in enumerate(g.op_ids)}
    made = [t for t in g.tensors.values()
            if t.kind == TensorKind.OPTIMIZER_STATE and t.producer is not None]
    return [t.id for t in sorted(made, key=lambda t: pos[t.producer])]  # type: ignore[index]  # made


def eager_values(st: StepState, n_created: int) -> list[torch.Tensor]:
    """Parameters, buffers, state and inputs after the step (placeholder order), then the
    optimizer state created during the step (``n_created`` tensors, creation order)."""
    params = [p for _, p in unique_named_parameters(st.model)]
    state = [v for p in params for v in st.optimizer.state.get(p, {}).values()
             if isinstance(v, torch.Tensor)]
    resident = {id(t) for t in st.flat}
    created = [v for v in state if id(v) not in resident]
    if len(created) != n_created:
        raise ExecutorError(f"eager optimizer created {len(created)} state tensors, the "
                            f"traced step {n_created}")
    return [t.detach() for t in st.flat] + [t.detach() for t in created]


def run_planned_step(runner: ArenaRunner, traced: TracedStep, order: Sequence[OpId],
                     seed: int, *, load: StepState | None) -> tuple[torch.Tensor, float]:
    """Run the plan once (loading the resident values first when ``load`` is given).

    Returns the loss and the wall time of the step (device synchronised).
    """
    if load is not None:
        load_arena(runner, load)
    torch.manual_seed(seed)
    _sync(runner.device)
    t0 = time.perf_counter()
    out = runner.run(order)
    _sync(runner.device)
    dt = time.perf_counter() - t0
    loss = out[0] if isinstance(out, (list, tuple)) else out
    return loss.detach().clone(), dt  # the slot is reused by the next step


def load_arena(runner: ArenaRunner, st: StepState) -> None:
    """Copy every placeholder's real value into its arena slot."""
    for name, real in zip(st.names, st.flat, strict=True):
        runner.load_resident(name, real.detach())


def planned_values(runner: ArenaRunner, traced: TracedStep) -> list[torch.Tensor]:
    """The slots of every placeholder, then of the optimizer state created in the step."""
    out = [runner.read(r.node) for r in traced.placeholders]
    out.extend(runner.read_storage(t, traced.values) for t in created_state_ids(traced))
    return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """Eager versus planned values."""

    max_abs_diff: float
    ok: bool
    worst: str


def compare(named_eager: Sequence[tuple[str, torch.Tensor]],
            planned: Sequence[torch.Tensor], *, rtol: float, atol: float) -> Comparison:
    """Compare value by value; NaNs at the same places count as equal.

    With ``rtol == atol == 0`` the values must be bit-equal.  Each eager value is moved to
    the device of its planned counterpart and compared there (fast on a GPU).
    """
    if len(named_eager) != len(planned):
        return Comparison(float("inf"), False,
                          f"{len(named_eager)} eager values vs {len(planned)} planned")
    worst, worst_name, ok = 0.0, "", True
    for (name, a), b in zip(named_eager, planned, strict=True):
        b = b.detach()
        a = a.detach().to(b.device)
        if a.shape != b.shape:
            return Comparison(float("inf"), False, f"{name}: shape {a.shape} vs {b.shape}")
        if torch.equal(a, b):  # bit-equal: the common case, and fast on big models
            continue
        if not a.dtype.is_floating_point or a.dtype in (torch.float16, torch.bfloat16):
            a, b = a.double(), b.double()
        both_nan = torch.isnan(a) & torch.isnan(b)
        diff = torch.where(both_nan, torch.zeros_like(a), (a - b).abs())
        diff = torch.nan_to_num(diff, nan=float("inf"))
        d = float(diff.max()) if diff.numel() else 0.0
        if d > worst:
            worst, worst_name = d, name
        if diff.numel() and bool((diff > atol + rtol * b.abs()).any()):
            ok = False
    return Comparison(worst, ok, worst_name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
