"""``roam trace MODEL`` / ``roam trace --hf-config CONFIG.json``: trace a training step and
save the graph (gzip JSON).

Module-level imports stay light; torch, the zoo and transformers are imported in the handler.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from roam_core.commands.arg_types import positive_float, positive_int
from roam_core.commands.model_args import add_model_args, model_source
from roam_core.commands.parallel_args import add_parallel_args, parallel_setting

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``trace`` sub-command."""
    p = subparsers.add_parser(
        "trace", help="trace a zoo or Hugging Face model's training step into a graph file",
        description="Trace one training step (forward, loss, backward, optimizer update) of a "
                    "zoo model, or of any Hugging Face model built from its config.json with "
                    "no weights, with fake tensors (no real memory) and save the graph. The "
                    "graph records how it was made (origin: model or config, precision, "
                    "attention), so `roam execute` and `roam train` rebuild it.")
    add_model_args(p)
    p.add_argument("--batch-size", "-b", type=positive_int, default=1,
                   help="samples per step (default 1)")
    p.add_argument("--seq-len", "-t", type=positive_int, default=None,
                   help="tokens per sample (token models; default per zoo model, 128 for "
                        "--hf-config)")
    p.add_argument("--setting", choices=("steady", "roam"), default="steady",
                   help="steady: optimizer state resident, real loss (default); roam: the "
                        "ROAM paper's setting (first Adam step, CE vs zeros)")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default=None,
                   help="default: adamw (steady), adam lr 0.1 wd 1e-4 (roam)")
    p.add_argument("--device", default="cpu",
                   help="device of the fake tensors (default cpu; cuda needs a GPU machine)")
    p.add_argument("-o", "--output", default=None,
                   help="output file (.json or .json.gz; default <graph name>.json.gz)")
    p.add_argument("--accumulation-steps", type=positive_int, default=1, metavar="K",
                   help="gradient accumulation: trace the k-th micro-batch of K (backward of "
                        "loss / K into resident accumulators, then the update); `roam "
                        "execute` runs one optimizer step of K micro-batches (default 1)")
    p.add_argument("--accumulate-only", action="store_true",
                   help="with --accumulation-steps K: trace the first K-1 micro-batches' "
                        "step instead (backward into the accumulators, no update), to plan "
                        "it for `roam execute --accumulate-plan`")
    p.add_argument("--max-grad-norm", type=positive_float, default=None, metavar="N",
                   help="clip the gradients' total norm to N before the update (as "
                        "clip_grad_norm_)")
    p.add_argument("--merge-casts", action="store_true",
                   help="make autocast's repeated casts of one activation once (bit-identical "
                        "values, fewer bytes than eager; recorded in the graph, so `roam "
                        "execute` rebuilds the merged step); off by default")
    add_parallel_args(p)
    p.set_defaults(func=_run)


#: Tokens per sample of an --hf-config model when --seq-len is not given.
HF_DEFAULT_SEQ_LEN = 128


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.atomic import check_output_path
    from roam_core.base.errors import ConfigError
    from roam_core.formats.graph_io import save_graph
    from roam_core.trace.step_spec import StepSpec

    if args.accumulate_only and args.accumulation_steps < 2:
        raise ConfigError("--accumulate-only traces a micro-batch that only accumulates: "
                          "it needs --accumulation-steps 2 or more")
    source = model_source(args)
    par = parallel_setting(args)
    if args.output:
        check_output_path(args.output, "-o/--output")
    seq = args.seq_len or (HF_DEFAULT_SEQ_LEN if source.hf_config else None)
    what = f"{source.label} (batch {args.batch_size}, {args.setting}, {args.precision}"
    what += ", casts merged" if args.merge_casts else ""
    what += f", one rank of {par.describe()})" if par.active else ")"
    print(f"tracing {what} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    ts = source.trace(args.batch_size, seq, setting=args.setting, optimizer=args.optimizer,
                      precision=args.precision, attention=args.attention, device=args.device,
                      parallel=par, spec=StepSpec(args.max_grad_norm, args.accumulation_steps,
                                   not args.accumulate_only),
                      merge_casts=args.merge_casts)
    g = ts.graph
    out = args.output or f"{g.name}.json.gz"
    save_graph(g, out)
    dt = time.perf_counter() - t0
    print(f"tracing {what} ... done in {dt:.1f} s: {len(g)} ops, {len(g.tensors)} storages "
          f"-> {out}", file=sys.stderr)
    return 0
