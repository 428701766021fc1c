"""Cold single-budget planning time, before/after.

``make_plan(graph, PlannerConfig(budget_bytes=B))`` on saved graphs, old code beside new.

Usage::

    git archive 90d86dd roam_core | tar -x -C /tmp/before      # the code to compare against
    nice python benchmarks/budget_speed.py --before /tmp/before \\
        --graph /tmp/gpt2xl-b8.json.gz 80 --graph /tmp/gpt2xl-b16.json.gz 80 \\
        --out benchmarks/results/budget_speed

Each (graph, budget GiB, code tree) runs in its own process, one at a time, from a cold
start (graph loaded from a file saved with :mod:`roam_core.formats.graph_io`, nothing
cached), with the default config (``workers=None``: one sub-task process per CPU).  CPU
seconds are the process's and its reaped children's user + system time
(``resource.getrusage``), beside the wall seconds and the load average.  Timings on the
shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GIB = 2**30
CHILD = r"""
import json, resource, sys, time
src, path, gib = sys.argv[1], sys.argv[2], float(sys.argv[3])
sys.path.insert(0, src)
import roam_core
assert roam_core.__file__.startswith(src), roam_core.__file__
from roam_core.planner.config import PlannerConfig
from roam_core.formats.graph_io import load_graph
from roam_core.oracle.validate import check_plan
from roam_core.planner import make_plan
g = load_graph(path)
c0, t0 = time.process_time(), time.perf_counter()
p = make_plan(g, PlannerConfig(budget_bytes=int(gib * 2**30)))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"graph": g.name, "ops": len(g.ops), "budget_bytes": int(gib * 2**30),
                  "wall_s": wall, "cpu_s": cpu + kids.ru_utime + kids.ru_stime,
                  "arena_bytes": p.arena_bytes, "extra_flops": p.extra_flops,
                  "step_flops": p.step_flops, "recomputed_ops": len(p.recompute),
                  "valid": not check_plan(g, p)}))
"""


def run_one(tree: str, graph: str, gib: float) -> dict[str, Any]:
    """Plan one budget in a fresh process with the code in ``tree``."""
    load0 = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", CHILD, tree, graph, str(gib)], check=True,
                         capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row["load_avg_1min"] = [load0, os.getloadavg()[0]]
    return row


def report(res: dict[str, Any], out: Path) -> None:
    """Write ``out``.json and ``out``.md."""
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = ["# Cold single-budget planning time: before and after", "",
             f"`benchmarks/budget_speed.py` ({res['started']} UTC): "
             "`make_plan(graph, PlannerConfig(budget_bytes=B))` from a cold start, default "
             "config, each run in its own process, one at a time; before = "
             f"{res['before_label']}, after = {res['after_label']}.  CPU = user + system "
             "seconds of the process and its sub-task workers.  Shared 2-core machine, "
             "other sessions' jobs running: wall seconds are noisy and mostly waiting.", "",
             "| graph | budget GiB | code | CPU s | wall s | load (start, end) | arena GiB | "
             "extra FLOPs | recompute ops | valid |",
             "|---|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for r in res["rows"]:
        lines.append(
            f"| {r['graph']} | {r['budget_bytes'] / GIB:g} | {r['code']} | {r['cpu_s']:.1f} | "
            f"{r['wall_s']:.1f} | {r['load_avg_1min'][0]:.1f}, {r['load_avg_1min'][1]:.1f} | "
            f"{r['arena_bytes'] / GIB:.4f} | {r['extra_flops']:,} "
            f"(+{100 * r['extra_flops'] / max(r['step_flops'], 1):.2f}%) | "
            f"{r['recomputed_ops']} | {r['valid']} |")
    lines += [""] + [f"- {n}" for n in res.get("notes", [])]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a directory holding the old roam_core")
    ap.add_argument("--before-label", default="main at 90d86dd")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--after-label", default="this branch")
    ap.add_argument("--graph", nargs=2, action="append", metavar=("FILE", "GIB"), required=True)
    ap.add_argument("--out", default="benchmarks/results/budget_speed")
    args = ap.parse_args()
    res: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                           "before_label": args.before_label, "after_label": args.after_label,
                           "rows": []}
    for graph, gib in args.graph:
        for code, tree in (("before", args.before), ("after", args.after)):
            row = {"code": code, **run_one(tree, graph, float(gib))}
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
            report(res, Path(args.out))


if __name__ == "__main__":
    main()
