"""CUDA peak memory and step time of the eager step and of the planned replay.

Each measurement runs in a **fresh process** (``spawn``): the caching allocator keeps its
blocks and statistics for the life of a process, so an eager step measured after a planned
one (or the reverse) would be measured against a warm, fragmented pool.  The child rebuilds
everything from a picklable *recipe* (a zero-argument callable returning
``(model, example_inputs, loss_fn, optimizer, setting, optimizer_kwargs)``, optionally
followed by the precision and ``merge_casts``), re-traces on
the device, checks the fingerprint against the plan's, runs one warm-up step (it creates
cuBLAS/cuDNN workspaces and, in eager, the autograd caches), resets the peak statistics and
measures ``steps`` more steps:

* eager: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` of the whole process
  (parameters, gradients, optimizer state and activations);
* planned: the same after copying every resident tensor into the arena and dropping the
  model, so the process holds the arena plus whatever lives outside it (fallback
  temporaries, kernel workspaces).

When no recipe can be pickled (a model defined in ``__main__``, a lambda loss), the same
measurement runs in the calling process after ``torch.cuda.empty_cache()``
(``measurement="in-process"`` in the report).
"""

from __future__ import annotations

import functools
import logging
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ExecutorError
from roam_core.runtime.arena_runner import ArenaRunner
from roam_core.runtime.recompute_replay import expand_traced
from roam_core.runtime.step import (
    StepState,
    eager_step,
    load_arena,
    prepare_state,
    run_planned_step,
)
from roam_core.trace.optimizers import OptimizerFactory, make_optimizer_factory
from roam_core.trace.tracer import trace_fx

if TYPE_CHECKING:
    from roam_core.model.graph import OpId
    from roam_core.model.plan import Plan
    from roam_core.trace.traced_step import TracedStep

__all__ = [
    "Peaks",
    "Recipe",
    "measure_eager",
    "measure_planned",
    "measure_subprocess",
    "pickled_recipe",
]

_logger = logging.getLogger(__name__)

Recipe = Callable[[], tuple[Any, Sequence[Any], Any, Any, str, Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class Peaks:
    """Measured figures of one variant (eager or planned)."""

    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    seconds_per_step: float


def _unpickle_recipe(blob: bytes) -> tuple[Any, ...]:
    return pickle.loads(blob)  # our own bytes, made by pickled_recipe


def pickled_recipe(model: torch.nn.Module, example_inputs: Sequence[Any],
                   loss_fn: Callable[[Any], torch.Tensor] | None,
                   optimizer: str | OptimizerFactory | None, setting: str,
                   optimizer_kwargs: Mapping[str, Any], precision: str = "fp32",
                   ) -> Recipe | None:
    """A recipe that rebuilds these objects in a child process, or ``None`` if they do not
    pickle (classes defined in ``__main__``, lambdas...)."""
    try:
        cpu_model = model if _is_meta(model) else _cpu_copy(model)
        cpu_inputs = [x.detach().cpu() if isinstance(x, torch.Tensor) and not x.is_meta else x
                      for x in example_inputs]
        blob = pickle.dumps((cpu_model, cpu_inputs, loss_fn, optimizer, setting,
                             dict(optimizer_kwargs), precision))
    except Exception as e:  # any pickling failure means "measure in-process"
        _logger.info("recipe does not pickle (%s): measuring in-process", e)
        return None
    return functools.partial(_unpickle_recipe, blob)


def _is_meta(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def _cpu_copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model).cpu()


def _reset(device: torch.device) -> None:
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def _peaks(device: torch.device, seconds: float) -> Peaks:
    torch.cuda.synchronize(device)
    return Peaks(int(torch.cuda.max_memory_allocated(device)),
                 int(torch.cuda.max_memory_reserved(device)), seconds)


def _record_one(device: torch.device, snapshot_path: str | None,
                step: Callable[[], Any]) -> None:
    """Run one more step while recording the allocator history; dump it as a snapshot."""
    if snapshot_path is None or device.type != "cuda":
        return
    if not (hasattr(torch.cuda.memory, "_record_memory_history")
            and hasattr(torch.cuda.memory, "_dump_snapshot")):  # private API: detect it
        _logger.warning("torch %s cannot record memory snapshots: none written",
                        torch.__version__)
        return
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    try:
        step()
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(snapshot_path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def measure_eager(st: StepState, loss_fn: Callable[[Any], torch.Tensor] | None, steps: int,
                  seed: int, snapshot_path: str | None = None) -> Peaks:
    """Peaks of ``steps`` eager steps after a warm-up step (state from ``prepare_state``).

    With ``snapshot_path`` (CUDA), one more step runs under
    ``torch.cuda.memory._record_memory_history`` and its snapshot is written there.
    """
    device = next(iter(st.model.parameters())).device
    eager_step(st, loss_fn, seed)  # warm-up
    if device.type == "cuda":
        _reset(device)
    t0 = time.perf_counter()
    for i in range(steps):
        eager_step(st, loss_fn, seed + 1 + i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dt = (time.perf_counter() - t0) / max(steps, 1)
    if device.type != "cuda":
        return Peaks(None, None, dt)
    peaks = _peaks(device, dt)
    _record_one(device, snapshot_path, lambda: eager_step(st, loss_fn, seed))
    return peaks


def measure_planned(runner: ArenaRunner, traced: TracedStep, order: Sequence[OpId], steps: int,
                    seed: int, snapshot_path: str | None = None) -> Peaks:
    """Peaks of ``steps`` planned replays after a warm-up replay (arena already loaded)."""
    run_planned_step(runner, traced, order, seed, load=None)  # warm-up
    if runner.device.type == "cuda":
        _reset(runner.device)
    total = 0.0
    for i in range(steps):
        _, dt = run_planned_step(runner, traced, order, seed + 1 + i, load=None)
        total += dt
    dt = total / max(steps, 1)
    if runner.device.type != "cuda":
        return Peaks(None, None, dt)
    peaks = _peaks(runner.device, dt)
    _record_one(runner.device, snapshot_path,
                lambda: run_planned_step(runner, traced, order, seed, load=None))
    return peaks


def _child(recipe: Recipe, which: str, plan_light: dict[str, Any], device: str, steps: int,
           seed: int, check_addresses: bool,
           snapshot_path: str | None) -> tuple[int | None, int | None, float]:
    """Runs in a fresh process: rebuild, re-trace, check the fingerprint, measure."""
    rest: list[Any]  # the precision and merge_casts, when the recipe gives them
    model, inputs, loss_fn, optimizer, setting, kw, *rest = recipe()
    dev = torch.device(device)
    traced = trace_fx(model, inputs, loss_fn, optimizer, setting=setting, device=dev,
                      precision=rest[0] if rest else "fp32",
                      merge_casts=bool(rest[1]) if len(rest) > 1 else False, **kw)
    if traced.graph.fingerprint() != plan_light["fingerprint"]:
        raise ExecutorError("re-traced graph in the measuring process differs from the plan's")
    if plan_light.get("recompute"):  # the re-runs (and RNG replays) of a recompute plan
        traced = expand_traced(traced, plan_light["recompute"])
    _, factory = make_optimizer_factory(optimizer, setting, **kw)
    st = prepare_state(traced, model, inputs, factory, dev, seed=seed)
    if which == "eager":
        p = measure_eager(st, loss_fn, steps, seed, snapshot_path)
    else:
        runner = ArenaRunner(traced.gm, traced.graph, traced.values, plan_light["offsets"],
                             plan_light["arena_bytes"], dev, check_addresses=check_addresses,
                             rng=traced.rng, amp=traced.amp)
        load_arena(runner, st)
        del st  # only the arena holds the model now
        p = measure_planned(runner, traced, plan_light["order"], steps, seed, snapshot_path)
    return p.peak_allocated_bytes, p.peak_reserved_bytes, p.seconds_per_step


def measure_subprocess(recipe: Recipe, plan: Plan, which: str, *, device: str = "cuda",
                       steps: int = 1, seed: int = 0, check_addresses: bool = True,
                       snapshot_path: str | None = None) -> Peaks:
    """Measure ``which`` (``"eager"`` or ``"planned"``) in a fresh ``spawn`` process.

    Meant for CUDA (allocator peaks); on CPU the same path runs and returns only the step
    time (the peaks are ``None``), which is how it is tested without a GPU.

    With ``snapshot_path``, the child also writes a memory snapshot of one extra step.

    Raises
    ------
    ExecutorError
        If the child fails (its error is included).
    """
    import concurrent.futures
    import multiprocessing

    light = {"fingerprint": plan.graph_fingerprint, "order": list(plan.order),
             "offsets": dict(plan.offsets), "arena_bytes": int(plan.arena_bytes),
             "recompute": tuple(getattr(plan, "recompute", ()) or ())}
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        fut = pool.submit(_child, recipe, which, light, device, steps, seed, check_addresses,
                          snapshot_path)
        try:
            a, r, s = fut.result()
        except ExecutorError:
            raise
        except Exception as e:  # child failures carry their own message
            raise ExecutorError(f"measuring the {which} step in a fresh process failed: "
                                f"{type(e).__name__}: {e}") from e
    return Peaks(a, r, s)
