"""Execute a plan for real: one-arena replay, numerics against eager, measured peaks.

``execute_plan`` re-traces the model (fake tensors, no memory), checks that the graph is
the one the plan was made for, then runs the training step twice from identical values
and seeds:

1. **eager**: the ordinary ``loss = loss_fn(model(*x)); loss.backward(); opt.step();
   opt.zero_grad()``;
2. **planned**: the traced step's ops replayed in the plan's order, every tensor at its
   planned offset in one preallocated arena (:class:`~roam_core.runtime.arena_runner.ArenaRunner`).

The loss, the updated parameters, buffers and optimizer state must agree: bit-equal on
CPU, within ``rtol=1e-5`` on CUDA (deterministic algorithms on).  On CUDA the peaks of both
variants are measured in fresh processes (:mod:`roam_core.runtime.measure`).

Graphs are device-specific: a step traced on CPU records CPU kernels
(``_scaled_dot_product_flash_attention_for_cpu``) and ``device=cpu`` factory arguments.
``execute_plan(device="cuda")`` therefore re-traces on the GPU itself (fake CUDA tensors);
if the CUDA graph's fingerprint differs from the plan's (different attention kernel, say),
the plan is refused with :class:`~roam_core.base.errors.PlanFormatError`: make the plan on the
GPU machine from the CUDA graph (``roam trace --device cuda`` then ``roam plan``, as
``scripts/gpu_check.sh`` does), or use device-neutral models (math attention).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.checks import require_type
from roam_core.base.errors import ExecutorError, PlanFormatError
from roam_core.model.plan import Plan
from roam_core.runtime.arena_runner import ArenaRunner, RunStats
from roam_core.runtime.device import resolve_device
from roam_core.runtime.measure import (
    Peaks,
    Recipe,
    measure_eager,
    measure_planned,
    measure_subprocess,
    pickled_recipe,
)
from roam_core.runtime.plan_checks import check_fingerprint, replayed_step
from roam_core.runtime.report import ExecutionReport
from roam_core.runtime.step import (
    Comparison,
    compare,
    created_state_ids,
    eager_step,
    eager_values,
    planned_values,
    prepare_state,
    run_planned_step,
)

if TYPE_CHECKING:
    from roam_core.trace.optimizers import OptimizerFactory
    from roam_core.trace.traced_step import TracedStep

__all__ = ["TOLERANCE", "execute_plan", "execute_traced"]

_logger = logging.getLogger(__name__)

_MEASURE = ("auto", "subprocess", "in-process")

#: Tolerances of the eager comparison: bit-equal on CPU; CUDA kernels may differ slightly.
TOLERANCE = {"cpu": (0.0, 0.0), "cuda": (1e-5, 1e-6)}

LossFn = Callable[[Any], torch.Tensor]


def execute_plan(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    plan: Plan,
    *,
    loss_fn: LossFn | None = None,
    optimizer: str | OptimizerFactory | None = None,
    setting: str = "steady",
    device: str = "cpu",
    steps: int = 1,
    check_addresses: bool = True,
    seed: int = 0,
    strict: bool = True,
    measure: str = "auto",
    recipe: Recipe | None = None,
    precision: str = "fp32",
    max_grad_norm: float | None = None,
    accumulation_steps: int = 1,
    micro_batches: Sequence[Sequence[Any]] | None = None,
    accumulate_plan: Plan | None = None,
    grad_scaler: Any = None,
    **optimizer_kwargs: Any,
) -> ExecutionReport:
    """Run ``plan`` for ``model``'s training step in one arena and compare with eager.

    Parameters
    ----------
    model : nn.Module
        The model (real or meta parameters; meta ones get a seeded init).  Never modified.
    example_inputs : sequence
        Positional inputs, as given to the tracer.
    plan : Plan
        A plan for the graph of exactly this step (fingerprint checked).
    loss_fn, optimizer, setting, **optimizer_kwargs
        As for :func:`roam_core.trace.trace_training_step`; must match the traced graph.
    device : {"cpu", "cuda"}
        Where to run.  On CUDA the step is re-traced on the device (see the module notes).
    steps : int
        Measured steps after the first (numerics) step; step time is their mean.
    check_addresses : bool
        Verify every produced tensor's address after every op.
    seed : int
        Seed for both runs (random ops draw the same numbers: the plan keeps their order).
    strict : bool
        Raise :class:`ExecutorError` when the planned step disagrees with eager.
    measure : {"auto", "subprocess", "in-process"}
        CUDA peak measurement: ``auto`` uses fresh processes when the recipe pickles.
    recipe : callable, optional
        Zero-argument picklable callable rebuilding ``(model, example_inputs, loss_fn,
        optimizer, setting, optimizer_kwargs, precision)`` in a child process (the CLI
        passes the zoo builder); default: pickle the arguments.
    precision : {"fp32", "bf16-mixed", "bf16", "fp16-mixed"}
        The step's precision, as traced (:mod:`roam_core.trace.precision`); the eager
        reference runs the same (autocast, cast model and inputs, grad scaler).
    max_grad_norm : float, optional
        The step clips the gradients' total norm to this value before the update, as
        ``clip_grad_norm_(model.parameters(), max_grad_norm)`` (with a grad scaler after
        ``scaler.unscale_(optimizer)``); the plan must be for the graph traced so.
        Peaks are then measured in this process.
    accumulation_steps : int
        Micro-batches per optimizer step (:mod:`roam_core.runtime.accumulated_execution`):
        ``plan`` is for the k-th micro-batch's graph (``trace_training_step(...,
        accumulation_steps=k)``); one optimizer step of ``k`` micro-batches runs through
        :class:`~roam_core.runtime.PlannedStep` against the eager loop (``loss / k``
        backpropagated, clip and update once).  Peaks are then measured in this process.
    micro_batches : sequence of input lists, optional
        With accumulation: the ``k`` micro-batches (default: ``example_inputs`` ``k`` times).
    accumulate_plan : Plan, optional
        With accumulation: a plan for the first ``k - 1`` micro-batches' graph
        (``accumulate_only=True``); default: planned here with the default planner.
    grad_scaler : torch.amp.GradScaler, optional
        ``fp16-mixed``: both runs use fresh scalers with its settings (it is not changed).

    Returns
    -------
    ExecutionReport

    Raises
    ------
    PlanFormatError
        The plan was made for another graph.
    PlanInvalidError
        The plan's order breaks a dependency of the graph.
    ExecutorError
        No CUDA device, a tensor off its planned address, overlapping slots, or (``strict``)
        results that differ from eager.
    """
    from roam_core.trace.precision import scaler_settings
    from roam_core.trace.step_spec import StepSpec
    from roam_core.trace.tracer import trace_fx

    require_type(model, torch.nn.Module, "execute_plan: model")
    require_type(plan, Plan, "execute_plan: plan", PlanFormatError)
    dev = resolve_device(device)
    if measure not in _MEASURE:
        raise ExecutorError(f"measure={measure!r}: choose one of {', '.join(_MEASURE)}")
    traced = trace_fx(model, example_inputs, loss_fn, optimizer, setting=setting, device=dev,
                      precision=precision,
                      spec=StepSpec(max_grad_norm, accumulation_steps,
                                    grad_scaler=scaler_settings(grad_scaler, precision)),
                      **optimizer_kwargs)
    if accumulation_steps == 1 and (micro_batches is not None or accumulate_plan is not None):
        raise ExecutorError("micro_batches and accumulate_plan go with accumulation_steps > 1")
    if max_grad_norm is not None or accumulation_steps > 1 or grad_scaler is not None:
        # a recipe rebuilds the plain step: measured here, or refused if asked
        if measure == "subprocess":
            raise ExecutorError("a clipping, accumulating or own-scaler step is measured "
                                "in this process: use measure='in-process' or 'auto'")
        measure = "in-process"
    if measure == "auto" or (measure == "subprocess" and recipe is None):
        if dev.type == "cuda" and recipe is None:
            recipe = pickled_recipe(model, example_inputs, loss_fn, optimizer, setting,
                                    optimizer_kwargs, precision)
        measure = "subprocess" if recipe is not None else "in-process"
    return execute_traced(traced, model, example_inputs, plan, loss_fn=loss_fn,
                          optimizer=optimizer, device=dev, steps=steps,
                          check_addresses=check_addresses, seed=seed, strict=strict,
                          measure=measure, recipe=recipe, optimizer_kwargs=optimizer_kwargs,
                          micro_batches=micro_batches, accumulate_plan=accumulate_plan)


def execute_traced(
    traced: TracedStep,
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    plan: Plan,
    *,
    loss_fn: LossFn | None = None,
    optimizer: str | OptimizerFactory | None = None,
    device: str | torch.device = "cpu",
    steps: int = 1,
    check_addresses: bool = True,
    seed: int = 0,
    strict: bool = True,
    measure: str = "in-process",
    recipe: Recipe | None = None,
    optimizer_kwargs: Mapping[str, Any] | None = None,
    snapshot_dir: str | os.PathLike[str] | None = None,
    micro_batches: Sequence[Sequence[Any]] | None = None,
    accumulate_plan: Plan | None = None,
) -> ExecutionReport:
    """:func:`execute_plan` for an already traced step (``roam_core.trace.trace_fx``).

    ``snapshot_dir`` (CUDA only): write ``eager.pickle`` and ``planned.pickle`` memory
    snapshots (one extra recorded step each) there, for https://pytorch.org/memory_viz or
    :func:`roam_core.formats.snapshot.load_snapshot`.  A step traced with gradient
    accumulation runs one optimizer step of its micro-batches
    (:mod:`roam_core.runtime.accumulated_execution`; ``micro_batches``,
    ``accumulate_plan``).
    """
    dev = resolve_device(device)
    if measure not in _MEASURE[1:]:
        raise ExecutorError(f"measure={measure!r}: choose subprocess or in-process")
    if measure == "subprocess" and dev.type == "cuda" and recipe is None:
        raise ExecutorError("measuring in fresh processes needs a picklable recipe")
    if measure == "subprocess" and (traced.spec.max_grad_norm is not None
                                    or traced.spec.accumulates
                                    or traced.spec.grad_scaler is not None):
        raise ExecutorError("a clipping, accumulating or own-scaler step is measured in "
                            "this process: use measure='in-process'")
    if not traced.spec.updates:
        raise ExecutorError("the step only accumulates (the first k - 1 micro-batches): "
                            "execute the update micro-batch's plan and pass this one as "
                            "accumulate_plan")
    check_fingerprint(traced.graph, plan)
    if traced.spec.accumulates:
        with _deterministic(dev):
            return _execute_accumulated(traced, model, example_inputs, plan, loss_fn,
                                        optimizer, dev, steps, check_addresses, seed, strict,
                                        optimizer_kwargs, micro_batches, accumulate_plan)
    traced = replayed_step(traced, plan)
    with _deterministic(dev):
        return _execute_checked(traced, model, example_inputs, plan, loss_fn, optimizer, dev,
                                steps, check_addresses, seed, strict, measure, recipe,
                                optimizer_kwargs, snapshot_dir)


@contextlib.contextmanager
def _deterministic(dev: torch.device) -> Iterator[None]:
    """Deterministic kernels for the comparison; the caller's setting is restored.

    On CPU too: ``index_put(accumulate=True)`` (the backward of advanced indexing, e.g. MoE
    expert gathers) sums floats in parallel with atomics unless deterministic algorithms are
    on, so two eager runs would not even agree with each other.
    """
    was, warn_only = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _execute_checked(traced: TracedStep, model: torch.nn.Module,
                     example_inputs: Sequence[Any], plan: Plan, loss_fn: LossFn | None,
                     optimizer: str | OptimizerFactory | None, dev: torch.device, steps: int,
                     check_addresses: bool, seed: int, strict: bool, measure: str,
                     recipe: Recipe | None, optimizer_kwargs: Mapping[str, Any] | None,
                     snapshot_dir: str | os.PathLike[str] | None) -> ExecutionReport:
    from roam_core.trace.optimizers import make_optimizer_factory

    _, factory = make_optimizer_factory(optimizer, traced.setting, **(optimizer_kwargs or {}))
    in_process = measure == "in-process" or dev.type != "cuda"
    notes: list[str] = []
    snaps: dict[str, str | None] = {"eager": None, "planned": None}
    if snapshot_dir is not None and dev.type == "cuda":
        os.makedirs(snapshot_dir, exist_ok=True)
        snaps = {k: os.path.join(snapshot_dir, f"{k}.pickle") for k in snaps}
    names, keep = _value_names(traced, notes)
    rtol, atol = TOLERANCE[dev.type]

    # 1. eager, 2. planned: a numerics step each (+ in-process measurement)
    loss_e, ref, eager = _eager_reference(traced, model, example_inputs, factory, loss_fn,
                                          dev, seed, names, keep,
                                          steps if in_process else None, snaps["eager"])
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    loss_p, cmp, stats, planned = _planned_replay(
        traced, model, example_inputs, plan, factory, dev, seed, check_addresses, keep, ref,
        (rtol, atol), steps if in_process else None, snaps["planned"])
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    # 3. numerics
    if not cmp.ok:
        msg = (f"planned step differs from eager: max |diff| {cmp.max_abs_diff:.3g} at "
               f"{cmp.worst} (tolerance rtol={rtol}, atol={atol})")
        if strict:
            raise ExecutorError(msg)
        notes.append(msg)

    # 4. CUDA peaks in fresh processes
    how = "none"
    if dev.type == "cuda":
        if in_process:
            how = "in-process"
            notes.append("peaks measured in this process (the model or loss does not pickle)")
        else:
            assert recipe is not None, "subprocess measurement needs a recipe"
            eager = measure_subprocess(recipe, plan, "eager", device=str(dev), steps=steps,
                                       seed=seed, check_addresses=check_addresses,
                                       snapshot_path=snaps["eager"])
            planned = measure_subprocess(recipe, plan, "planned", device=str(dev), steps=steps,
                                         seed=seed, check_addresses=check_addresses,
                                         snapshot_path=snaps["planned"])
            how = "subprocess"
    else:
        notes.append("CPU run: CUDA allocator peaks are not measured (null)")
    assert eager is not None
    assert planned is not None
    return _report(dev, plan, cmp, float(loss_e), float(loss_p), eager, planned, stats, steps,
                   how, notes)


def _eager_reference(traced: TracedStep, model: torch.nn.Module, example_inputs: Sequence[Any],
                     factory: OptimizerFactory, loss_fn: LossFn | None, dev: torch.device,
                     seed: int, names: list[str], keep: list[bool], measured_steps: int | None,
                     snapshot_path: str | None,
                     ) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]], Peaks | None]:
    """The eager numerics step: its loss, CPU copies of the compared values and, with
    ``measured_steps``, the peaks of that many more steps (in this process).

    The eager model and optimizer are freed on return, before the planned replay builds its
    own.
    """
    st = prepare_state(traced, model, example_inputs, factory, dev, seed=seed)
    loss = eager_step(st, loss_fn, seed)
    values = eager_values(st, len(keep) - len(traced.placeholders))
    ref = [("loss", _host(loss))] + [
        (n, _host(v)) for n, v, k in zip(names, values, keep) if k]
    del values
    peaks = (measure_eager(st, loss_fn, measured_steps, seed, snapshot_path)
             if measured_steps is not None else None)
    return loss, ref, peaks


def _planned_replay(traced: TracedStep, model: torch.nn.Module, example_inputs: Sequence[Any],
                    plan: Plan, factory: OptimizerFactory, dev: torch.device, seed: int,
                    check_addresses: bool, keep: list[bool],
                    ref: list[tuple[str, torch.Tensor]], tolerance: tuple[float, float],
                    measured_steps: int | None, snapshot_path: str | None,
                    ) -> tuple[torch.Tensor, Comparison, RunStats, Peaks | None]:
    """The planned numerics step compared with ``ref``, its replay statistics and, with
    ``measured_steps``, the peaks of that many more replays (in this process)."""
    runner = ArenaRunner(traced.gm, traced.graph, traced.values, plan.offsets,
                         plan.arena_bytes, dev, check_addresses=check_addresses,
                         rng=traced.rng, amp=traced.amp)
    st = prepare_state(traced, model, example_inputs, factory, dev, seed=seed)
    loss, _ = run_planned_step(runner, traced, plan.order, seed, load=st)
    del st
    # compare against the live slots (on the device) before anything overwrites them
    got = [loss] + [v for v, k in zip(planned_values(runner, traced), keep) if k]
    rtol, atol = tolerance
    cmp = compare(ref, got, rtol=rtol, atol=atol)
    del got
    stats = runner.stats()
    peaks = (measure_planned(runner, traced, plan.order, measured_steps, seed, snapshot_path)
             if measured_steps is not None else None)
    return loss, cmp, stats, peaks


def _execute_accumulated(traced: TracedStep, model: torch.nn.Module,
                         example_inputs: Sequence[Any], plan: Plan, loss_fn: LossFn | None,
                         optimizer: str | OptimizerFactory | None, dev: torch.device,
                         steps: int, check_addresses: bool, seed: int, strict: bool,
                         optimizer_kwargs: Mapping[str, Any] | None,
                         micro_batches: Sequence[Sequence[Any]] | None,
                         accumulate_plan: Plan | None) -> ExecutionReport:
    from roam_core.runtime.accumulated_execution import execute_accumulated
    from roam_core.trace.optimizers import make_optimizer_factory

    _, factory = make_optimizer_factory(optimizer, traced.setting, **(optimizer_kwargs or {}))
    run = execute_accumulated(traced, model, example_inputs, plan, loss_fn=loss_fn,
                              factory=factory, dev=dev, seed=seed, steps=steps,
                              check_addresses=check_addresses, micro_batches=micro_batches,
                              accumulate_plan=accumulate_plan)
    notes = list(run.notes)
    rtol, atol = TOLERANCE[dev.type]
    if not run.cmp.ok:
        msg = (f"planned accumulation step differs from eager: max |diff| "
               f"{run.cmp.max_abs_diff:.3g} at {run.cmp.worst} (tolerance rtol={rtol}, "
               f"atol={atol})")
        if strict:
            raise ExecutorError(msg)
        notes.append(msg)
    how = "in-process" if dev.type == "cuda" else "none"
    if dev.type != "cuda":
        notes.append("CPU run: CUDA allocator peaks are not measured (null)")
    report = _report(dev, plan, run.cmp, *run.losses, run.eager, run.planned, run.stats,
                     steps, how, notes)
    return dataclasses.replace(report, arena_bytes=run.arena_bytes)


def _host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy (one copy whatever the device; the slot or parameter is reused later)."""
    return t.detach().to("cpu", copy=True)


def _value_names(traced: TracedStep, notes: list[str]) -> tuple[list[str], list[bool]]:
    """Names of the compared values and whether each is compared.

    Optimizer state created in the step is compared only when it is a graph output: other
    storages end their lifetime at their last use, and the plan may reuse their bytes.
    """
    names = [f"{r.name} ({r.node})" for r in traced.placeholders]
    keep = [True] * len(names)
    outputs = set(traced.graph.outputs)
    skipped = []
    for tid in created_state_ids(traced):
        names.append(f"optimizer state created in the step ({tid})")
        keep.append(tid in outputs)
        if tid not in outputs:
            skipped.append(tid)
    if skipped:
        notes.append(f"{len(skipped)} optimizer-state storages created in the step are not graph "
                     "outputs (the plan may reuse their bytes after their last use): not "
                     "compared")
    return names, keep


def _report(dev: torch.device, plan: Plan, cmp: Comparison, loss_e: float, loss_p: float,
            eager: Peaks, planned: Peaks, stats: RunStats, steps: int, how: str,
            notes: list[str]) -> ExecutionReport:
    extra = stats.extra_bytes
    if planned.peak_allocated_bytes is not None:
        extra = max(0, planned.peak_allocated_bytes - int(plan.arena_bytes))
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return ExecutionReport(
        device=dev.type, arena_bytes=int(plan.arena_bytes), max_abs_diff=cmp.max_abs_diff,
        numerics_ok=cmp.ok, worst_value=cmp.worst, loss_eager=loss_e, loss_planned=loss_p,
        eager_peak_allocated_bytes=eager.peak_allocated_bytes,
        eager_peak_reserved_bytes=eager.peak_reserved_bytes,
        planned_peak_allocated_bytes=planned.peak_allocated_bytes,
        planned_peak_reserved_bytes=planned.peak_reserved_bytes,
        extra_bytes=extra, extra_bytes_counted=stats.extra_bytes,
        out_variant_ops=stats.out_variant_ops, factory_ops=stats.factory_ops,
        fallback_ops=stats.fallback_ops, fallback_targets=stats.fallback_targets,
        checked_values=stats.checked_values,
        seconds_per_step_eager=eager.seconds_per_step,
        seconds_per_step_planned=planned.seconds_per_step, steps=steps,
        planned_peak_bytes=int(plan.planned_peak_bytes), measurement=how, device_name=name,
        torch_version=torch.__version__, notes=tuple(notes))
