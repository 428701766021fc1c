"""What-fits benchmark: the largest batch of a zoo model that fits a memory size, four ways.

Usage::

    nice python benchmarks/fit_bench.py [--model gpt2-xl] [--seq-len 1024] [--memory 80GiB]
        [--batch-sizes 1 4 8 16] [--out benchmarks/results/fit_gpt2xl]

The same rules as ``roam fit`` (:mod:`roam_core.commands.fit`): every batch size is traced
(steady setting, fake tensors) and checked against the memory: PyTorch eager's reserved memory
(the caching-allocator model on the program order), roam's arena without recomputation, and
roam's cheapest recomputation plan whose arena fits the memory, counted for the <= 5% and
<= 25% methods when its estimated extra time (the cost model) stays within the limit.  Beside
``roam fit`` this script times the trace and the row and writes the results after every
batch (``.json`` and ``.md``), so a run cut short still leaves what it measured.

Timings on the shared 2-core machine are noisy (several sessions run at once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

GIB = 2**30
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def check_batch(model: str, batch: int, seq: int | None, memory: int,
                workers: int) -> dict[str, Any]:
    """Trace one batch and decide what fits with ``roam fit``'s own row
    (:func:`roam_core.planner.whatfits.fit_row`), timing the trace and the row."""
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import fit_row
    from roam_core.zoo import trace_zoo

    cfg = PlannerConfig(workers=workers)  # roam fit's settings
    t0 = time.perf_counter()
    g = trace_zoo(model, batch, seq, "steady").graph
    row: dict[str, Any] = {"batch_size": batch, "seq_len": g.origin.get("seq_len"),
                           "graph": g.name, "ops": len(g.ops),
                           "trace_s": time.perf_counter() - t0,
                           "resident_bytes": g.resident_bytes()}
    t0 = time.perf_counter()
    fr = fit_row(g, cfg, batch_size=batch, seq_len=row["seq_len"], memory_bytes=memory)
    row["fit_s"] = time.perf_counter() - t0
    row["eager_reserved_bytes"] = fr.peak_bytes["eager_reserved"]
    row["roam_arena_bytes"] = fr.peak_bytes["roam"]
    row["peak_bytes"] = dict(fr.peak_bytes)
    row["extra_time_pct"] = dict(fr.extra_time_pct)
    row["step_seconds"], row["device_profile"] = fr.step_seconds, fr.device_profile
    row["fits"] = fr.fits(memory)
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
    from roam_core.planner.whatfits import extra_time_pct
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
                        "extra_time_pct": extra_time_pct(plan.extra_seconds, bp.step_seconds),
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


def _gib_pct(r: dict[str, Any], method: str, mem: int) -> str:
    """A recomputation method's cell: its arena and extra time, or why it does not fit."""
    peak, pct = r["peak_bytes"][method], r["extra_time_pct"].get(method, 0.0)
    if r["roam_arena_bytes"] <= mem:
        return "fits without"
    if peak > mem:
        return f"no (needs +{pct:.2f}%)" if pct else "no"
    return f"{peak / GIB:.2f} (+{pct:.2f}%)"


def write(res: dict[str, Any], out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    mem = res["memory_bytes"]
    prof = res["rows"][0]["device_profile"] if res["rows"] else "?"
    lines = [f"# What fits: {res['model']} at t{res['seq_len']} in {mem / GIB:g} GiB", "",
             f"Produced by `benchmarks/fit_bench.py` ({res['started']} UTC) with `roam fit`'s "
             "own row (`roam_core.planner.whatfits.fit_row`): steady AdamW step in fp32 traced "
             "on fake tensors; eager = the caching-allocator model's reserved memory on the "
             "program order; roam = its arena without recomputation; roam ≤ p% = the cheapest "
             f"recomputation plan whose arena fits {mem / GIB:g} GiB, counted when its "
             f"estimated extra time on `{prof}` (the cost model) is ≤ p% of the step's.  "
             f"Machine: {res.get('nproc', '?')} cores, load average {res.get('load', '?')} "
             "at the start (shared with other sessions: the seconds are noisy, the bytes and "
             "verdicts are not).", "",
             "| batch | ops | eager reserved GiB | roam GiB | roam ≤ 5 % GiB (extra time) "
             "| roam ≤ 25 % GiB (extra time) | trace s | fit s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| {r['batch_size']} | {r['ops']:,} | "
                     f"{r['eager_reserved_bytes'] / GIB:.2f} | {r['roam_arena_bytes'] / GIB:.2f}"
                     f" | {_gib_pct(r, 'roam_recompute_5pct', mem)}"
                     f" | {_gib_pct(r, 'roam_recompute_25pct', mem)}"
                     f" | {r['trace_s']:.0f} | {r['fit_s']:.0f} |")
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
                           "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                           "nproc": os.cpu_count(),
                           "load": " ".join(f"{x:.1f}" for x in os.getloadavg())}
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
