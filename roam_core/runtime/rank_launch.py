"""``roam train --parallel``: plan one rank, start W gloo ranks on 127.0.0.1, compare.

:func:`compare_parallel_training` traces the step of one rank (fake process group), plans it
once, then starts ``world_size`` processes (``torch.multiprocessing``, spawn) that join a
gloo group on a free port of 127.0.0.1 and each run :func:`~roam_core.runtime.rank_training.
train_rank`: eager FSDP2 / DDP beside the planned step, from the same weights.  When a rank
fails, the others are stopped and an :class:`~roam_core.base.errors.ExecutorError` names the
rank and its error; no process outlives the call (a ``finally`` stops any left).
"""

from __future__ import annotations

import logging
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ExecutorError
from roam_core.model.parallel import ParallelSetting
from roam_core.runtime.compare_training import TOLERANCE
from roam_core.runtime.rank_training import RankJob, train_rank
from roam_core.zoo.steps import trace_zoo

if TYPE_CHECKING:
    from roam_core.model.plan import Plan

__all__ = ["compare_parallel_training", "free_port", "run_ranks"]

_logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(job: RankJob, *, timeout_s: float = 900.0) -> list[dict[str, Any]]:
    """Run ``job`` on ``job.parallel.world_size`` spawned ranks; returns their results.

    Raises
    ------
    ExecutorError
        A rank failed (the others are stopped), or the ranks ran past ``timeout_s``.
    """
    import torch.multiprocessing as mp

    world = job.parallel.world_size
    ctx = mp.start_processes(train_rank, args=(job,), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise ExecutorError(f"the {world} ranks ran past {timeout_s:g} s")
    except mp.ProcessRaisedException as e:
        last = [ln for ln in str(e).strip().splitlines() if ln.strip()][-1]
        raise ExecutorError(f"rank {e.error_index} failed, all ranks stopped: {last}") from None
    except mp.ProcessExitedException as e:
        raise ExecutorError(f"rank {e.error_index} exited with code {e.exit_code}, all ranks "
                            "stopped") from None
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    out = []
    for r in range(world):
        f = Path(job.out_dir, f"rank{r}.json")
        if not f.exists():
            raise ExecutorError(f"rank {r} wrote no result")
        import json

        out.append(json.loads(f.read_text()))
    return out


def compare_parallel_training(
    model_name: str,
    batch_size: int,
    seq_len: int | None = None,
    *,
    parallel: ParallelSetting,
    precision: str = "fp32",
    setting: str = "steady",
    optimizer: str | None = None,
    steps: int = 3,
    plan: Plan | None = None,
    method: str = "roam",
    planner_time_limit_s: float | None = 30.0,
    seed: int = 0,
    timeout_s: float = 900.0,
    fail_rank: int | None = None,
) -> dict[str, Any]:
    """Train ``model_name`` on ``parallel.world_size`` CPU ranks, eager and planned.

    Parameters
    ----------
    model_name, batch_size, seq_len, setting, optimizer
        The zoo configuration (per rank: each rank draws its own batches of this size).
    parallel : ParallelSetting
        FSDP or DDP and the world size.
    precision : str
        ``fp32``, or ``bf16-mixed`` with FSDP.
    steps : int
        Training steps of each loop.
    plan : Plan, optional
        A plan for the step of one rank (``roam trace --parallel ...`` then ``roam plan``);
        default: plan it here.
    method, planner_time_limit_s
        Planning method and budget when no plan is given.
    seed : int
        Seed of the weights and batches.
    timeout_s : float
        Wall-clock limit of the ranks.
    fail_rank : int, optional
        For tests: this rank raises before its first step.

    Returns
    -------
    dict
        ``max_abs_diff`` (over every rank), ``numerics_ok``, ``ranks`` (one dict per rank
        with its ``max_abs_diff``, losses and step times), ``world_size``, ``parallel``,
        ``arena_bytes``, ``planned_peak_bytes``, ``plan_baseline_peak_bytes``.
    """
    if not parallel.active:
        raise ExecutorError("compare_parallel_training needs --parallel fsdp or ddp")
    if steps < 1:
        raise ExecutorError(f"steps must be at least 1, got {steps}")
    t0 = time.perf_counter()
    traced = trace_zoo(model_name, batch_size, seq_len, "steady", optimizer,
                       parallel=parallel, precision=precision)
    trace_s = time.perf_counter() - t0
    plan_s = 0.0
    if plan is None:
        from roam_core.planner import make_plan
        from roam_core.planner.config import PlannerConfig

        t1 = time.perf_counter()
        plan = make_plan(traced.graph, PlannerConfig(workers=1,
                                                     time_limit_s=planner_time_limit_s),
                         method=method)
        plan_s = time.perf_counter() - t1
    from roam_core.formats.plan_io import save_plan
    from roam_core.runtime.plan_checks import check_fingerprint

    check_fingerprint(traced.graph, plan)
    with tempfile.TemporaryDirectory(prefix="roam-ranks-") as tmp:
        plan_path = str(Path(tmp, "plan.json"))
        save_plan(plan, plan_path)
        job = RankJob(model_name, batch_size, seq_len, setting, optimizer, parallel, precision,
                      steps, seed, plan_path, free_port(), tmp, fail_rank=fail_rank)
        t2 = time.perf_counter()
        ranks = run_ranks(job, timeout_s=timeout_s)
        run_s = time.perf_counter() - t2
    diff = max(r["max_abs_diff"] for r in ranks)
    return {
        "model": model_name, "batch_size": batch_size, "seq_len": traced.graph.origin.get(
            "seq_len"), "steps": steps, "device": "cpu", "device_name": "cpu",
        "parallel": parallel.kind, "world_size": parallel.world_size,
        "parallel_setting": parallel.to_dict(), "precision": precision,
        "max_abs_diff": diff, "numerics_ok": diff <= TOLERANCE["cpu"],
        "eager_step_seconds": max(r["eager_step_seconds"] for r in ranks),
        "planned_step_seconds": max(r["planned_step_seconds"] for r in ranks),
        "arena_bytes": int(plan.arena_bytes), "planned_peak_bytes": int(plan.planned_peak_bytes),
        "plan_baseline_peak_bytes": int(plan.baseline_peak_bytes),
        "eager_peak_reserved_bytes": None, "planned_peak_reserved_bytes": None,
        "ranks": ranks, "plan_method": plan.method, "graph": traced.graph.name,
        "graph_ops": len(traced.graph), "trace_seconds": trace_s, "plan_seconds": plan_s,
        "ranks_seconds": run_s, "torch_version": torch.__version__,
    }
