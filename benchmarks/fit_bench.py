"""What-fits benchmark: the largest batch of a zoo model that fits a memory size, four ways.

Usage::

    nice python benchmarks/fit_bench.py [--model gpt2-xl] [--seq-len 1024] [--memory 80GiB]
        [--batch-sizes 1 4 8 16] [--out benchmarks/results/fit_gpt2xl]

The same rules as ``roam fit`` (:mod:`roam_core.commands.fit`): every batch size is traced
(steady setting, fake tensors) and checked against the memory: PyTorch eager's reserved memory
(the caching-allocator model on the program order), roam's arena without recomputation, and
roam's cheapest recomputation plan whose arena fits the memory, counted for the <= 5% and
<= 25% extra-FLOP methods when its extra FLOPs stay within the limit.  Beside ``roam fit``
this script times every stage (trace, plan without recomputation, the one budget
``plan_at(memory)``) and writes the results after every batch (``.json`` and ``.md``), so
a run cut short still leaves what it measured.

Timings on the shared 2-core machine are noisy (several sessions run at once).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

GIB = 2**30
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def check_batch(model: str, batch: int, seq: int | None, memory: int,
                workers: int) -> dict[str, Any]:
    """Trace one batch and measure what ``roam fit`` measures, with stage timings."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.oracle.baseline import eager_report
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    cfg = PlannerConfig(workers=workers)  # roam fit's settings
    t0 = time.perf_counter()
    g = trace_zoo(model, batch, seq, "steady").graph
    row: dict[str, Any] = {"batch_size": batch, "seq_len": g.origin.get("seq_len"),
                           "graph": g.name, "ops": len(g.ops),
                           "trace_s": time.perf_counter() - t0}
    rep = eager_report(g, cfg.alignment_bytes)
    row["eager_reserved_bytes"] = int(rep.peak_reserved_bytes)
    row["resident_bytes"] = g.resident_bytes()
    t0 = time.perf_counter()
    bp = BudgetPlanner(g, cfg)
    row["base_plan_s"] = time.perf_counter() - t0
    row["roam_arena_bytes"] = bp.base.arena_bytes
    row["step_flops"] = bp.step_flops
    pct: float | None = None
    arena: int | None = None
    row["budget_plan_s"] = None
    if bp.base.arena_bytes <= memory:
        pct, arena = 0.0, bp.base.arena_bytes
    else:
        t0 = time.perf_counter()
        try:
            plan = bp.plan_at(memory)
            pct, arena = 100 * plan.extra_flops / max(bp.step_flops, 1), plan.arena_bytes
            row.update(rerun_summary(g, plan))
        except BudgetInfeasibleError as e:
            row["infeasible"] = str(e)
        row["budget_plan_s"] = time.perf_counter() - t0
    row["recompute_arena_bytes"] = arena
    row["recompute_extra_flops_pct"] = pct
    row["fits"] = {"eager_reserved": row["eager_reserved_bytes"] <= memory,
                   "roam": bp.base.arena_bytes <= memory,
                   "roam_recompute_5pct": pct is not None and pct <= 5.0,
                   "roam_recompute_25pct": pct is not None and pct <= 25.0}
    return row


def rerun_summary(graph: Any, plan: Any) -> dict[str, Any]:
    """What a plan re-runs: count, bytes moved, and the op kinds (torch targets) most re-run."""
    from collections import Counter

    srcs = [graph.op(r.source) for r in plan.recompute]
    kinds = Counter(o.target for o in srcs)
    return {"recomputed_ops": len(srcs),
            "recompute_bytes_moved": sum((o.bytes_read or 0) + (o.bytes_written or 0)
                                         for o in srcs),
            "recompute_flops": sum(o.flops or 0 for o in srcs),
            "recomputed_targets": dict(kinds.most_common(8))}


def budget_timing(model: str, batch: int, seq: int | None, budgets: list[int],
                  workers: int) -> dict[str, Any]:
    """One traced batch planned at several budgets: the shared greedy run and each budget."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    cfg = PlannerConfig(workers=workers)
    t0 = time.perf_counter()
    g = trace_zoo(model, batch, seq, "steady").graph
    out: dict[str, Any] = {"batch_size": batch, "seq_len": seq, "ops": len(g.ops),
                           "trace_s": time.perf_counter() - t0, "budgets": []}
    t0 = time.perf_counter()
    bp = BudgetPlanner(g, cfg)
    out["base_plan_s"] = time.perf_counter() - t0
    out["roam_arena_bytes"] = bp.base.arena_bytes
    t0 = time.perf_counter()
    pts = bp.trajectory[2]
    out["trajectory_s"] = time.perf_counter() - t0
    out["trajectory_points"] = len(pts)
    out["lowest_bytes"] = bp.lowest_bytes()
    for b in budgets:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"budget_bytes": b}
        try:
            plan = bp.plan_at(b)
            row.update({"arena_bytes": plan.arena_bytes,
                        "extra_flops_pct": 100 * plan.extra_flops / max(bp.step_flops, 1),
                        **rerun_summary(g, plan)})
        except BudgetInfeasibleError as e:
            row["infeasible"] = str(e)
        row["plan_s"] = time.perf_counter() - t0
        out["budgets"].append(row)
        print(json.dumps(row), flush=True)
    return out


def largest(rows: list[dict[str, Any]]) -> dict[str, int | None]:
    """Largest batch per method that fits, counting only batches whose smaller ones fit."""
    out: dict[str, int | None] = {}
    for m in METHODS:
        best = None
        for r in sorted(rows, key=lambda r: r["batch_size"]):
            if not r["fits"][m]:
                break
            best = r["batch_size"]
        out[m] = best
    return out


def write(res: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    mem = res["memory_bytes"]
    lines = [f"# What fits: {res['model']} at t{res['seq_len']} in {mem / GIB:g} GiB", "",
             f"Produced by `benchmarks/fit_bench.py` ({res['started']} UTC), the rules of "
             "`roam fit`: steady AdamW step traced on fake tensors; eager = the caching-"
             "allocator model's reserved memory on the program order; roam = its arena "
             "without recomputation; roam <= p% = the cheapest recomputation plan whose arena "
             f"fits {mem / GIB:g} GiB, counted when its extra FLOPs are <= p% of the step.  "
             "Timed on the shared 2-core machine while other sessions (the lead's CI run "
             "among them) were running: timings are noisy.", "",
             "| batch | ops | eager reserved GiB | roam GiB | roam + recompute GiB "
             "(extra FLOPs) | trace s | plan s (no budget) | plan s (budget) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        rc = ("—" if r["recompute_arena_bytes"] is None else
              f"{r['recompute_arena_bytes'] / GIB:.2f} (+{r['recompute_extra_flops_pct']:.2f}%)")
        if r["budget_plan_s"] is None:
            rc, bs = "fits without", "—"
        else:
            bs = f"{r['budget_plan_s']:.0f}"
        lines.append(f"| {r['batch_size']} | {r['ops']:,} | "
                     f"{r['eager_reserved_bytes'] / GIB:.2f} | {r['roam_arena_bytes'] / GIB:.2f}"
                     f" | {rc} | {r['trace_s']:.0f} | {r['base_plan_s']:.0f} | {bs} |")
    lines += ["", "Largest batch that fits (every smaller batch in the sweep fits too):", "",
              "| method | largest batch |", "|---|---:|"]
    for m, b in res["largest"].items():
        lines.append(f"| {m} | {b if b is not None else 'none'} |")
    lines.append("")
    for n in res.get("notes", []):
        lines.append(f"- {n}")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    from roam_core.commands import size_bytes

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-xl")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--memory", type=size_bytes, default=80 * GIB)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/fit_gpt2xl")
    ap.add_argument("--keep", action="store_true",
                    help="add to the rows of an existing result file")
    ap.add_argument("--budget-timing", type=int, default=None, metavar="B",
                    help="instead: plan batch B at each of --budgets and time every stage")
    ap.add_argument("--budgets", type=size_bytes, nargs="+", default=[])
    args = ap.parse_args()
    out = Path(args.out)
    if args.budget_timing is not None:
        res = budget_timing(args.model, args.budget_timing, args.seq_len, args.budgets,
                            args.workers)
        res["started"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        return
    res: dict[str, Any] = {"model": args.model, "seq_len": args.seq_len,
                           "memory_bytes": args.memory, "rows": [], "notes": [],
                           "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if args.keep and out.with_suffix(".json").exists():
        res = json.loads(out.with_suffix(".json").read_text())
    for b in args.batch_sizes:
        row = check_batch(args.model, b, args.seq_len, args.memory, args.workers)
        res["rows"] = sorted([r for r in res["rows"] if r["batch_size"] != b] + [row],
                             key=lambda r: r["batch_size"])
        res["largest"] = largest(res["rows"])
        write(res, out)
        print(json.dumps({k: v for k, v in row.items() if k != "infeasible"}), flush=True)


if __name__ == "__main__":
    main()
