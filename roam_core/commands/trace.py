"""``roam trace MODEL``: trace a zoo model's training step and save the graph (gzip JSON).

Module-level imports stay light; torch and the zoo are imported inside the handler.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from roam_core.commands.parallel_args import add_parallel_args, parallel_setting

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``trace`` sub-command."""
    p = subparsers.add_parser(
        "trace", help="trace a zoo model's training step into a graph file",
        description="Trace one training step (forward, loss, backward, optimizer update) of a "
                    "zoo model with fake tensors (no real memory) and save the graph.")
    p.add_argument("model", help="zoo model name, e.g. gpt2, gpt2-xl, mobilenet_v2, "
                                 "roberta-base, mlp, tiny_gpt")
    p.add_argument("--batch-size", "-b", type=int, required=True, help="samples per step")
    p.add_argument("--seq-len", "-t", type=int, default=None,
                   help="tokens per sample (token models; default per model)")
    p.add_argument("--setting", choices=("steady", "roam"), default="steady",
                   help="steady: optimizer state resident, real loss (default); roam: the "
                        "ROAM paper's setting (first Adam step, CE vs zeros)")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default=None,
                   help="default: adamw (steady), adam lr 0.1 wd 1e-4 (roam)")
    p.add_argument("--attention", choices=("sdpa", "math"), default=None,
                   help="attention implementation of the transformers (default: math in "
                        "the roam setting, like the paper; sdpa in steady)")
    p.add_argument("--device", default="cpu",
                   help="device of the fake tensors (default cpu; cuda needs a GPU machine)")
    p.add_argument("-o", "--output", default=None,
                   help="output file (.json or .json.gz; default <graph name>.json.gz)")
    add_parallel_args(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.errors import TraceError
    from roam_core.formats.graph_io import save_graph
    from roam_core.zoo import ZOO, trace_zoo

    if args.model not in ZOO:
        raise TraceError(f"unknown model {args.model!r}; choose one of: {', '.join(ZOO)}")
    par = parallel_setting(args)
    what = f"{args.model} (batch {args.batch_size}, {args.setting}"
    what += f", one rank of {par.describe()})" if par.active else ")"
    print(f"tracing {what} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    ts = trace_zoo(args.model, args.batch_size, args.seq_len, args.setting, args.optimizer,
                   attention=args.attention, device=args.device, parallel=par,
                   precision=args.precision)
    g = ts.graph
    out = args.output or f"{g.name}.json.gz"
    save_graph(g, out)
    dt = time.perf_counter() - t0
    print(f"tracing {what} ... done in {dt:.1f} s: {len(g)} ops, {len(g.tensors)} storages "
          f"-> {out}", file=sys.stderr)
    return 0
