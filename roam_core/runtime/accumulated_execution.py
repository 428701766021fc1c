"""``execute_plan`` with gradient accumulation: one optimizer step of ``k`` micro-batches.

A step traced with ``accumulation_steps=k`` is the k-th micro-batch (its backward adds into
resident accumulators, then the clip and the update run on the sums); the first ``k - 1``
micro-batches are another graph that only accumulates (:mod:`roam_core.trace.step_spec`).
:func:`execute_accumulated` runs one whole optimizer step both ways from identical values and
seeds, through the machinery that already runs such loops, not a second copy of it:

1. **eager**: :func:`~roam_core.runtime.compare_training.eager_call` ``k`` times: the loss
   of each micro-batch scaled by ``1/k`` and backpropagated (autograd sums into ``p.grad``),
   then once ``scaler.unscale_`` (fp16-mixed), ``clip_grad_norm_`` on the sums (if
   ``max_grad_norm``), ``opt.step()`` (``scaler.step``/``update``) and ``zero_grad``;
2. **planned**: a :class:`~roam_core.runtime.planned_step.PlannedStep` with
   ``accumulation_steps=k`` called on the same ``k`` micro-batches: the given plan runs the
   update micro-batch; the accumulate micro-batch runs ``accumulate_plan`` if one is given,
   else a plan the step makes for it with the default planner (said in the report's notes).

Compared: every micro-batch's loss, the parameters and buffers after the update, the
optimizer state and, with a grad scaler, its scale and growth tracker: bit-equal on CPU.
Both variants start from a fresh optimizer (what a training loop's first step sees) and the
model's values (meta ones: the seeded init of :func:`roam_core.runtime.step.prepare_state`).
On CUDA the peaks are measured in this process, each loop from a clean allocator.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ExecutorError, PlanFormatError
from roam_core.runtime.compare_training import eager_call
from roam_core.runtime.measure import Peaks
from roam_core.runtime.planned_step import PlannedStep
from roam_core.runtime.step import Comparison, compare, materialize, real_input
from roam_core.trace.params import unique_named_parameters
from roam_core.trace.precision import StepPrecision, new_grad_scaler, resolve_precision

if TYPE_CHECKING:
    from roam_core.model.plan import Plan
    from roam_core.runtime.arena_runner import RunStats
    from roam_core.trace.optimizers import OptimizerFactory
    from roam_core.trace.traced_step import TracedStep

__all__ = ["AccumulatedRun", "execute_accumulated", "micro_batches_of"]

LossFn = Callable[[Any], torch.Tensor]


class AccumulatedRun:
    """What :func:`execute_accumulated` found (plain attributes, read by the report)."""

    def __init__(self, cmp: Comparison, losses: tuple[float, float], eager: Peaks,
                 planned: Peaks, stats: RunStats, arena_bytes: int,
                 notes: list[str]) -> None:
        self.cmp, self.losses, self.eager, self.planned = cmp, losses, eager, planned
        self.stats, self.arena_bytes, self.notes = stats, arena_bytes, notes


def micro_batches_of(traced: TracedStep, example_inputs: Sequence[Any], dev: torch.device,
                     seed: int, given: Sequence[Sequence[Any]] | None) -> list[list[Any]]:
    """The ``k`` micro-batches on ``dev``: ``given``, else ``example_inputs`` ``k`` times
    (meta tensors drawn per micro-batch from ``seed + 1 + i``: ``randn`` floats, zero ids).

    Raises
    ------
    ExecutorError
        ``given`` does not hold ``k`` micro-batches shaped like ``example_inputs``.
    """
    k = traced.spec.accumulation_steps
    if given is None:
        return [[real_input(x, dev, torch.Generator().manual_seed(seed + 1 + i))
                 for x in example_inputs] for i in range(k)]
    batches = [list(b) for b in given]
    if len(batches) != k:
        raise ExecutorError(f"micro_batches: {len(batches)} given for accumulation_steps={k}")
    for i, b in enumerate(batches):
        shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in b]
        want = [tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in example_inputs]
        if shapes != want:
            raise ExecutorError(f"micro_batches[{i}] is shaped {shapes}, the traced step "
                                f"{want}: every micro-batch has the example's shapes")
    return [[x.detach().to(dev) if isinstance(x, torch.Tensor) else x for x in b]
            for b in batches]


def execute_accumulated(traced: TracedStep, model: torch.nn.Module,
                        example_inputs: Sequence[Any], plan: Plan, *,
                        loss_fn: LossFn | None, factory: OptimizerFactory,
                        dev: torch.device, seed: int, steps: int, check_addresses: bool,
                        micro_batches: Sequence[Sequence[Any]] | None,
                        accumulate_plan: Plan | None) -> AccumulatedRun:
    """One optimizer step of ``k`` micro-batches, eager and planned (see the module notes).

    ``steps`` more rounds of each are timed after the compared one (``seconds_per_step``:
    one optimizer step, all its micro-batches).

    Raises
    ------
    ExecutorError
        A ``roam``-setting step (the optimizer state created in the step: accumulation
        repeats the ``steady`` step), or micro-batches unlike the example.
    """
    if traced.setting != "steady":
        raise ExecutorError("gradient accumulation runs the steady step (optimizer state "
                            "resident): trace it with setting='steady'")
    k = traced.spec.accumulation_steps
    batches = micro_batches_of(traced, example_inputs, dev, seed, micro_batches)
    notes: list[str] = [f"one optimizer step of {k} accumulated micro-batches"]
    ref, losses_e, eager = _eager_loop(traced, model, batches, factory, loss_fn, dev, seed,
                                       steps)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    plans = [plan] if accumulate_plan is None else [plan, accumulate_plan]
    got, losses_p, planned, step = _planned_loop(traced, model, batches, plans, factory,
                                                 loss_fn, dev, seed, steps, check_addresses,
                                                 notes)
    cmp = compare(ref, got, rtol=0.0, atol=0.0) if dev.type == "cpu" else compare(
        ref, got, rtol=1e-5, atol=1e-6)
    run = AccumulatedRun(cmp, (losses_e[-1], losses_p[-1]), eager, planned, step.stats(),
                         step.arena_bytes, notes)
    step.close()
    return run


def _values(model: torch.nn.Module, opt: torch.optim.Optimizer, mixed: StepPrecision,
            losses: list[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """The compared values, named: losses, parameters and buffers, optimizer state, scaler."""
    out = [(f"loss of micro-batch {i}", x.detach().cpu().clone()) for i, x in enumerate(losses)]
    out += [(n, t.detach().cpu().clone()) for n, t in model.state_dict(keep_vars=True).items()]
    for name, p in unique_named_parameters(model):
        for key, v in sorted(opt.state.get(p, {}).items()):
            if isinstance(v, torch.Tensor):
                out.append((f"optimizer state {key} of {name}", v.detach().cpu().clone()))
    for i, v in enumerate(mixed.state()):
        out.append((f"grad scaler state {i}", v.detach().cpu().clone()))
    return out


def _round(call: Callable[[int], torch.Tensor], k: int, seed: int,
           dev: torch.device) -> tuple[list[torch.Tensor], float]:
    """``k`` micro-batch calls, each after seeding the RNG alike; returns losses, seconds."""
    losses = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for i in range(k):
        torch.manual_seed(seed + 100 + i)
        losses.append(call(i))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return losses, time.perf_counter() - t0


def _scaler(traced: TracedStep, dev: torch.device) -> Any:
    """A fresh grad scaler with the traced step's settings (``None``: no scaler or torch's
    defaults, which the step makes itself)."""
    if not resolve_precision(traced.precision).grad_scaler or traced.spec.grad_scaler is None:
        return None
    return new_grad_scaler(dev, traced.spec.grad_scaler)


def _peaks(dev: torch.device, seconds: list[float]) -> Peaks:
    per_step = sum(seconds) / len(seconds)
    if dev.type != "cuda":
        return Peaks(None, None, per_step)
    return Peaks(int(torch.cuda.max_memory_allocated(dev)),
                 int(torch.cuda.max_memory_reserved(dev)), per_step)


def _reset(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)


def _eager_loop(traced: TracedStep, model: torch.nn.Module, batches: list[list[Any]],
                factory: OptimizerFactory, loss_fn: LossFn | None, dev: torch.device,
                seed: int, steps: int
                ) -> tuple[list[tuple[str, torch.Tensor]], list[float], Peaks]:
    precision = resolve_precision(traced.precision)
    _reset(dev)
    m = precision.cast_module(materialize(model, dev, seed))
    m.train()
    opt = factory([p for _, p in unique_named_parameters(m)])
    mixed = StepPrecision(precision, dev, scaler=_scaler(traced, dev))
    k, norm = traced.spec.accumulation_steps, traced.spec.max_grad_norm

    def call(i: int) -> torch.Tensor:
        return eager_call(m, opt, loss_fn, batches[i], call=i, accumulation_steps=k,
                          max_grad_norm=norm, mixed=mixed)

    losses, _ = _round(call, k, seed, dev)
    ref = _values(m, opt, mixed, losses)
    seconds = [_round(call, k, seed, dev)[1] for _ in range(steps)]
    peaks = _peaks(dev, seconds)
    return ref, [float(x) for x in losses], peaks


def _planned_loop(traced: TracedStep, model: torch.nn.Module, batches: list[list[Any]],
                  plans: list[Plan], factory: OptimizerFactory, loss_fn: LossFn | None,
                  dev: torch.device, seed: int, steps: int, check_addresses: bool,
                  notes: list[str]) -> tuple[list[torch.Tensor], list[float], Peaks,
                                             PlannedStep]:
    _reset(dev)
    m = materialize(model, dev, seed)
    k = traced.spec.accumulation_steps
    step = PlannedStep(m, plans, loss_fn, factory, example_inputs=batches[0], device=dev,
                       max_grad_norm=traced.spec.max_grad_norm, accumulation_steps=k,
                       precision=traced.precision, plan_cache=False, verify=check_addresses,
                       grad_scaler=_scaler(traced, dev))
    losses, _ = _round(lambda i: step(*batches[i]), k, seed, dev)
    if len(plans) > 1 and any(v.how != "given" for v in step.variants.values()):
        step.close()
        # a given accumulate plan that matched no micro-batch would run unused: refuse
        raise PlanFormatError("accumulate_plan was made for another graph than the first "
                              f"{k - 1} micro-batch(es) of this step: trace that step with "
                              "accumulate_only=True (roam trace --accumulate-only) and plan it")
    if any(v.how != "given" for v in step.variants.values()):
        notes.append("the accumulate micro-batch (the first k - 1) ran a plan made here "
                     "with the default planner (pass accumulate_plan= to give one)")
    assert step.optimizer is not None
    got = [v for _, v in _values(m, step.optimizer, step.mixed, losses)]
    seconds = [_round(lambda i: step(*batches[i]), k, seed, dev)[1] for _ in range(steps)]
    return got, [float(x) for x in losses], _peaks(dev, seconds), step
