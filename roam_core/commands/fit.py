"""``roam fit MODEL --memory SIZE [--batch-sizes ...] [--seq-lens ...] --json``: what fits.

For a zoo model (steady setting), every batch size (and sequence length) is traced and
checked against the memory ``SIZE`` four ways: PyTorch eager's reserved memory (the caching
allocator model), roam without recomputation (its arena), and roam with recomputation
limited to at most 5% and 25% extra FLOPs (the cheapest plan whose arena fits ``SIZE``;
it counts if its extra FLOPs stay within the limit).  Batch sizes are tried in increasing
order; a method that stops fitting is not tried on larger batches.  ``--json`` prints
``{"model", "memory_bytes", "configs": [...], "largest": {method: {"batch_size",
"seq_len"} | null}, "largest_by_world_size": {W: ...}}``.  With ``--parallel fsdp|ddp
--world-size W [W ...]`` each configuration is the step of one rank and ``SIZE`` is the
memory of one device.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands.arg_types import positive_int, size_bytes
from roam_core.commands.parallel_args import add_parallel_args, parallel_setting, world_sizes
from roam_core.model.parallel import ParallelSetting

if TYPE_CHECKING:  # commands import quickly: the planner and torch only when run
    import concurrent.futures as cf
    from collections.abc import Sequence

__all__ = ["METHODS", "fit_dict", "register"]

#: The methods compared, in report order (:data:`roam_core.zoo.fit_sweep.METHODS`).
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
                   help=EXECUTOR_HELP + "; with a Dask executor every configuration of the "
                        "sweep is one task on it")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_parallel_args(p, world_sizes=True)
    p.set_defaults(func=_run)


def fit_dict(model: str, memory: int, batch_sizes: list[int], seq_lens: list[int] | None,
             workers: int = 1, executor: cf.Executor | None = None,
             settings: Sequence[ParallelSetting] | None = None,
             precision: str = "fp32") -> dict[str, Any]:
    """The object ``roam fit --json`` prints (:func:`roam_core.zoo.fit_sweep.fit_sweep`;
    ``executor``: where the configurations run, see
    :func:`roam_core.base.executors.open_executor`)."""
    from roam_core.zoo.fit_sweep import fit_sweep

    return fit_sweep(model, memory, batch_sizes, seq_lens, settings or [ParallelSetting()],
                     precision, workers, executor)


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.base.units import format_bytes

    spec = parse_executor(args.executor)  # a bad spec fails before any tracing
    settings = [parallel_setting(args, w) for w in world_sizes(args)]
    with open_executor(spec) as executor:
        d = fit_dict(args.model, args.memory, args.batch_sizes, args.seq_lens, args.workers,
                     executor, settings, args.precision)
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    for par in settings:
        where = "" if not par.active else f" per rank ({par.describe()})"
        print(f"{args.model} in {format_bytes(args.memory)}{where}:")
        for m in METHODS:
            best = d["largest_by_world_size"][str(par.world_size)][m]
            what = "nothing fits" if best is None else (
                f"batch {best['batch_size']}" + (f", seq {best['seq_len']}" if best["seq_len"]
                                                 else ""))
            print(f"  {m:<22} {what}")
    return 0
