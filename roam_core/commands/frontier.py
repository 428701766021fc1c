"""``roam frontier GRAPH [--budgets N] --json``: memory against extra FLOPs, roam and baselines.

roam is planned at ``N`` budgets between the lowest peak it reaches and the plan without
recomputation (plus each baseline's memory, so that every baseline has a roam point at the
same memory); the checkpointing baselines (every block, every 2nd block, sqrt(n) segments,
``checkpoint_sequential``, selective attention core) are applied to the same graph by its
module structure and planned by the same order and layout stages.  ``--json`` prints one
object ``{"graph", "step_flops", "resident_bytes", "points": [{"method", "peak_bytes",
"extra_flops", "budget_bytes", "recomputed_ops"}], "notes"}``; ``--plans DIR`` writes every
plan.  ``peak_bytes`` is the plan's arena (resident bytes included).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands import positive_int

__all__ = ["frontier_dict", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``frontier`` sub-command."""
    p = subparsers.add_parser(
        "frontier", help="memory vs extra FLOPs: roam's recomputation frontier and baselines",
        description="Plan the graph at several memory budgets with recomputation and score "
                    "the checkpointing baselines on the same graph.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("--budgets", type=positive_int, default=8, metavar="N",
                   help="roam budgets, evenly spaced (default 8)")
    p.add_argument("--no-baselines", action="store_true", help="roam points only")
    p.add_argument("--plans", default=None, metavar="DIR",
                   help="write every plan to DIR/<label>.json")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="worker processes per plan (default 1)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="CP-SAT seconds per ordering sub-task (default 5)")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help=EXECUTOR_HELP + "; every budget's plan uses it")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_run)


def frontier_dict(graph: object, config: object, budgets: int = 8, baselines: bool = True,
                  plans: dict | None = None, executor: Any = None) -> dict:
    """The object ``roam frontier --json`` prints (``executor``: where each plan's sub-task
    solves run, see :func:`roam_core.base.executors.open_executor`)."""
    from roam_core.planner import make_plan
    from roam_core.planner.budget import recompute_frontier

    sf, points, notes = recompute_frontier(graph, config, make_plan=make_plan,  # type: ignore[arg-type]
                                           budgets=budgets, baselines=baselines, plans=plans,
                                           executor=executor)
    return {
        "graph": graph.name,  # type: ignore[attr-defined]
        "step_flops": sf,
        "resident_bytes": graph.resident_bytes(),  # type: ignore[attr-defined]
        "points": [{"method": p.method, "peak_bytes": p.peak_bytes,
                    "extra_flops": p.extra_flops, "budget_bytes": p.budget_bytes,
                    "recomputed_ops": p.recomputed_ops} for p in points],
        "notes": notes,
    }


def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from roam_core.base.config import PlannerConfig
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.base.units import format_bytes
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import save_plan

    spec = parse_executor(args.executor)  # a bad spec fails before the graph is read
    graph = load_graph(args.graph)
    cfg = PlannerConfig(workers=args.workers)
    if args.time_limit is not None:
        cfg = cfg.with_order(time_limit_s=args.time_limit)
    cfg = replace(cfg)
    plans: dict = {} if args.plans else None  # type: ignore[assignment]
    with open_executor(spec, cpsat_threads=cfg.order.num_search_workers) as executor:
        d = frontier_dict(graph, cfg, args.budgets, not args.no_baselines, plans, executor)
    if args.plans:
        os.makedirs(args.plans, exist_ok=True)
        for label, plan in plans.items():
            save_plan(plan, os.path.join(args.plans, f"{label}.json"))
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    sf = d["step_flops"] or 1
    print(f"{d['graph']}: step {sf / 1e9:.1f} GFLOP, resident {format_bytes(d['resident_bytes'])}")
    for p in sorted(d["points"], key=lambda p: (p["method"] != "roam", -p["peak_bytes"])):
        print(f"  {p['method']:<22} {format_bytes(p['peak_bytes']):>12}  "
              f"+{100 * p['extra_flops'] / sf:6.2f}% FLOPs  ({p['recomputed_ops']} re-runs)")
    for n in d["notes"]:
        print(f"  note: {n}")
    return 0
