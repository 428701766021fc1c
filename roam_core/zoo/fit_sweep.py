"""``roam fit``'s sweep: zoo configurations (batch, sequence length, world size) against memory.

Each configuration is traced (for a data-parallel setting: the step of one rank) and
checked four ways against the memory of one device (:func:`fit_check`).  Without an executor
the configurations run in order, batch sizes increasing, and a method that stops fitting is
not tried on larger batches; with one (``--executor dask-local`` / ``dask://HOST:PORT``) every
configuration is one task (:func:`fit_config`, plain data in and out) and the answer is the
same: rows the ordered sweep would have skipped are dropped.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Mapping, Sequence
from typing import Any

from roam_core.model.graph import Graph
from roam_core.model.parallel import ParallelSetting
from roam_core.planner.config import PlannerConfig

__all__ = ["METHODS", "fit_check", "fit_config", "fit_sweep"]

#: The methods compared, in report order.
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def fit_check(graph: Graph, memory: int, cfg: PlannerConfig,
              executor: cf.Executor | None = None) -> dict[str, Any]:
    """Whether ``graph`` fits ``memory`` bytes four ways (eager reserved, roam, roam with
    recomputation at <= 5 % and <= 25 % extra FLOPs), with the bytes of each."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.oracle.baseline import eager_report
    from roam_core.planner.budget import BudgetPlanner

    rep = eager_report(graph, cfg.alignment_bytes)
    bp = BudgetPlanner(graph, cfg, executor=executor)
    out: dict[str, Any] = {"eager_reserved_bytes": int(rep.peak_reserved_bytes),
                           "roam_arena_bytes": bp.base.arena_bytes, "step_flops": bp.step_flops}
    pct: float | None
    if bp.base.arena_bytes <= memory:
        pct, arena = 0.0, bp.base.arena_bytes
    else:
        try:
            plan = bp.plan_at(memory)
            pct, arena = 100 * plan.extra_flops / max(bp.step_flops, 1), plan.arena_bytes
        except BudgetInfeasibleError:
            pct, arena = None, None
    out["recompute_arena_bytes"] = arena
    out["recompute_extra_flops_pct"] = pct
    out["fits"] = {
        "eager_reserved": out["eager_reserved_bytes"] <= memory,
        "roam": bp.base.arena_bytes <= memory,
        "roam_recompute_5pct": pct is not None and pct <= 5.0,
        "roam_recompute_25pct": pct is not None and pct <= 25.0,
    }
    return out


def fit_config(model: str, batch_size: int, seq_len: int | None,
               parallel: Mapping[str, Any], precision: str, memory: int,
               workers: int = 1, executor: cf.Executor | None = None) -> dict[str, Any]:
    """One row of the sweep: trace one configuration and :func:`fit_check` it.

    ``parallel`` is a :meth:`ParallelSetting.to_dict` (plain data, for a Dask task).
    """
    from roam_core.zoo.steps import trace_zoo

    par = ParallelSetting.from_mapping(parallel)
    g = trace_zoo(model, batch_size, seq_len, "steady", parallel=par, precision=precision).graph
    return {"batch_size": batch_size, "seq_len": g.origin.get("seq_len"),
            "world_size": par.world_size, "parallel": par.kind, "precision": precision,
            **fit_check(g, memory, PlannerConfig(workers=workers), executor)}


def fit_sweep(model: str, memory: int, batch_sizes: Sequence[int],
              seq_lens: Sequence[int] | None, settings: Sequence[ParallelSetting],
              precision: str = "fp32", workers: int = 1,
              executor: cf.Executor | None = None) -> dict[str, Any]:
    """The object ``roam fit --json`` prints.

    Parameters
    ----------
    model : str
        Zoo model.
    memory : int
        Bytes of one device (per rank).
    batch_sizes, seq_lens
        Per-rank batch sizes and sequence lengths (``None``: the model's).
    settings : sequence of ParallelSetting
        One per world size swept (``ParallelSetting()``: one device).
    precision : str
    workers : int
        Planner workers per configuration.
    executor : Executor, optional
        Where the configurations run (a Dask client's executor); ``None``: here, in order.

    Returns
    -------
    dict
        ``model``, ``memory_bytes``, ``precision``, ``configs`` (rows), ``largest``
        (``{method: {"batch_size", "seq_len"} | None}`` for the first setting) and
        ``largest_by_world_size`` (the same per world size, keys as strings).
    """
    lengths: list[int | None] = list(seq_lens) if seq_lens else [None]
    keys = [(par, t, b) for par in settings for t in lengths for b in sorted(batch_sizes)]
    if executor is None:
        rows = _in_order(model, memory, keys, precision, workers)
    else:
        futs = [executor.submit(fit_config, model, b, t, par.to_dict(), precision, memory,
                                workers) for par, t, b in keys]
        rows = _as_ordered([f.result() for f in futs], keys)
    by_w: dict[str, dict[str, Any]] = {}
    for par in settings:
        mine = [r for r in rows if r["world_size"] == par.world_size]
        by_w[str(par.world_size)] = _largest(mine)
    first = str(settings[0].world_size)
    return {"model": model, "memory_bytes": memory, "precision": precision,
            "parallel": settings[0].kind, "configs": rows, "largest": by_w[first],
            "largest_by_world_size": by_w}


def _in_order(model: str, memory: int, keys: Sequence[tuple[ParallelSetting, int | None, int]],
              precision: str, workers: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    alive: set[str] = set()
    group: tuple[int, int | None] | None = None
    for par, t, b in keys:
        if (par.world_size, t) != group:
            group, alive = (par.world_size, t), set(METHODS)
        if not alive:
            continue
        row = fit_config(model, b, t, par.to_dict(), precision, memory, workers)
        rows.append(row)
        alive -= {m for m in METHODS if not row["fits"][m]}
    return rows


def _as_ordered(results: Sequence[dict[str, Any]],
                keys: Sequence[tuple[ParallelSetting, int | None, int]]) -> list[dict[str, Any]]:
    """The rows the ordered sweep computes: none after every method stopped fitting."""
    rows: list[dict[str, Any]] = []
    alive: set[str] = set()
    group: tuple[int, int | None] | None = None
    for (par, t, _), row in zip(keys, results, strict=True):
        if (par.world_size, t) != group:
            group, alive = (par.world_size, t), set(METHODS)
        if not alive:
            continue
        rows.append(row)
        alive -= {m for m in METHODS if not row["fits"][m]}
    return rows


def _largest(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per method, the configuration with the most tokens that fits (with every smaller
    batch of its sequence length fitting too)."""
    largest: dict[str, Any] = dict.fromkeys(METHODS)
    alive: dict[Any, set[str]] = {}
    for row in rows:
        ok = alive.setdefault(row["seq_len"], set(METHODS))
        for m in METHODS:
            if not row["fits"][m]:
                ok.discard(m)
            if m in ok:
                cur = largest[m]
                tok = row["batch_size"] * (row["seq_len"] or 1)
                if cur is None or tok > cur["batch_size"] * (cur["seq_len"] or 1):
                    largest[m] = {"batch_size": row["batch_size"], "seq_len": row["seq_len"]}
    return largest
