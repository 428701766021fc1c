"""What each rank of ``roam train --parallel`` does: eager FSDP2 / DDP beside the planned step.

Every rank (a process started by :mod:`roam_core.runtime.rank_launch`, joined to a gloo group
on 127.0.0.1) builds the zoo model from the same seed, so all ranks start from the same whole
weights, then trains two copies on its own batches (seeded by the rank):

* **eager**: torch's own data parallelism: ``fully_shard`` on the units of the layout and on
  the root (FSDP2, with the same ``reshard_after_forward`` and mixed precision), or
  ``DistributedDataParallel``;
* **planned**: the rank's shards (:func:`~roam_core.trace.parallel.shard_model`) in a
  :class:`~roam_core.runtime.planned_step.PlannedStep` running the plan made for the step of
  one rank: its all-gathers, reduce-scatters and all-reduces run on the same group.

Both loops run step by step in the same order on every rank (the collectives of both meet).
The rank reports the largest difference over its losses and final parameters: its shards'
real rows against FSDP2's local shards (DDP: the whole parameters).
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from roam_core.base.errors import ExecutorError
from roam_core.model.parallel import ParallelSetting
from roam_core.runtime.compare_training import synthetic_batches
from roam_core.runtime.planned_step import PlannedStep
from roam_core.trace.parallel import RankLayout, shard_model
from roam_core.zoo.steps import build_zoo_step

__all__ = ["RankJob", "torch_parallel_model", "train_rank"]


@dataclass(frozen=True)
class RankJob:
    """Everything a rank needs (pickled to each spawned process).

    Parameters
    ----------
    model, batch_size, seq_len, setting, optimizer
        The zoo configuration (:func:`roam_core.zoo.build_zoo_step`).
    parallel : ParallelSetting
    precision : str
    steps : int
    seed : int
        Seed of the weights (same on every rank) and of the batches (plus the rank).
    plan_path : str
        The plan file (one plan for every rank).
    port : int
        TCP port of the gloo rendezvous on 127.0.0.1.
    out_dir : str
        Each rank writes ``rank<r>.json`` there.
    timeout_s : float
        Timeout of every collective.
    threads : int
        Intra-op threads per rank.
    fail_rank : int, optional
        For tests of the failure path: this rank raises before its first step.
    """

    model: str
    batch_size: int
    seq_len: int | None
    setting: str
    optimizer: str | None
    parallel: ParallelSetting
    precision: str
    steps: int
    seed: int
    plan_path: str
    port: int
    out_dir: str
    timeout_s: float = 300.0
    threads: int = 1
    fail_rank: int | None = None


def train_rank(rank: int, job: RankJob) -> None:
    """The entry point of rank ``rank`` (``torch.multiprocessing`` passes the rank first)."""
    torch.set_num_threads(job.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job.port}", rank=rank,
                            world_size=job.parallel.world_size,
                            timeout=timedelta(seconds=job.timeout_s))
    try:
        result = _compare(rank, job)
        Path(job.out_dir, f"rank{rank}.json").write_text(json.dumps(result, sort_keys=True))
    finally:
        dist.destroy_process_group()


def _compare(rank: int, job: RankJob) -> dict[str, Any]:
    from roam_core.formats.plan_io import load_plan

    plan = load_plan(job.plan_path)
    zs = build_zoo_step(job.model, job.batch_size, job.seq_len, job.setting, job.optimizer,
                        "cpu", seed=job.seed)
    batches = synthetic_batches(job.model, job.setting, zs.example_inputs, job.steps,
                                job.seed + 1 + 1000 * rank)
    eager = torch_parallel_model(copy.deepcopy(zs.model), job.parallel, job.precision)
    eager_opt = zs.optimizer_factory(list(eager.parameters()))
    planned = copy.deepcopy(zs.model)
    layout = shard_model(planned, job.parallel, rank)
    step = PlannedStep(planned, plan, zs.loss_fn, zs.optimizer_factory,
                       example_inputs=batches[0], parallel=job.parallel,
                       precision=job.precision)
    if job.fail_rank == rank:
        raise ExecutorError(f"rank {rank} failed on purpose (fail_rank)")
    losses: dict[str, list[float]] = {"eager": [], "planned": []}
    times: dict[str, list[float]] = {"eager": [], "planned": []}
    for i, batch in enumerate(batches):
        for which in (("eager", "planned") if i % 2 == 0 else ("planned", "eager")):
            torch.manual_seed(job.seed + 100 + i)
            t = time.perf_counter()
            if which == "eager":
                out = eager(*batch)
                loss = out if zs.loss_fn is None else zs.loss_fn(out)
                loss.backward()
                eager_opt.step()
                eager_opt.zero_grad(set_to_none=True)
                loss = loss.detach()
            else:
                loss = step(*batch)
            times[which].append(time.perf_counter() - t)
            losses[which].append(float(loss))
    diff = max(abs(a - b) for a, b in zip(losses["eager"], losses["planned"], strict=True))
    diff = max(diff, _params_diff(eager, planned, layout, rank, job.parallel))
    stats = step.stats()
    return {
        "rank": rank, "max_abs_diff": diff, "losses_eager": losses["eager"],
        "losses_planned": losses["planned"],
        "eager_step_seconds": _median(times["eager"]),
        "planned_step_seconds": _median(times["planned"]),
        "arena_bytes": int(plan.arena_bytes), "fallback_ops": stats.fallback_ops,
        "fallback_targets": list(stats.fallback_targets),
    }


def _median(xs: list[float]) -> float:
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def torch_parallel_model(model: nn.Module, par: ParallelSetting,
                         precision: str = "fp32") -> nn.Module:
    """``model`` under torch's own data parallelism: ``fully_shard`` on the layout's units
    (innermost first) and on the root, with FSDP2's mixed precision for ``bf16-mixed``; or
    ``DistributedDataParallel``.  Needs an initialised default process group."""
    if par.kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=par.bucket_bytes / 2**20)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mixed = precision == "bf16-mixed"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if mixed else None,
                              reduce_dtype=torch.float32 if mixed else None)
    layout = RankLayout.build(model, par)
    inner = sorted((u.path for u in layout.units if u.path), key=lambda p: -p.count("."))
    for path in inner:  # innermost first, as fully_shard requires
        fully_shard(model.get_submodule(path), reshard_after_forward=par.reshard_after_forward,
                    mp_policy=mp)
    # None: FSDP2's default for the root, which never reshards after forward (as roam traces)
    fully_shard(model, reshard_after_forward=None if par.reshard_after_forward else False,
                mp_policy=mp)
    return model


def _params_diff(eager: nn.Module, planned: nn.Module, layout: RankLayout, rank: int,
                 par: ParallelSetting) -> float:
    """Largest difference of the final parameters and buffers on this rank."""
    module: nn.Module = eager.module if par.kind == "ddp" else eager  # type: ignore[assignment]  # DDP wraps a Module
    mine = dict(planned.named_parameters())
    diff = 0.0
    for name, p in module.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        start, stop = layout.params[name].rows_of(rank)
        ours = mine[name][:stop - start] if layout.params[name].sharded else mine[name]
        if local.shape != ours.shape:
            raise ExecutorError(f"parameter {name!r}: eager shard {tuple(local.shape)}, "
                                f"planned shard {tuple(ours.shape)}")
        if local.numel():
            diff = max(diff, float((local.detach().double() - ours.detach().double())
                                   .abs().max()))
    bufs = dict(planned.named_buffers())
    for name, b in module.named_buffers():
        if b.numel():
            diff = max(diff, float((b.double() - bufs[name].double()).abs().max()))
    return diff
