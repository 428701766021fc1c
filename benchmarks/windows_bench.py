"""Exact windows (``PlannerConfig.recompute.windows``): extra FLOPs at the same budgets.

Usage::

    nice python benchmarks/windows_bench.py [--graphs NAME ...] [--budgets 8]
        [--portfolio both|on|off] [--out benchmarks/results/windows.md]

For each graph (``sample_graphs/<name>.json.gz``) two :class:`BudgetPlanner` s plan the same
budgets -- evenly spaced between the lowest just-in-time peak of the greedy trajectory and the
plan without recomputation, as ``roam frontier`` spaces them -- one with
``recompute.windows=0`` (before, the default) and one with ``recompute.windows=16``
(after), with the
portfolio of baselines on (as ``roam frontier``) and / or off (as ``roam plan --budget``).
Per budget: the arena, extra FLOPs, bytes moved, the objective (FLOPs + bytes moved), the
candidate kept and CPU seconds (``time.process_time``) of ``plan_at``; every plan passes the
validator (the planner checks it).  Timings on the shared 2-core machine are noisy; the load
average is printed.
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

GRAPHS = ["tiny_gpt-b2-t32-steady", "gpt2-b1-t128-steady", "mobilenet_v2-b8-steady",
          "resnet50-b8-steady", "teach_recompute-b256-steady", "residual_block-b4-steady"]
MIB = 2**20


def _moved(graph: Any, plan: Any) -> int:
    from roam_core.model.recompute_ops import recompute_cost

    return recompute_cost(graph, plan.recompute)[1]


def run_graph(name: str, budgets: int, portfolio: bool) -> dict[str, Any]:
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.formats.graph_io import load_graph
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig

    root = Path(__file__).resolve().parents[1]
    g = load_graph(root / "sample_graphs" / f"{name}.json.gz")
    cfg = PlannerConfig(workers=1, layout_time_limit_s=5.0).with_order(time_limit_s=2.0)
    rows: list[dict[str, Any]] = []
    planners = {}
    setup = {}
    for label, c in (("before", cfg.with_recompute(windows=0)),
                     ("after", cfg.with_recompute(windows=16))):
        c0 = time.process_time()
        planners[label] = BudgetPlanner(g, c, portfolio=portfolio)
        setup[label] = time.process_time() - c0
    bp = planners["before"]
    hi, lo = bp.base.arena_bytes, bp.lowest_bytes()
    a = cfg.alignment_bytes
    grid = sorted({-(-int(lo + (hi - lo) * i / max(budgets - 1, 1)) // a) * a
                   for i in range(budgets)}, reverse=True)
    for b in grid:
        row: dict[str, Any] = {"budget_bytes": b}
        for label, p in planners.items():
            c0 = time.process_time()
            try:
                plan = p.plan_at(b)
            except BudgetInfeasibleError:
                row[label] = None
                continue
            cpu = time.process_time() - c0
            rep = p.window_reports.get(p.last_pick[1]) if p.last_pick else None
            row[label] = {"arena_bytes": plan.arena_bytes, "extra_flops": plan.extra_flops,
                          "moved_bytes": _moved(g, plan),
                          "kept": p.last_pick[0] if p.last_pick else "no recomputation",
                          "cpu_s": round(cpu, 3),
                          "windows": rep.windows if rep else 0,
                          "windows_improved": rep.improved if rep else 0,
                          "windows_cpu_s": round(rep.cpu_s, 3) if rep else 0.0}
        rows.append(row)
    return {"graph": name, "ops": len(g.ops), "step_flops": bp.step_flops,
            "portfolio": portfolio, "plain_bytes": hi, "lowest_bytes": lo,
            "setup_cpu_s": {k: round(v, 2) for k, v in setup.items()}, "rows": rows}


def _pct(x: int, sf: int) -> str:
    return f"+{100 * x / max(sf, 1):.3f}%"


def report(results: list[dict[str, Any]], load: str, when: str) -> str:
    out = [f"### Exact windows: before / after ({when}, load average {load})", "",
           "`recompute.windows=0` (before, the default) against `recompute.windows=16` (after) "
           "on the same budgets, "
           "same planner otherwise; `cost` is FLOPs + bytes moved (the objective); CPU s is "
           "`plan_at` per budget (`time.process_time`, noisy: shared 2-core machine).", ""]
    for r in results:
        sf = r["step_flops"]
        out += [f"**{r['graph']}** ({r['ops']} ops, portfolio "
                f"{'on' if r['portfolio'] else 'off'}; plain {r['plain_bytes'] / MIB:,.1f} MiB, "
                f"lowest just-in-time {r['lowest_bytes'] / MIB:,.1f} MiB)", "",
                "| budget MiB | before: arena MiB, extra FLOPs, MiB moved | after | kept (after) "
                "| windows (improved) | CPU s before / after |",
                "|---:|---|---|---|---:|---:|"]
        tb = ta = 0.0
        for row in r["rows"]:
            b, a = row["before"], row["after"]

            def cell(x: dict[str, Any] | None, sf: int = sf) -> str:
                if x is None:
                    return "infeasible"
                return (f"{x['arena_bytes'] / MIB:,.2f}, {_pct(x['extra_flops'], sf)}, "
                        f"{x['moved_bytes'] / MIB:,.1f}")

            tb += b["cpu_s"] if b else 0.0
            ta += a["cpu_s"] if a else 0.0
            out.append(f"| {row['budget_bytes'] / MIB:,.2f} | {cell(b)} | {cell(a)} | "
                       f"{a['kept'] if a else ''} | "
                       f"{a['windows'] if a else 0} ({a['windows_improved'] if a else 0}) | "
                       f"{b['cpu_s'] if b else 0:.2f} / {a['cpu_s'] if a else 0:.2f} |")
        out += ["", f"Total `plan_at` CPU s: before {tb:.1f}, after {ta:.1f}.", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="*", default=GRAPHS)
    ap.add_argument("--budgets", type=int, default=8)
    ap.add_argument("--portfolio", choices=("both", "on", "off"), default="both")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.portfolio]
    results = []
    for name in args.graphs:
        for pf in modes:
            r = run_graph(name, args.budgets, pf)
            results.append(r)
            print(json.dumps(r), flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = report(results, load, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
