"""``roam execute GRAPH PLAN``: run a plan for real and compare it with eager PyTorch.

Module-level imports stay light; torch is imported inside the handler.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from roam_core.commands.arg_types import positive_int, seed_int

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``execute`` sub-command."""
    p = subparsers.add_parser(
        "execute", help="run a plan in one arena and compare with eager PyTorch",
        description="Rebuild the zoo or Hugging Face model a graph was traced from (its "
                    "origin), re-trace it on the device in its precision, "
                    "replay the plan's order with every tensor at its planned offset in one "
                    "arena, and compare loss, parameters and optimizer state with an eager "
                    "step. On CUDA, peak memory of both is measured in fresh processes.")
    p.add_argument("graph", help="graph file (.json or .json.gz) from `roam trace`")
    p.add_argument("plan", help="plan file (JSON) for that graph")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run (default cpu: numerics only, no allocator peaks)")
    p.add_argument("--steps", type=positive_int, default=1,
                   help="measured steps after the first (numerics) step (default 1)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of both runs (default 0)")
    p.add_argument("--accumulate-plan", default=None, metavar="P2",
                   help="a graph traced with --accumulation-steps K: the plan of its first "
                        "K-1 micro-batches (traced with --accumulate-only); default: made "
                        "here by the default planner")
    p.add_argument("--no-address-check", action="store_true",
                   help="skip the per-op address check (faster on big graphs)")
    p.add_argument("-o", "--output", required=True, help="report JSON to write")
    p.add_argument("--snapshot", default=None,
                   help="also write the plan as a PyTorch memory snapshot (.pickle) for "
                        "https://pytorch.org/memory_viz")
    p.add_argument("--measured-snapshots", default=None, metavar="DIR",
                   help="CUDA: also record eager.pickle and planned.pickle memory snapshots "
                        "of one step each into DIR")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from roam_core.base.atomic import atomic_write, check_output_dir, check_output_path
    from roam_core.base.errors import ExecutorError
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import load_plan
    from roam_core.runtime.plan_checks import require_valid

    out = Path(args.output)
    if out.parent != Path():  # the report's directory is made if missing (as it always was)
        check_output_dir(out.parent, "-o/--output directory")
    check_output_path(out, "-o/--output")
    if args.snapshot:
        check_output_path(args.snapshot, "--snapshot")
    if args.measured_snapshots:
        check_output_dir(args.measured_snapshots, "--measured-snapshots")
    graph = load_graph(args.graph)
    plan = load_plan(args.plan, graph=graph)
    require_valid(graph, plan)  # `roam check`'s rules: a plan it rejects never runs
    # checked against the accumulate micro-batch's graph once it is traced (execute_origin)
    acc = load_plan(args.accumulate_plan) if args.accumulate_plan else None
    if graph.origin.get("source") not in ("zoo", "hf"):
        raise ExecutorError(
            f"{args.graph} was traced from a custom model ({graph.origin.get('model', '?')}): "
            "the CLI can only rebuild zoo models and Hugging Face configs; use the Python "
            "API roam_core.execute_plan(model, example_inputs, plan, ...)")
    if args.snapshot:
        from roam_core.formats.snapshot import save_plan_snapshot

        save_plan_snapshot(args.snapshot, graph, plan)
        print(f"plan snapshot -> {args.snapshot}", file=sys.stderr)

    from roam_core.runtime import resolve_device
    from roam_core.runtime.origin import execute_origin

    resolve_device(args.device)  # fails fast (exit 2) without CUDA
    print(f"executing {graph.name} ({len(graph)} ops) on {args.device} ...", file=sys.stderr,
          flush=True)
    t0 = time.perf_counter()
    report = execute_origin(graph.origin, plan, device=args.device, steps=args.steps,
                            check_addresses=not args.no_address_check, seed=args.seed,
                            snapshot_dir=args.measured_snapshots, accumulate_plan=acc)
    body = report.to_dict() | {"graph": graph.name, "graph_fingerprint": graph.fingerprint(),
                               "plan_method": plan.method,
                               "wall_time_s": round(time.perf_counter() - t0, 3)}
    atomic_write(out, json.dumps(body, indent=2) + "\n", what="report JSON")
    print(report.summary())
    print(f"report -> {out}", file=sys.stderr)
    return 0 if report.numerics_ok else 1
