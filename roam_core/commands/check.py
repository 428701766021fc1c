"""``roam check GRAPH PLAN``: run the independent validator on a plan file.

Exit status 0 with a one-line summary when the plan is valid for the graph; 1 with one line
per violation (kind, id, message) otherwise; 2 for files that cannot be read (dispatcher).
"""

from __future__ import annotations

import argparse

from roam_core.commands.arg_types import non_negative_int

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``check`` sub-command."""
    p = subparsers.add_parser(
        "check", help="validate a plan file against its graph",
        description="Check a plan with the independent validator: it was made for this graph "
                    "(fingerprint), its order is a valid execution order, and its arena layout "
                    "gives every storage an aligned offset with no two co-live storages "
                    "sharing bytes.  Exit 0 when valid, 1 with every violation listed.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("plan", help="plan file (.json or .json.gz)")
    p.add_argument("--max-lines", type=non_negative_int, default=200,
                   help="list at most this many violations (default 200)")
    p.set_defaults(func=_run)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _run(args: argparse.Namespace) -> int:
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import load_plan
    from roam_core.oracle.validate import check_plan

    graph = load_graph(args.graph)
    plan = load_plan(args.plan)
    violations = check_plan(graph, plan)
    if not violations:
        frag = plan.fragmentation * 100
        print(f"OK: {plan.method} plan for {graph.name} ({graph.fingerprint()[:12]}): "
              f"{len(plan.order)} ops, {len(plan.offsets)} storages, arena "
              f"{_mib(plan.arena_bytes)}, planned peak {_mib(plan.planned_peak_bytes)}, "
              f"fragmentation {frag:.3f}%")
        return 0
    print(f"INVALID: {len(violations)} violation(s) of plan {args.plan} for {graph.name}")
    for v in violations[: max(0, args.max_lines)]:
        print(f"{v.kind.value}\t{v.subject_id}\t{v.message}")
    if len(violations) > args.max_lines:
        print(f"... {len(violations) - args.max_lines} more")
    return 1
