"""Train a zoo model eagerly and with :class:`~roam_core.runtime.planned_step.PlannedStep`.

:func:`compare_training` is what ``roam train`` and ``benchmarks/train_bench.py`` run:

1. build the zoo model on the device with a seeded init, and a copy of it;
2. trace its ``steady`` step (fake tensors) and plan it, unless a plan is given;
3. draw ``steps`` synthetic batches from a fixed seed (images/vectors ``randn``, token ids
   and labels ``randint``);
4. train both from the identical weights on the same batches, with the same RNG seed
   before each step (dropout draws the same masks).  On CPU the two loops are
   **interleaved** step by step, alternating which goes first, so that machine load hits
   both alike.  On CUDA they run one after the other, each measured from a clean allocator
   (``max_memory_allocated`` / ``max_memory_reserved`` of that loop alone);
5. report the largest difference over every step's loss and the final parameters and
   buffers, the median step times (first step excluded when there are more), the arena
   size and, on CUDA, the peaks.
"""

from __future__ import annotations

import copy
import gc
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from roam_core.base.errors import ExecutorError
from roam_core.runtime.planned_step import PlannedStep

__all__ = ["TRAIN_KEYS", "compare_training", "synthetic_batches"]

_logger = logging.getLogger(__name__)

#: Keys every ``roam train --json`` object has.
TRAIN_KEYS = ("steps", "device", "max_abs_diff", "eager_step_seconds", "planned_step_seconds",
              "arena_bytes", "eager_peak_reserved_bytes", "planned_peak_reserved_bytes")

#: Tolerance of the comparison: bit-equal on CPU.
TOLERANCE = {"cpu": 0.0, "cuda": 1e-4}


def synthetic_batches(name: str, setting: str, example: Sequence[Any], steps: int,
                      seed: int) -> list[list[Any]]:
    """``steps`` batches shaped like ``example`` from a fixed seed (valid ids and labels)."""
    from roam_core.zoo import ZOO

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


def _eager_step(model: Any, opt: Any, loss_fn: Any, batch: Sequence[Any]) -> torch.Tensor:
    out = model(*batch)
    loss = out if loss_fn is None else loss_fn(out)
    loss.backward()
    opt.step()
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
    plan: Any = None,
    method: str = "roam",
    planner_time_limit_s: float | None = 30.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Train ``model_name`` eagerly and planned for ``steps`` steps; returns a JSON-ready dict.

    Parameters
    ----------
    model_name, batch_size, seq_len, setting, optimizer
        The zoo configuration (:func:`roam_core.zoo.build_zoo_step`); the step is always
        traced in the ``steady`` setting (optimizer state resident), which is what a
        training loop repeats; ``setting="roam"`` picks the ROAM paper's loss and optimizer.
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

    Returns
    -------
    dict
        At least :data:`TRAIN_KEYS`; see ``roam train --help``.
    """
    from roam_core.runtime import resolve_device
    from roam_core.trace import trace_fx
    from roam_core.zoo import build_zoo_step, zoo_origin

    if steps < 1:
        raise ExecutorError(f"steps must be at least 1, got {steps}")
    dev = resolve_device(device)
    t0 = time.perf_counter()
    zs = build_zoo_step(model_name, batch_size, seq_len, setting, optimizer, "cpu", seed=seed)
    origin = zoo_origin(model_name, batch_size, seq_len, "steady", optimizer)
    origin["loss_setting"] = setting
    tseq = origin["seq_len"]
    gname = f"{model_name}-b{batch_size}" + (f"-t{tseq}" if tseq else "") + "-steady"
    traced = trace_fx(zs.model, zs.example_inputs, zs.loss_fn, zs.optimizer_factory,
                      setting="steady", name=gname, origin=origin, device=dev)
    trace_s = time.perf_counter() - t0
    plan_s = 0.0
    if plan is None:
        from roam_core.planner import make_plan
        from roam_core.planner.config import PlannerConfig

        t1 = time.perf_counter()
        cfg = PlannerConfig(workers=1, time_limit_s=planner_time_limit_s)
        plan = make_plan(traced.graph, cfg, method=method)
        plan_s = time.perf_counter() - t1
    batches = synthetic_batches(model_name, setting, zs.example_inputs, steps, seed + 1)
    # both variants start from these weights (CPU copies; each moves to the device)
    eager_model = copy.deepcopy(zs.model).to(dev)
    planned_model = copy.deepcopy(zs.model)
    interleave = dev.type == "cpu"
    res: dict[str, Any] = {"losses_e": [], "losses_p": [], "t_e": [], "t_p": []}
    peaks: dict[str, Any] = {}

    def run_eager(i: int) -> None:
        torch.manual_seed(seed + 100 + i)
        b = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in batches[i]]
        _sync(dev)
        t = time.perf_counter()
        loss = _eager_step(eager_model, eager_opt, zs.loss_fn, b)
        _sync(dev)
        res["t_e"].append(time.perf_counter() - t)
        res["losses_e"].append(loss.cpu())

    def run_planned(i: int) -> None:
        torch.manual_seed(seed + 100 + i)
        b = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in batches[i]]
        _sync(dev)
        t = time.perf_counter()
        loss = step(*b)
        _sync(dev)
        res["t_p"].append(time.perf_counter() - t)
        res["losses_p"].append(loss.cpu())

    eager_opt = zs.optimizer_factory(list(dict.fromkeys(eager_model.parameters())))
    if interleave:
        step = PlannedStep(planned_model, plan, zs.loss_fn, zs.optimizer_factory,
                           example_inputs=zs.example_inputs, device=dev)
        for i in range(steps):
            first, second = (run_eager, run_planned) if i % 2 == 0 else (run_planned, run_eager)
            first(i)
            second(i)
        final_e = {k: v.detach().cpu() for k, v in eager_model.state_dict().items()}
    else:
        _reset_peaks(dev)
        for i in range(steps):
            run_eager(i)
        peaks["eager"] = _peaks(dev)
        final_e = {k: v.detach().cpu() for k, v in eager_model.state_dict().items()}
        del eager_model, eager_opt
        gc.collect()
        _reset_peaks(dev)
        step = PlannedStep(planned_model, plan, zs.loss_fn, zs.optimizer_factory,
                           example_inputs=zs.example_inputs, device=dev)
        for i in range(steps):
            run_planned(i)
        peaks["planned"] = _peaks(dev)
    final_p = {k: v.detach().cpu() for k, v in planned_model.state_dict().items()}
    diff = 0.0
    for a, b in zip(res["losses_e"], res["losses_p"], strict=True):
        diff = max(diff, float((a.double() - b.double()).abs().max()))
    for k, a in final_e.items():
        b = final_p[k]
        if a.numel():
            diff = max(diff, float((a.double() - b.double()).abs().max()))
    stats = step.stats()
    te, tp = _median(res["t_e"]), _median(res["t_p"])
    return {
        "model": model_name, "batch_size": batch_size, "seq_len": tseq, "setting": setting,
        "traced_setting": "steady", "optimizer": origin["optimizer"], "steps": steps,
        "device": dev.type, "device_name": (torch.cuda.get_device_name(dev)
                                            if dev.type == "cuda" else "cpu"),
        "max_abs_diff": diff, "numerics_ok": diff <= TOLERANCE[dev.type],
        "eager_step_seconds": te, "planned_step_seconds": tp,
        "planned_over_eager": tp / te if te else None,
        "eager_first_step_seconds": res["t_e"][0], "planned_first_step_seconds": res["t_p"][0],
        "timing": "interleaved" if interleave else "sequential (each loop's peaks alone)",
        "arena_bytes": int(plan.arena_bytes), "planned_peak_bytes": int(plan.planned_peak_bytes),
        "plan_baseline_peak_bytes": int(plan.baseline_peak_bytes),
        "eager_peak_allocated_bytes": peaks.get("eager", (None, None))[0],
        "eager_peak_reserved_bytes": peaks.get("eager", (None, None))[1],
        "planned_peak_allocated_bytes": peaks.get("planned", (None, None))[0],
        "planned_peak_reserved_bytes": peaks.get("planned", (None, None))[1],
        "losses_eager": [float(x) for x in res["losses_e"]],
        "losses_planned": [float(x) for x in res["losses_p"]],
        "out_variant_ops": stats.out_variant_ops, "factory_ops": stats.factory_ops,
        "fallback_ops": stats.fallback_ops, "fallback_targets": list(stats.fallback_targets),
        "plan_method": plan.method, "graph": gname, "graph_ops": len(traced.graph),
        "trace_seconds": trace_s, "plan_seconds": plan_s,
        "torch_version": torch.__version__, "threads": torch.get_num_threads(),
    }


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
