"""The data-parallel options shared by ``roam trace``, ``train`` and ``fit``.

``--parallel fsdp|ddp --world-size W [--reshard-after-forward true|false] [--fsdp-wrap
blocks|leaves|root]`` (``docs/parallel.md``).  The precision is the model options'
``--precision`` (:mod:`roam_core.commands.model_args`): a rank traces in ``fp32`` and, with
``fsdp``, ``bf16-mixed`` (FSDP2's ``MixedPrecisionPolicy``); other precisions are refused
by the tracer with a one-line error.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from roam_core.commands.arg_types import positive_int
from roam_core.model.parallel import PARALLEL_KINDS, WRAP_POLICIES, ParallelSetting

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["add_parallel_args", "parallel_setting", "true_false", "world_sizes"]


def true_false(text: str) -> bool:
    """argparse type: ``true`` or ``false``."""
    v = text.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def add_parallel_args(p: argparse.ArgumentParser, *,
                      world_sizes: bool = False) -> None:
    """Add the options; ``world_sizes``: ``--world-size`` takes several values (a sweep)."""
    g = p.add_argument_group("data parallelism (the step of one rank; docs/parallel.md)")
    g.add_argument("--parallel", choices=PARALLEL_KINDS, default="none",
                   help="fsdp (FSDP2 fully_shard per block and the root) or ddp "
                        "(DistributedDataParallel); default none (one device)")
    if world_sizes:
        g.add_argument("--world-size", type=positive_int, nargs="+", default=[1],
                       metavar="W", help="ranks in the world (several: one row each)")
    else:
        g.add_argument("--world-size", type=positive_int, default=1, metavar="W",
                       help="ranks in the world (default 1)")
    g.add_argument("--reshard-after-forward", type=true_false, default=True,
                   metavar="true|false",
                   help="fsdp: free each block's gathered parameters after its forward "
                        "(default true, FSDP2's default)")
    g.add_argument("--fsdp-wrap", choices=WRAP_POLICIES, default="blocks",
                   help="fsdp units: blocks (each repeated block, e.g. the transformer "
                        "layers, and the root; default), leaves (every module with "
                        "parameters), root (one unit)")


def parallel_setting(args: argparse.Namespace, world_size: int | None = None) -> ParallelSetting:
    """The :class:`ParallelSetting` of parsed options (``world_size`` overrides the option).

    Raises
    ------
    ConfigError
        Inconsistent options (a world size above 1 without ``--parallel``...).
    """
    w = world_size if world_size is not None else args.world_size
    if isinstance(w, list):
        w = w[0]
    if args.parallel == "none":
        return ParallelSetting("none", int(w))
    return ParallelSetting(args.parallel, int(w), args.reshard_after_forward, args.fsdp_wrap)


def world_sizes(args: argparse.Namespace) -> Sequence[int]:
    """The ``--world-size`` values as a list."""
    w = args.world_size
    return list(w) if isinstance(w, list) else [int(w)]
