"""``roam frontier GRAPH [--budgets N] --json``: memory against extra FLOPs, roam and baselines.

roam is planned at ``N`` budgets between the lowest peak it reaches and the plan without
recomputation (plus each baseline's memory, so that every baseline has a roam point at the
same memory); the checkpointing baselines (every block, every 2nd block, sqrt(n) segments,
``checkpoint_sequential``, selective attention core) are applied to the same graph by its
module structure and planned by the same order and layout stages.  For a zoo graph, torch's
own min-cut partitioner (AOT autograd's ``min_cut_rematerialization_partition``) is run on
the model at each ``--min-cut-budgets`` value of ``activation_memory_budget`` and its
decision is mapped onto the graph (methods ``torch_min_cut_<budget>``;
:mod:`roam_core.trace.min_cut`).  ``--json`` prints one object ``{"graph", "step_flops",
"resident_bytes", "points": [{"method", "peak_bytes", "extra_flops", "budget_bytes",
"recomputed_ops", "extra_bytes_moved", "kept", "search_extra_flops",
"search_extra_bytes_moved"}], "torch_min_cut", "notes"}`` (``kept``: which candidate of
roam's portfolio a roam point comes from; ``search_*``: roam's own search alone at that
budget); ``torch_min_cut``
holds, per budget, what the partitioner itself decided (``saved_bytes``,
``recomputed_nodes``, ...) or why it does not apply.  ``--plans DIR`` writes every plan.
``peak_bytes`` is the plan's arena (resident bytes included).  roam's objective is FLOPs +
``--bytes-weight`` x bytes moved (default 1); where a candidate of its portfolio that fits has
fewer extra FLOPs than the objective's pick (it moves more bytes), it is planned too and added
as a second roam point (``kept``: ``"<candidate>, fewest FLOPs"``), so the roam points hold a
frontier in (peak, FLOPs) as well as in (peak, FLOPs + bytes moved).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands.arg_types import non_negative_float, positive_int

if TYPE_CHECKING:  # commands import quickly: torch, OR-Tools and the planner only when run
    import concurrent.futures as cf

    from roam_core.model.graph import Graph, TensorId
    from roam_core.model.plan import Plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.trace.min_cut import MinCutResult
    from roam_core.trace.traced_step import TracedStep

__all__ = ["frontier_dict", "min_cut_record", "register"]

#: Default ``activation_memory_budget`` values (mirrors
#: :data:`roam_core.trace.min_cut.MIN_CUT_BUDGETS`; torch is imported only when used).
MIN_CUT_BUDGETS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
#: Why the min-cut baseline does not apply to a graph that is not a zoo trace (mirrors
#: :data:`roam_core.zoo.min_cut.NOT_ZOO`).
NOT_ZOO = ("the graph is not a zoo model's trace: torch's partitioner needs the model "
           "(AOT autograd traces it again)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``frontier`` sub-command."""
    from roam_core.recompute.baselines import BASELINES

    p = subparsers.add_parser(
        "frontier", help="memory vs extra FLOPs: roam's recomputation frontier and baselines",
        description="Plan the graph at several memory budgets with recomputation and score "
                    f"the checkpointing baselines ({', '.join(BASELINES)}) on the same "
                    "graph.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("--budgets", type=positive_int, default=8, metavar="N",
                   help="roam budgets, evenly spaced (default 8)")
    p.add_argument("--no-baselines", action="store_true", help="roam points only")
    p.add_argument("--min-cut-budgets", type=_budget_list, default=None, metavar="B,B,...",
                   help="activation_memory_budget values for torch's min-cut partitioner "
                        "(zoo graphs; default 0.1,0.3,0.5,0.7,0.9,1.0)")
    p.add_argument("--no-min-cut", action="store_true",
                   help="skip torch's min-cut partitioner baseline")
    p.add_argument("--plans", default=None, metavar="DIR",
                   help="write every plan to DIR/<label>.json")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="worker processes per plan (default 1)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="CP-SAT seconds per ordering sub-task (default 5)")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help=EXECUTOR_HELP + "; every budget's plan uses it")
    p.add_argument("--bytes-weight", type=non_negative_float, default=1.0, metavar="W",
                   help="cost of one byte a re-run reads or writes, in FLOPs: roam's "
                        "objective is FLOPs + W x bytes moved (default 1; 0: FLOPs alone); "
                        "where a candidate with fewer FLOPs fits too, it is a roam point "
                        "as well ('kept': '..., fewest FLOPs')")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_run)


def _budget_list(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers in [0, 1], "
                                         "comma-separated") from None
    if not vals or any(not 0.0 <= v <= 1.0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers in [0, 1], comma-separated")
    return vals


def min_cut_record(result: MinCutResult) -> dict[str, Any]:
    """The ``torch_min_cut`` entry of ``roam frontier --json`` for a
    :class:`~roam_core.trace.min_cut.MinCutResult`."""
    return {
        "applicable": result.reason is None, "reason": result.reason,
        "matched_ops": result.matched_ops, "forward_ops": result.forward_ops,
        "joint_forward_nodes": result.joint_forward_nodes,
        "budgets": [{"method": d.method, "activation_memory_budget": d.budget,
                     "saved_values": d.saved_values, "saved_bytes": d.saved_bytes,
                     "retained_bytes": d.retained_bytes,
                     "recomputed_nodes": d.recomputed_nodes,
                     "recomputed_flops": d.recomputed_flops,
                     "dropped_storages": len(d.dropped),
                     "kept_by_rules": len(d.kept_by_rules),
                     "kept_by_rules_bytes": d.kept_by_rules_bytes}
                    for d in result.decisions],
    }


def frontier_dict(graph: Graph, config: PlannerConfig, budgets: int = 8,
                  baselines: bool = True, plans: dict[str, Plan] | None = None,
                  executor: cf.Executor | None = None,
                  min_cut_budgets: Sequence[float] | None = MIN_CUT_BUDGETS,
                  traced: TracedStep | None = None) -> dict[str, Any]:
    """The object ``roam frontier --json`` prints.

    ``executor``: where each plan's sub-task solves run, see
    :func:`roam_core.base.executors.open_executor`.  ``min_cut_budgets``: the
    ``activation_memory_budget`` values of torch's min-cut partitioner baseline (zoo graphs;
    ``None`` or empty: skipped); ``traced``: roam's :class:`~roam_core.trace.TracedStep` of
    the graph, when the caller has it (saves a re-trace).
    """
    from roam_core.planner.budget_frontier import recompute_frontier

    mc: dict[str, Any] | None = None
    extra: dict[str, tuple[TensorId, ...]] = {}
    mc_notes: list[str] = []
    if baselines and min_cut_budgets:
        if (getattr(graph, "origin", None) or {}).get("source") != "zoo":
            why = NOT_ZOO  # decided without importing torch
            mc = {"applicable": False, "reason": why, "matched_ops": 0, "forward_ops": 0,
                  "joint_forward_nodes": 0, "budgets": []}
            mc_notes.append(f"baseline torch_min_cut: not applicable ({why})")
        else:
            from roam_core.zoo.min_cut import min_cut_baselines

            res, extra, mc_notes = min_cut_baselines(graph, tuple(min_cut_budgets),
                                                     traced=traced)
            mc = min_cut_record(res)
    sf, points, notes = recompute_frontier(graph, config,
                                           budgets=budgets, baselines=baselines, plans=plans,
                                           extra_baselines=extra, executor=executor)
    return {
        "graph": graph.name,
        "step_flops": sf,
        "resident_bytes": graph.resident_bytes(),
        "points": [{"method": p.method, "peak_bytes": p.peak_bytes,
                    "extra_flops": p.extra_flops, "budget_bytes": p.budget_bytes,
                    "recomputed_ops": p.recomputed_ops,
                    "extra_bytes_moved": p.extra_bytes_moved, "kept": p.kept,
                    "search_extra_flops": p.search_extra_flops,
                    "search_extra_bytes_moved": p.search_extra_bytes_moved}
                   for p in points],
        "torch_min_cut": mc,
        "notes": notes + mc_notes,
    }


def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.base.units import format_bytes
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import save_plan
    from roam_core.planner.config import PlannerConfig

    spec = parse_executor(args.executor)  # a bad spec fails before the graph is read
    graph = load_graph(args.graph)
    cfg = PlannerConfig(workers=args.workers).with_recompute(bytes_weight=args.bytes_weight)
    if args.time_limit is not None:
        cfg = cfg.with_order(time_limit_s=args.time_limit)
    cfg = replace(cfg)
    plans: dict[str, Plan] | None = {} if args.plans else None
    with open_executor(spec, cpsat_threads=cfg.order.num_search_workers) as executor:
        mcb = None if args.no_min_cut else (args.min_cut_budgets or MIN_CUT_BUDGETS)
        d = frontier_dict(graph, cfg, args.budgets, not args.no_baselines, plans, executor,
                          min_cut_budgets=mcb)
    if args.plans:
        os.makedirs(args.plans, exist_ok=True)
        for label, plan in (plans or {}).items():
            save_plan(plan, os.path.join(args.plans, f"{label}.json"))
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    sf = d["step_flops"] or 1
    print(f"{d['graph']}: step {sf / 1e9:.1f} GFLOP, resident {format_bytes(d['resident_bytes'])}")
    for p in sorted(d["points"], key=lambda p: (p["method"] != "roam", -p["peak_bytes"])):
        print(f"  {p['method']:<22} {format_bytes(p['peak_bytes']):>12}  "
              f"+{100 * p['extra_flops'] / sf:6.2f}% FLOPs  ({p['recomputed_ops']} re-runs)")
    mc = d.get("torch_min_cut") or {}
    for b in mc.get("budgets", ()):
        print(f"  {b['method']}: torch saves {format_bytes(b['saved_bytes'])} "
              f"({b['saved_values']} values), re-runs {b['recomputed_nodes']} forward nodes; "
              f"the mapped plan keeps {format_bytes(b['retained_bytes'])} for the backward")
    for n in d["notes"]:
        print(f"  note: {n}")
    return 0
