"""``roam plan GRAPH -o PLAN.json``: find an execution plan (order + arena layout).

Runs :func:`roam_core.planner.make_plan` with a progress bar on stderr (sub-tasks done /
total and the best peak so far), writes the plan with :func:`roam_core.formats.plan_io.save_plan`
and prints a summary (``--json``: one JSON object with ``baseline_peak_bytes``,
``planned_peak_bytes``, ``arena_bytes``, ``lower_bound_bytes``, ``solve_seconds``,
``method``, ``fragmentation``, ``eager_reserved_bytes``, ``extra_flops``, ``step_flops``,
``extra_seconds``, ``step_seconds``, ``device_profile``, ``recomputed_ops``, ...).
``--budget BYTES|auto`` plans under a memory budget with recomputation
(:mod:`roam_core.planner.budget`), for the least estimated extra time on
``--device-profile`` (:mod:`roam_core.model.cost_model`).  The text output leads with the
honest headline (:mod:`roam_core.planner.headline`): the saving against eager allocated and
against eager reserved, side by side, the graph's setting, and the next step when nothing
is saved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from roam_core.base.executors import EXECUTOR_HELP
from roam_core.commands.arg_types import (
    budget_arg,
    non_negative_float,
    positive_float,
    positive_int,
    seed_int,
)

if TYPE_CHECKING:  # commands import quickly: the planner and torch only when run
    from roam_core.model.graph import Graph
    from roam_core.model.plan import Plan
    from roam_core.planner import PlanProgress

__all__ = ["register", "summary_dict"]

_SETTING_NOTES = {
    "roam": "graph traced in the ROAM paper's setting: the optimizer's first step, so its "
            "state (exp_avg, exp_avg_sq) is created inside the step and counted as planned "
            "memory",
    "steady": "graph traced in the steady setting: optimizer state exists before the step "
              "and is resident (a constant in every number)",
}


def add_cost_model_args(p: argparse.ArgumentParser) -> None:
    """``--objective``, ``--device-profile`` and ``--bytes-weight`` (plan and frontier)."""
    p.add_argument("--objective", choices=("time", "flops"), default=None,
                   help="with a budget: what to minimise -- 'time', the estimated seconds of "
                        "the re-runs on --device-profile (default), or 'flops', FLOPs + W x "
                        "bytes moved (the objective before the cost model)")
    p.add_argument("--device-profile", default=None, metavar="NAME",
                   help="device the re-runs are priced on: h100-sxm (default), a100-80g, "
                        "h200, cpu or cuda (measured by `roam calibrate`), or a profile "
                        "JSON file; every output states it")
    p.add_argument("--bytes-weight", type=non_negative_float, default=None, metavar="W",
                   help="with --objective flops: cost of one byte a re-run reads or writes, "
                        "in FLOPs (default 1; 0: FLOPs alone, as torch counts them)")


def cost_model_config(cfg: Any, args: argparse.Namespace) -> Any:
    """``cfg`` (a PlannerConfig) with the cost-model flags of ``args`` applied."""
    changes = {k: v for k, v in (("objective", args.objective),
                                 ("device_profile", args.device_profile),
                                 ("bytes_weight", args.bytes_weight)) if v is not None}
    return cfg.with_recompute(**changes) if changes else cfg



def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``plan`` sub-command."""
    from roam_core.ordering.registry import ORDER_METHODS

    methods = ("roam", *ORDER_METHODS)
    p = subparsers.add_parser(
        "plan", help="find a memory-efficient execution plan for a graph",
        description="Order the graph's ops (ROAM: weight-update placement, task tree, CP-SAT "
                    "per sub-task) and lay out every tensor in one arena; write the plan.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("-o", "--output", required=True, help="plan file to write (.json)")
    p.add_argument("--time-limit", type=positive_float, default=None, metavar="S",
                   help="CP-SAT seconds per sub-task (default 5)")
    p.add_argument("--total-time-limit", type=positive_float, default=None, metavar="S",
                   help="cap on the whole ordering stage, seconds (default: none)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="worker processes for sub-tasks (default: one per CPU; 1 = in-process)")
    p.add_argument("--node-limit", type=positive_int, default=None, metavar="K",
                   help="NL: most ops per sub-task (default 60)")
    p.add_argument("--executor", default="local", metavar="SPEC", help=EXECUTOR_HELP)
    p.add_argument("--method", choices=methods, default="roam",
                   help="'roam' or a baseline ordering: " + ", ".join(methods))
    p.add_argument("--seed", type=seed_int, default=0, help="CP-SAT random seed (default 0)")
    p.add_argument("--budget", type=budget_arg, default=None, metavar="BYTES|auto",
                   help="memory budget for the arena (e.g. 2GiB, 3000MiB, 123456, or 'auto' "
                        "for the knee of the recomputation frontier): drop forward "
                        "activations and recompute them in the backward, for the least "
                        "estimated extra time, so that the plan fits")
    p.add_argument("--portfolio", action="store_true",
                   help="with --budget: also try the module-structure baselines' drop sets "
                        "(every block, sqrt segments, ...) pruned to the budget and keep the "
                        "cheapest; often fewer extra FLOPs, several times the planning time")
    add_cost_model_args(p)
    p.add_argument("--windows", type=positive_int, default=None, metavar="N",
                   help="with --budget: refine the chosen drop set with up to N exact CP-SAT "
                        "window models (12 storages each, every other decision fixed; "
                        "about 1 s each; off by default)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--setting-note", action="store_true",
                   help="explain the graph's tracing setting (steady / roam) and record it "
                        "in the plan's notes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_run)


class _Bar:
    """A one-line progress bar on stderr."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr is not None
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.last = ""

    def __call__(self, p: PlanProgress) -> None:
        if not self.enabled:
            return
        from roam_core.base.units import format_bytes

        peak = format_bytes(p.best_peak_bytes) if p.best_peak_bytes is not None else "-"
        width = 24
        fill = int(width * p.done / p.total) if p.total else 0
        bar = "#" * fill + "." * (width - fill)
        line = (f"roam plan: [{time.perf_counter() - self.t0:6.1f} s] {p.stage:<9} "
                f"[{bar}] {p.done}/{p.total}  best peak {peak}")
        if self.tty:
            print("\r" + line.ljust(len(self.last)), end="", file=sys.stderr, flush=True)
            if p.stage == "done":
                print(file=sys.stderr)
        elif p.stage != "order" or p.done == p.total or p.done % 10 == 0:
            print(line, file=sys.stderr, flush=True)
        self.last = line


def summary_dict(plan: Plan, graph: Graph | None = None,
                 device_profile: str | None = None) -> dict[str, Any]:
    """The JSON object ``roam plan --json`` prints (``device_profile``: where the step's
    seconds are estimated when the plan has none)."""
    out: dict[str, Any] = {
        "graph": plan.graph_name,
        "method": plan.method,
        "num_ops": len(plan.order),
        "baseline_peak_bytes": plan.baseline_peak_bytes,
        "planned_peak_bytes": plan.planned_peak_bytes,
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "proven_gap": plan.proven_gap,
        "resident_bytes": plan.resident_bytes,
        "fragmentation": plan.fragmentation,
        "reduction_vs_baseline": (1 - plan.planned_peak_bytes / plan.baseline_peak_bytes
                                  if plan.baseline_peak_bytes else 0.0),
        "solve_seconds": plan.solve_seconds,
        "num_subtasks": sum(1 for r in plan.provenance if r.stage == "order"),
        "notes": list(plan.notes),
        "extra_flops": int(plan.extra_flops),
        "step_flops": int(plan.step_flops),
        "extra_seconds": float(plan.extra_seconds),
        "step_seconds": float(plan.step_seconds),
        "device_profile": plan.device_profile or None,
        "recomputed_ops": [r.source for r in plan.recompute],
        "stages": [{"stage": s.stage, "wall_s": s.wall_s, "cpu_s": s.cpu_s,
                    "gained_bytes": s.gained_bytes, "work_done": s.work_done,
                    "work_limit": s.work_limit, "work_unit": s.work_unit,
                    "stopped": s.stopped} for s in plan.stages],
    }
    if graph is not None and not plan.step_flops:
        from roam_core.model.recompute_ops import step_flops

        out["step_flops"] = step_flops(graph)
    if graph is not None and not plan.device_profile:
        from roam_core.formats.device_profile_io import resolve_profile
        from roam_core.model.cost_model import step_seconds
        from roam_core.model.device_profiles import DEFAULT_PROFILE

        name = device_profile or DEFAULT_PROFILE
        out["step_seconds"] = step_seconds(graph, resolve_profile(name))
        out["device_profile"] = name
    if graph is not None:
        from roam_core.planner.headline import plan_headline

        h = plan_headline(graph, plan)
        out["eager_reserved_bytes"] = h.eager_reserved_bytes
        out["eager_allocated_bytes"] = h.eager_allocated_bytes
        out["saved_vs_eager_allocated_bytes"] = h.saved_vs_allocated_bytes
        out["saved_vs_eager_reserved_bytes"] = h.saved_vs_reserved_bytes
        out["setting"] = h.setting
        out["no_saving_reason"] = h.reason
    return out


def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from roam_core.base.atomic import check_output_path
    from roam_core.base.executors import open_executor, parse_executor
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import save_plan
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    spec = parse_executor(args.executor)  # a bad spec fails before the graph is read
    check_output_path(args.output, "-o/--output")  # and a bad output path
    graph = load_graph(args.graph)
    cfg = PlannerConfig()
    if args.node_limit is not None:
        cfg = replace(cfg, node_limit=args.node_limit)
    if args.workers is not None:
        cfg = replace(cfg, workers=args.workers)
    if args.total_time_limit is not None:
        cfg = replace(cfg, time_limit_s=args.total_time_limit)
    if args.budget is not None:
        cfg = replace(cfg, budget_bytes=args.budget)
    if args.portfolio:
        cfg = cfg.with_recompute(portfolio=True)
    cfg = cost_model_config(cfg, args)
    if args.windows is not None:
        cfg = cfg.with_recompute(windows=args.windows)
    cfg = cfg.with_order(random_seed=args.seed)
    if args.time_limit is not None:
        cfg = cfg.with_order(time_limit_s=args.time_limit)
    with open_executor(spec, cpsat_threads=cfg.order.num_search_workers) as executor:
        plan = make_plan(graph, cfg, method=args.method, progress=_Bar(not args.no_progress),
                         executor=executor)
    if args.setting_note:
        setting = str(graph.origin.get("setting", "unknown"))
        note = _SETTING_NOTES.get(setting, f"graph setting: {setting}")
        plan = replace(plan, notes=(*plan.notes, note))
        print(f"roam plan: note: {note}", file=sys.stderr)
    save_plan(plan, args.output)
    if args.json:
        print(json.dumps(summary_dict(plan, graph, cfg.recompute.device_profile),
                         sort_keys=True))
        return 0
    _print_text(graph, plan, cfg)
    print(f"  solve time      {plan.solve_seconds:.1f} s")
    if plan.stages:
        from roam_core.model.stage_cost import format_stages

        print(f"  stages          {format_stages(plan.stages)}")
    for n in plan.notes:
        print(f"  note: {n}")
    print(f"  wrote {args.output}")
    return 0


def _print_text(graph: Graph, plan: Plan, cfg: Any) -> None:
    """The text summary: the headline first, then the plan's figures."""
    from roam_core.base.units import format_bytes
    from roam_core.planner.headline import headline_lines, next_step, plan_headline

    h = plan_headline(graph, plan)
    nxt = next_step(graph, plan, cfg) if h.reason is not None else None
    print(f"{plan.graph_name}: {len(plan.order)} ops, method {plan.method}")
    for line in headline_lines(h, nxt):
        print(f"  {line}")
    print(f"  eager peak      {format_bytes(plan.baseline_peak_bytes)} allocated, "
          f"{format_bytes(h.eager_reserved_bytes)} reserved")
    print(f"  planned peak    {format_bytes(plan.planned_peak_bytes)}")
    print(f"  arena           {format_bytes(plan.arena_bytes)}  "
          f"(fragmentation {plan.fragmentation:.2%})")
    gap = plan.proven_gap
    print(f"  lower bound     {format_bytes(plan.lower_bound_bytes)}"
          + (f"  (proven gap {gap:.4f})" if gap is not None else ""))
    if plan.recompute:
        pct = 100 * plan.extra_flops / plan.step_flops if plan.step_flops else 0.0
        print(f"  recomputation   {len(plan.recompute)} ops re-run, "
              f"+{1e3 * plan.extra_seconds:.3f} ms on {plan.device_profile}, "
              f"+{pct:.2f}% FLOPs")
