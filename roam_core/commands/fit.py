"""``roam fit MODEL --memory SIZE [--batch-sizes ...] [--seq-lens ...] --json``: what fits.

For a zoo model (steady setting), every batch size (and sequence length) is traced and
checked against the memory ``SIZE`` four ways: PyTorch eager's reserved memory (the caching
allocator model), roam without recomputation (its arena), and roam with recomputation
limited to at most 5% and 25% extra FLOPs (the cheapest plan whose arena fits ``SIZE``;
it counts if its extra FLOPs stay within the limit).  Batch sizes are tried in increasing
order; a method that stops fitting is not tried on larger batches.  ``--json`` prints
``{"model", "memory_bytes", "configs": [...], "largest": {method: {"batch_size",
"seq_len"} | null}}``.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands.arg_types import positive_int, size_bytes

if TYPE_CHECKING:  # commands import quickly: the planner and torch only when run
    import concurrent.futures as cf

    from roam_core.model.graph import Graph
    from roam_core.planner.config import PlannerConfig

__all__ = ["METHODS", "fit_dict", "register"]

#: The methods compared, in report order.
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fit`` sub-command."""
    p = subparsers.add_parser(
        "fit", help="largest batch (and sequence length) that fits a memory size",
        description="Trace a zoo model at several batch sizes and report the largest that "
                    "fits in SIZE for eager PyTorch (reserved), roam, and roam with "
                    "recomputation at <= 5% and <= 25% extra FLOPs.")
    p.add_argument("model", help="zoo model name (see `roam trace --list`)")
    p.add_argument("--memory", type=size_bytes, required=True, metavar="SIZE",
                   help="device memory, e.g. 80GiB")
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 2, 4, 8, 16, 32],
                   metavar="B")
    p.add_argument("--seq-lens", type=positive_int, nargs="+", default=None, metavar="T",
                   help="sequence lengths (token models; default: the model's)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help=EXECUTOR_HELP + "; every plan of the sweep uses it")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_run)


def _check(graph: Graph, memory: int, cfg: PlannerConfig,
           executor: cf.Executor | None = None) -> dict[str, Any]:
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


def fit_dict(model: str, memory: int, batch_sizes: list[int], seq_lens: list[int] | None,
             workers: int = 1, executor: cf.Executor | None = None) -> dict[str, Any]:
    """The object ``roam fit --json`` prints (``executor``: where each plan's sub-task solves
    run, see :func:`roam_core.base.executors.open_executor`)."""
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    cfg = PlannerConfig(workers=workers)
    configs: list[dict[str, Any]] = []
    largest: dict[str, Any] = dict.fromkeys(METHODS)
    lengths: list[int | None] = list(seq_lens) if seq_lens else [None]
    for t in lengths:
        alive = set(METHODS)
        for b in sorted(batch_sizes):
            if not alive:
                break
            g = trace_zoo(model, b, t, "steady").graph
            row = {"batch_size": b, "seq_len": g.origin.get("seq_len"),
                   **_check(g, memory, cfg, executor)}
            configs.append(row)
            for m in METHODS:
                if row["fits"][m] and m in alive:
                    cur = largest[m]
                    tok = b * (row["seq_len"] or 1)
                    if cur is None or tok > cur["batch_size"] * (cur["seq_len"] or 1):
                        largest[m] = {"batch_size": b, "seq_len": row["seq_len"]}
                elif not row["fits"][m]:
                    alive.discard(m)
    return {"model": model, "memory_bytes": memory, "configs": configs, "largest": largest}


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.base.units import format_bytes

    spec = parse_executor(args.executor)  # a bad spec fails before any tracing
    with open_executor(spec) as executor:
        d = fit_dict(args.model, args.memory, args.batch_sizes, args.seq_lens, args.workers,
                     executor)
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    print(f"{args.model} in {format_bytes(args.memory)}:")
    for m in METHODS:
        best = d["largest"][m]
        what = "nothing fits" if best is None else (
            f"batch {best['batch_size']}" + (f", seq {best['seq_len']}" if best["seq_len"]
                                             else ""))
        print(f"  {m:<22} {what}")
    return 0
