"""Train a zoo or Hugging Face model eagerly and with
:class:`~roam_core.runtime.planned_step.PlannedStep`.

:func:`compare_training` is what ``roam train`` and ``benchmarks/train_bench.py`` run:

1. build the zoo model (or the HF model from its config, ``hf_config=``) on the device with
   a seeded init, and a copy of it;
2. trace its ``steady`` step (fake tensors) and plan it, unless a plan is given;
3. draw ``steps`` synthetic batches from a fixed seed (images/vectors ``randn``, token ids
   and labels ``randint``);
4. train both from the identical weights on the same batches, with the same RNG seed
   before each step (dropout draws the same masks), in the same precision (the eager loop
   runs autocast, the cast model or the grad scaler as :mod:`roam_core.trace.precision`
   says).  On CPU the two loops are
   **interleaved** step by step, alternating which goes first, so that machine load hits
   both alike.  On CUDA they run one after the other, each measured from a clean allocator
   (``max_memory_allocated`` / ``max_memory_reserved`` of that loop alone);
5. report the largest difference over every step's loss and the final parameters and
   buffers, the median step times (first step excluded when there are more), the arena
   size and, on CUDA, the peaks.

The loops people write are options: ``max_grad_norm`` (clipping in the plan against
``clip_grad_norm_`` in the eager loop), ``accumulation_steps`` (k micro-batches per update:
``steps`` updates are ``steps * k`` calls; the eager loop backpropagates ``loss / k``) and
``other_batch_size`` (every third micro-batch has this batch size: the planned step plans
that shape on its first use).  Step times are then per call (micro-batch).
"""

from __future__ import annotations

import copy
import gc
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ExecutorError
from roam_core.runtime.device import resolve_device
from roam_core.runtime.planned_step import PlannedStep
from roam_core.trace.precision import StepPrecision, resolve_precision
from roam_core.trace.step_spec import StepSpec
from roam_core.trace.tracer import trace_fx
from roam_core.zoo.registry import ZOO
from roam_core.zoo.steps import ZooStep, build_zoo_step, zoo_origin

if TYPE_CHECKING:
    from roam_core.model.graph import Graph
    from roam_core.model.plan import Plan

__all__ = ["TRAIN_KEYS", "compare_training", "eager_call", "synthetic_batches"]

_logger = logging.getLogger(__name__)

#: Keys every ``roam train --json`` object has.
TRAIN_KEYS = ("steps", "device", "max_abs_diff", "eager_step_seconds", "planned_step_seconds",
              "arena_bytes", "eager_peak_reserved_bytes", "planned_peak_reserved_bytes")

#: Tolerance of the comparison: bit-equal on CPU.
TOLERANCE = {"cpu": 0.0, "cuda": 1e-4}


def synthetic_batches(name: str, setting: str, example: Sequence[Any], steps: int,
                      seed: int) -> list[list[Any]]:
    """``steps`` batches shaped like ``example`` from a fixed seed (valid ids and labels)."""
    spec = ZOO[name]
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        batch: list[Any] = []
        for x in example:
            if not isinstance(x, torch.Tensor):
                batch.append(x)
            elif x.dtype.is_floating_point:
                batch.append(torch.randn(tuple(x.shape), generator=gen, dtype=x.dtype))
            elif spec.family == "roberta" and setting == "roam":
                batch.append(x.detach().cpu().clone())  # the paper's fixed sentence
            else:
                token = spec.family in ("gpt", "roberta") and x.dim() == 2
                low = 3 if spec.family == "roberta" else 0
                high = spec.vocab_size if token else spec.num_classes
                batch.append(torch.randint(low, high, tuple(x.shape), generator=gen,
                                           dtype=x.dtype))
        out.append(batch)
    return out


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def eager_call(model: torch.nn.Module, opt: torch.optim.Optimizer,
               loss_fn: Callable[[Any], torch.Tensor] | None, batch: Sequence[Any], *,
               call: int = 0, accumulation_steps: int = 1,
               max_grad_norm: float | None = None,
               mixed: StepPrecision | None = None) -> torch.Tensor:
    """One call of the eager loop a :class:`PlannedStep` with these settings equals.

    ``(loss / k).backward()`` for every micro-batch; on the k-th (``call % k == k - 1``)
    ``clip_grad_norm_(model.parameters(), max_grad_norm)`` if set, ``opt.step()`` and
    ``opt.zero_grad(set_to_none=True)``.  With ``mixed`` (a precision other than fp32) the
    batch is cast, the forward and loss run under its autocast, and a grad scaler scales
    the backward, unscales the summed gradients before the clip (``scaler.unscale_(opt)``)
    and steps (``scaler.step(opt); scaler.update()``).  Returns the
    (undivided) loss.
    """
    k = accumulation_steps
    mixed = mixed or StepPrecision("fp32", torch.device("cpu"))
    batch = [mixed.precision.cast(x) for x in batch]
    with mixed.autocast():
        out = model(*batch)
        loss = out if loss_fn is None else loss_fn(out)
    mixed.backward(loss / k if k > 1 else loss)
    if call % k == k - 1:
        if max_grad_norm is not None:
            mixed.unscale(opt)  # a grad scaler's unscale_ comes before the clip
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        mixed.eager_step(opt)
        opt.zero_grad(set_to_none=True)
    return loss.detach()


def _median(xs: list[float]) -> float:
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def compare_training(
    model_name: str,
    batch_size: int,
    seq_len: int | None = None,
    *,
    setting: str = "steady",
    optimizer: str | None = None,
    steps: int = 5,
    device: str = "cpu",
    plan: Plan | None = None,
    method: str = "roam",
    planner_time_limit_s: float | None = 30.0,
    seed: int = 0,
    precision: str = "fp32",
    attention: str | None = None,
    hf_config: Any = None,
    hf_task: str = "causal-lm",
    hf_overrides: dict[str, Any] | None = None,
    max_grad_norm: float | None = None,
    accumulation_steps: int = 1,
    other_batch_size: int | None = None,
    merge_casts: bool = False,
) -> dict[str, Any]:
    """Train a model eagerly and planned for ``steps`` steps; returns a JSON-ready dict.

    Parameters
    ----------
    model_name, batch_size, seq_len, setting, optimizer
        The zoo configuration (:func:`roam_core.zoo.build_zoo_step`); the step is always
        traced in the ``steady`` setting (optimizer state resident), which is what a
        training loop repeats; ``setting="roam"`` picks the ROAM paper's loss and optimizer.
        ``model_name`` is ignored with ``hf_config``.
    precision, attention
        The step's precision and attention kernel (:mod:`roam_core.trace.precision`,
        :mod:`roam_core.trace.attention`).
    hf_config, hf_task, hf_overrides
        A Hugging Face model instead (:func:`roam_core.zoo.hf.build_hf_step`).
    steps : int
        Training steps of each variant.
    device : {"cpu", "cuda"}
        Where to train.
    plan : Plan, optional
        A plan for the steady graph of this configuration; default: plan it here.
    method, planner_time_limit_s
        Planning method and total budget when no plan is given.
    seed : int
        Seed of the model init, the batches and the per-step RNG.
    max_grad_norm, accumulation_steps, other_batch_size
        The loop's clipping, micro-batches per update and second batch size (module notes).
    merge_casts : bool
        Plan and run the step with autocast's repeated casts made once
        (:mod:`roam_core.trace.identical_casts`); the eager loop makes every cast, and the
        numerics are still compared bit for bit.

    Returns
    -------
    dict
        At least :data:`TRAIN_KEYS`; see ``roam train --help``.
    """
    if steps < 1:
        raise ExecutorError(f"steps must be at least 1, got {steps}")
    dev = resolve_device(device)
    t0 = time.perf_counter()
    calls = steps * accumulation_steps
    zs, origin, batches = _source(model_name, batch_size, seq_len, setting, optimizer, calls,
                                  seed, precision, attention, hf_config, hf_task,
                                  hf_overrides or {})
    model_name = origin["model"]
    tseq = origin["seq_len"]
    gname = (f"{'hf-' if hf_config is not None else ''}{model_name}-b{batch_size}"
             + (f"-t{tseq}" if tseq else "") + "-steady")
    loop = _Loop(max_grad_norm, accumulation_steps, _planner(method, planner_time_limit_s),
                 precision, merge_casts)
    traced = trace_fx(zs.model, zs.example_inputs, zs.loss_fn, zs.optimizer_factory,
                      setting="steady", name=gname, origin=origin, device=dev,
                      spec=StepSpec(max_grad_norm, accumulation_steps), precision=precision,
                      merge_casts=merge_casts)
    trace_s = time.perf_counter() - t0
    plan_s = 0.0
    if plan is None:
        t1 = time.perf_counter()
        plan = loop.planner(traced.graph)
        plan_s = time.perf_counter() - t1
    if other_batch_size:
        if hf_config is not None:
            raise ExecutorError("other_batch_size is for zoo models; a Hugging Face model "
                                "takes one batch size here")
        zo = build_zoo_step(model_name, other_batch_size, seq_len, setting, optimizer, "cpu",
                            seed=seed)
        others = synthetic_batches(model_name, setting, zo.example_inputs, calls, seed + 2)
        batches = [others[i] if i % 3 == 2 else b for i, b in enumerate(batches)]
    loops = _TwoLoops(zs, plan, batches, dev, seed, loop)
    if dev.type == "cpu":
        loops.interleaved(calls)
    else:
        loops.sequential(calls)
    return _report(loops, plan, traced.graph, dev, origin, {
        "model": model_name, "batch_size": batch_size, "seq_len": tseq, "setting": setting,
        "precision": precision, "attention": origin.get("attention"), "steps": steps,
        "graph": gname, "trace_seconds": trace_s, "plan_seconds": plan_s,
        "max_grad_norm": max_grad_norm, "accumulation_steps": accumulation_steps,
        "other_batch_size": other_batch_size, "calls": calls, "merge_casts": merge_casts})


def _report(loops: _TwoLoops, plan: Plan, graph: Graph, dev: torch.device,
            origin: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """The JSON object of a finished comparison: ``head`` (the configuration), then the
    numerics, times, peaks and the planned step's statistics."""
    step = loops.planned_step()
    stats = step.stats()
    te, tp = _median(loops.t_eager), _median(loops.t_planned)
    diff = loops.max_abs_diff()
    peaks = loops.peaks
    return {
        **head, "traced_setting": "steady", "optimizer": origin["optimizer"],
        "device": dev.type, "device_name": (torch.cuda.get_device_name(dev)
                                            if dev.type == "cuda" else "cpu"),
        "max_abs_diff": diff, "numerics_ok": diff <= TOLERANCE[dev.type],
        "eager_step_seconds": te, "planned_step_seconds": tp,
        "planned_over_eager": tp / te if te else None,
        "eager_first_step_seconds": loops.t_eager[0],
        "planned_first_step_seconds": loops.t_planned[0],
        "timing": ("interleaved" if dev.type == "cpu"
                   else "sequential (each loop's peaks alone)"),
        "arena_bytes": int(plan.arena_bytes), "planned_peak_bytes": int(plan.planned_peak_bytes),
        "plan_baseline_peak_bytes": int(plan.baseline_peak_bytes),
        "eager_peak_allocated_bytes": peaks.get("eager", (None, None))[0],
        "eager_peak_reserved_bytes": peaks.get("eager", (None, None))[1],
        "planned_peak_allocated_bytes": peaks.get("planned", (None, None))[0],
        "planned_peak_reserved_bytes": peaks.get("planned", (None, None))[1],
        "losses_eager": [float(x) for x in loops.losses_eager],
        "losses_planned": [float(x) for x in loops.losses_planned],
        "out_variant_ops": stats.out_variant_ops, "factory_ops": stats.factory_ops,
        "fallback_ops": stats.fallback_ops, "fallback_targets": list(stats.fallback_targets),
        "plan_method": plan.method, "graph_ops": len(graph),
        "torch_version": torch.__version__, "threads": torch.get_num_threads(),
        "plans": len(step.variants), "step_bytes": step.arena_bytes,
        "new_shape_plan_seconds": step.planned_seconds,
    }


@dataclass(frozen=True)
class _Loop:
    """The loop's settings and how new shapes (and micro-batch graphs) are planned."""

    max_grad_norm: float | None
    accumulation_steps: int
    planner: Callable[[Graph], Plan]
    precision: str = "fp32"
    merge_casts: bool = False


def _planner(method: str, time_limit_s: float | None) -> Callable[[Graph], Plan]:
    def plan(graph: Graph) -> Plan:
        from roam_core.planner import make_plan
        from roam_core.planner.config import PlannerConfig

        return make_plan(graph, PlannerConfig(workers=1, time_limit_s=time_limit_s),
                         method=method)

    # names the planner in the plan cache key (runtime/step_plans.planner_key)
    plan.roam_cache_key = f"compare_training:{method}:{time_limit_s}"  # type: ignore[attr-defined]  # see above
    return plan


class _TwoLoops:
    """The eager and the planned training loop, from the same weights on the same batches.

    Both variants start from CPU copies of ``zs.model`` (each moves to the device); before
    each step the RNG is seeded alike, so dropout draws the same masks.
    """

    def __init__(self, zs: ZooStep, plan: Plan, batches: list[list[Any]], dev: torch.device,
                 seed: int, loop: _Loop) -> None:
        self.zs, self.plan, self.batches, self.dev, self.seed = zs, plan, batches, dev, seed
        self.loop = loop
        self.mixed = StepPrecision(loop.precision, dev)
        self.eager_model: torch.nn.Module | None = resolve_precision(
            loop.precision).cast_module(copy.deepcopy(zs.model).to(dev))
        self.planned_model = copy.deepcopy(zs.model)
        self.losses_eager: list[torch.Tensor] = []
        self.losses_planned: list[torch.Tensor] = []
        self.t_eager: list[float] = []
        self.t_planned: list[float] = []
        self.peaks: dict[str, tuple[int | None, int | None]] = {}
        self.final_eager: dict[str, torch.Tensor] = {}
        self.eager_opt: torch.optim.Optimizer | None = zs.optimizer_factory(
            list(dict.fromkeys(self.eager_model.parameters())))
        self._step: PlannedStep | None = None

    def planned_step(self) -> PlannedStep:
        """The planned step (made by the loop that ran it)."""
        assert self._step is not None, "no planned loop ran"
        return self._step

    def _new_planned_step(self) -> None:
        lp = self.loop
        self._step = PlannedStep(self.planned_model, self.plan, self.zs.loss_fn,
                                 self.zs.optimizer_factory,
                                 example_inputs=self.zs.example_inputs, device=self.dev,
                                 max_grad_norm=lp.max_grad_norm,
                                 accumulation_steps=lp.accumulation_steps,
                                 planner=lp.planner, plan_cache=False,
                                 precision=lp.precision, merge_casts=lp.merge_casts)

    def _batch(self, i: int) -> list[Any]:
        torch.manual_seed(self.seed + 100 + i)
        return [x.to(self.dev) if isinstance(x, torch.Tensor) else x for x in self.batches[i]]

    def run_eager(self, i: int) -> None:
        """Eager step ``i``, timed."""
        assert self.eager_model is not None
        assert self.eager_opt is not None
        b = self._batch(i)
        _sync(self.dev)
        t = time.perf_counter()
        loss = eager_call(self.eager_model, self.eager_opt, self.zs.loss_fn, b, call=i,
                          accumulation_steps=self.loop.accumulation_steps,
                          max_grad_norm=self.loop.max_grad_norm, mixed=self.mixed)
        _sync(self.dev)
        self.t_eager.append(time.perf_counter() - t)
        self.losses_eager.append(loss.cpu())

    def run_planned(self, i: int) -> None:
        """Planned step ``i``, timed."""
        b = self._batch(i)
        _sync(self.dev)
        t = time.perf_counter()
        loss = self.planned_step()(*b)
        _sync(self.dev)
        self.t_planned.append(time.perf_counter() - t)
        self.losses_planned.append(loss.cpu())

    def interleaved(self, steps: int) -> None:
        """Step by step, alternating which loop goes first (machine load hits both alike)."""
        self._new_planned_step()
        for i in range(steps):
            first, second = ((self.run_eager, self.run_planned) if i % 2 == 0
                             else (self.run_planned, self.run_eager))
            first(i)
            second(i)
        self._keep_final_eager()

    def sequential(self, steps: int) -> None:
        """One loop after the other, each measured from a clean allocator."""
        _reset_peaks(self.dev)
        for i in range(steps):
            self.run_eager(i)
        self.peaks["eager"] = _peaks(self.dev)
        self._keep_final_eager()
        self.eager_model = self.eager_opt = None  # freed before the planned loop's arena
        gc.collect()
        _reset_peaks(self.dev)
        self._new_planned_step()
        for i in range(steps):
            self.run_planned(i)
        self.peaks["planned"] = _peaks(self.dev)

    def _keep_final_eager(self) -> None:
        assert self.eager_model is not None
        self.final_eager = {k: v.detach().cpu() for k, v in self.eager_model.state_dict().items()}

    def max_abs_diff(self) -> float:
        """Largest difference over every step's loss and the final parameters and buffers."""
        final_p = {k: v.detach().cpu() for k, v in self.planned_model.state_dict().items()}
        diff = 0.0
        for a, b in zip(self.losses_eager, self.losses_planned, strict=True):
            diff = max(diff, float((a.double() - b.double()).abs().max()))
        for k, a in self.final_eager.items():
            b = final_p[k]
            if a.numel():
                diff = max(diff, float((a.double() - b.double()).abs().max()))
        return diff


def _source(model_name: str, batch_size: int, seq_len: int | None, setting: str,
            optimizer: str | None, steps: int, seed: int, precision: str,
            attention: str | None, hf_config: Any, hf_task: str,
            hf_overrides: dict[str, Any]) -> tuple[ZooStep, dict[str, Any], list[list[Any]]]:
    """The step (on CPU, seeded), its origin record (traced steady) and the batches."""
    if hf_config is not None:
        from roam_core.zoo.hf import build_hf_step, hf_batches, hf_origin

        zs = build_hf_step(hf_config, batch_size, seq_len, task=hf_task, optimizer=optimizer,
                           attention=attention or "sdpa", device="cpu", seed=seed,
                           **hf_overrides)
        wrapped: Any = zs.model  # an _HFStep: its HF model's config
        origin = hf_origin(wrapped.model.config, hf_task, batch_size, seq_len,
                           optimizer=optimizer, attention=attention or "sdpa",
                           precision=precision, overrides=hf_overrides)
        return zs, origin, hf_batches(zs, steps, seed + 1)
    zs = build_zoo_step(model_name, batch_size, seq_len, setting, optimizer, "cpu",
                        attention=attention, seed=seed)
    origin = zoo_origin(model_name, batch_size, seq_len, "steady", optimizer,
                        attention=attention, precision=precision)
    origin["loss_setting"] = setting
    return zs, origin, synthetic_batches(model_name, setting, zs.example_inputs, steps,
                                         seed + 1)


def _reset_peaks(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)


def _peaks(dev: torch.device) -> tuple[int | None, int | None]:
    if dev.type != "cuda":
        return None, None
    torch.cuda.synchronize(dev)
    return int(torch.cuda.max_memory_allocated(dev)), int(torch.cuda.max_memory_reserved(dev))
