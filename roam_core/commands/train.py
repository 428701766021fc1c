"""``roam train MODEL`` / ``roam train --hf-config CONFIG.json``: train a model eagerly and
with a plan, and compare.

Module-level imports stay light; torch is imported inside the handler.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING

from roam_core.commands.arg_types import positive_float, positive_int
from roam_core.commands.model_args import add_model_args, model_source
from roam_core.commands.parallel_args import add_parallel_args, parallel_setting

if TYPE_CHECKING:
    from roam_core.model.parallel import ParallelSetting
    from roam_core.model.plan import Plan
    from roam_core.zoo.sources import ModelSource

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``train`` sub-command."""
    p = subparsers.add_parser(
        "train", help="train a zoo or Hugging Face model eagerly and with PlannedStep, and "
                      "compare",
        description="Build a zoo model (or a Hugging Face model from its config.json, "
                    "with a seeded init), trace its steady training step in the chosen "
                    "precision, plan it (unless "
                    "--plan is given), then train N steps eagerly and with "
                    "roam_core.PlannedStep from identical weights on the same synthetic "
                    "batches (fixed seed). Prints the numerics (max |diff| over every loss "
                    "and the final parameters), median step times (interleaved on CPU) and, "
                    "on CUDA, peak memory of both loops. Exit status 1 when the numerics "
                    "differ (bit-equality on CPU). With --parallel fsdp|ddp --world-size W "
                    "(CPU): W gloo ranks on 127.0.0.1 each run the planned step of one rank "
                    "beside torch's fully_shard / DistributedDataParallel from the same "
                    "weights, on their own batches; max |diff| per rank.")
    add_model_args(p)
    p.add_argument("--batch-size", "-b", type=positive_int, default=2,
                   help="samples per step (default 2)")
    p.add_argument("--seq-len", "-t", type=positive_int, default=None,
                   help="tokens per sample (token models; default per model)")
    p.add_argument("--setting", choices=("steady", "roam"), default="steady",
                   help="loss and optimizer of the zoo setting (default steady); the step "
                        "is always traced steady (warm optimizer state), as a loop repeats it")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default=None,
                   help="default: adamw (steady), adam lr 0.1 wd 1e-4 (roam)")
    p.add_argument("--steps", type=positive_int, default=5, help="training steps (default 5)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to train (default cpu)")
    p.add_argument("--plan", default=None, metavar="PLAN.json",
                   help="plan for the steady graph of this configuration (`roam trace "
                        "--setting steady` + `roam plan`); default: plan it here")
    p.add_argument("--method", default="roam",
                   help="planning method when no --plan is given (default roam)")
    p.add_argument("--time-limit", type=positive_float, default=30.0, metavar="S",
                   help="planner budget in seconds when no --plan is given (default 30)")
    p.add_argument("--max-grad-norm", type=positive_float, default=None, metavar="N",
                   help="clip the gradients' total norm (in the plan; clip_grad_norm_ in the "
                        "eager loop)")
    p.add_argument("--accumulation-steps", type=positive_int, default=1, metavar="K",
                   help="micro-batches per optimizer step (default 1); --steps counts updates")
    p.add_argument("--other-batch-size", type=positive_int, default=None, metavar="B",
                   help="every third micro-batch has this batch size (the planned step plans "
                        "the shape on first use)")
    p.add_argument("--merge-casts", action="store_true",
                   help="trace, plan and run the planned step with autocast's repeated casts "
                        "of one activation made once (as `roam trace --merge-casts`; the "
                        "eager loop makes every cast; numerics still compared bit for bit)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and batches")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_parallel_args(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.units import format_bytes
    from roam_core.runtime import resolve_device
    from roam_core.runtime.compare_training import compare_training
    choice = model_source(args)
    resolve_device(args.device)  # fails fast (exit 2) without CUDA
    par = parallel_setting(args)
    plan = None
    if args.plan:
        from roam_core.formats.plan_io import load_plan

        plan = load_plan(args.plan)
    if par.active:
        return _run_ranks(args, choice, par, plan)
    print(f"roam train: {choice.label} batch {args.batch_size}, {args.steps} steps on "
          f"{args.device} ({args.precision}{', casts merged' if args.merge_casts else ''}) ...",
          file=sys.stderr, flush=True)
    seq = args.seq_len or (32 if choice.hf_config else None)
    r = compare_training(args.model, args.batch_size, seq, setting=args.setting,
                         optimizer=args.optimizer, steps=args.steps, device=args.device,
                         plan=plan, method=args.method, planner_time_limit_s=args.time_limit,
                         seed=args.seed, precision=args.precision, attention=args.attention,
                         hf_config=choice.hf_config, hf_task=choice.hf_task,
                         hf_overrides=dict(choice.hf_overrides), max_grad_norm=args.max_grad_norm,
                         accumulation_steps=args.accumulation_steps,
                         other_batch_size=args.other_batch_size, merge_casts=args.merge_casts)
    if args.json:
        print(json.dumps(r, sort_keys=True))
    else:
        def b(x: int | None) -> str:
            return "n/a" if x is None else format_bytes(x)

        print(f"{r['graph']}: {r['steps']} steps on {r['device_name']}, plan {r['plan_method']}")
        print(f"  numerics        max |eager - planned| = {r['max_abs_diff']:.3g} "
              f"({'ok' if r['numerics_ok'] else 'MISMATCH'})")
        print(f"  loss            {r['losses_eager'][0]:.6g} -> {r['losses_eager'][-1]:.6g}")
        print(f"  step time       eager {r['eager_step_seconds'] * 1e3:.1f} ms, planned "
              f"{r['planned_step_seconds'] * 1e3:.1f} ms ({r['timing']}, medians)")
        print(f"  arena           {b(r['arena_bytes'])} (plans: {r['plans']}, the step holds "
              f"{b(r['step_bytes'])})")
        print(f"  peak reserved   eager {b(r['eager_peak_reserved_bytes'])}, planned "
              f"{b(r['planned_peak_reserved_bytes'])}")
    return 0 if r["numerics_ok"] else 1


def _run_ranks(args: argparse.Namespace, choice: ModelSource, par: ParallelSetting,
               plan: Plan | None) -> int:
    from roam_core.base.errors import ConfigError, ExecutorError
    from roam_core.runtime.rank_launch import compare_parallel_training

    if args.device != "cpu":
        raise ExecutorError("--parallel runs its ranks on CPU over gloo here: use --device cpu")
    # what the rank runner does not pass on is refused, never silently dropped
    unsupported = [flag for flag, given in (
        ("--hf-config", choice.hf_config is not None), ("--attention", args.attention is not None),
        ("--max-grad-norm", args.max_grad_norm is not None),
        ("--accumulation-steps", args.accumulation_steps > 1),
        ("--other-batch-size", args.other_batch_size is not None),
        ("--merge-casts", args.merge_casts)) if given]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} with --parallel {par.kind} is not "
                          "supported in this version")
    print(f"roam train: {args.model} batch {args.batch_size} per rank, {args.steps} steps, "
          f"{par.describe()} on CPU (gloo, 127.0.0.1) ...", file=sys.stderr, flush=True)
    r = compare_parallel_training(
        args.model, args.batch_size, args.seq_len, parallel=par,
        precision=args.precision, setting=args.setting, optimizer=args.optimizer,
        steps=args.steps, plan=plan, method=args.method,
        planner_time_limit_s=args.time_limit, seed=args.seed)
    if args.json:
        print(json.dumps(r, sort_keys=True))
    else:
        print(f"{r['graph']}: {r['steps']} steps on {r['world_size']} CPU ranks, plan "
              f"{r['plan_method']}, arena {r['arena_bytes']} B per rank")
        for rank in r["ranks"]:
            print(f"  rank {rank['rank']}  max |eager - planned| = {rank['max_abs_diff']:.3g}"
                  f"  loss {rank['losses_eager'][0]:.6g} -> {rank['losses_eager'][-1]:.6g}")
        print(f"  numerics        {'ok' if r['numerics_ok'] else 'MISMATCH'}")
    return 0 if r["numerics_ok"] else 1
