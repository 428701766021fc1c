"""Layout benchmark: arena planner and layout baselines on real traced graphs.

Usage::

    nice python benchmarks/layout_bench.py [--orders DIR] [--time-limit S] [--only SUBSTR]
        [--out benchmarks/results] [--name roam_configs] GRAPH...

For every graph, the order comes from a plan file ``DIR/<graph file stem>.plan.json.gz``
when ``--orders`` is given and the file exists (e.g. the planner's ROAM order); otherwise
``--make-orders`` runs :func:`roam_core.planner.make_plan` with a greedy layout to get the
ROAM order and saves it there; else program (eager) order is used.  Then the arena planner
(:func:`roam_core.layout.arena_layout.plan_arena`) and every layout baseline
(:data:`roam_core.layout.baseline_layouts.LAYOUT_METHODS`) lay the order out, each result is checked
with :func:`roam_core.oracle.validate.check_arena`, and the fragmentation
``arena / planned peak - 1`` is reported (planned peak = the simulated peak of the order,
resident bytes included).  Results: ``layout_<name>.md`` and ``.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roam_core.formats.graph_io import load_graph
from roam_core.formats.plan_io import load_plan, save_plan
from roam_core.layout.arena_layout import ArenaConfig, plan_arena
from roam_core.layout.baseline_layouts import LAYOUT_METHODS, baseline_layout
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_arena

MIB = 2**20


def _order(path: Path, graph: Any, orders: Path | None, make: bool) -> tuple[Any, str]:
    if orders is None:
        return graph.op_ids, "eager"
    stem = path.name.split(".")[0]
    pfile = orders / f"{stem}.plan.json.gz"
    if pfile.exists():
        return load_plan(pfile, graph).order, "roam"
    if not make:
        return graph.op_ids, "eager"
    from roam_core.ordering.config import OrderSolverConfig
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    cfg = PlannerConfig(workers=1, solve_layout=False, order=OrderSolverConfig(time_limit_s=5))
    plan = make_plan(graph, cfg)
    orders.mkdir(parents=True, exist_ok=True)
    save_plan(plan, pfile)
    return plan.order, "roam"


def run(paths: list[Path], orders: Path | None, make: bool, time_limit_s: float,
        ) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        graph = load_graph(path)
        order, kind = _order(path, graph, orders, make)
        peak = simulate(graph, order).peak_bytes
        row: dict[str, Any] = {"graph": path.name.split(".")[0], "order": kind,
                               "storages": len(graph.tensors), "peak_bytes": peak}
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        lay = plan_arena(graph, order, config=ArenaConfig(time_limit_s=time_limit_s))
        row["arena"] = {
            "arena_bytes": lay.arena_bytes, "seconds": round(time.perf_counter() - t0, 2),
            "cpu_s": round(time.process_time() - c0, 2),
            "load": f"{load:.1f}/{os.getloadavg()[0]:.1f}",
            "method": lay.stats["method"],
            "violations": len(check_arena(graph, order, lay.offsets, lay.arena_bytes, 512)),
            "candidates": lay.stats["candidates"],
        }
        for name in LAYOUT_METHODS:
            t0 = time.perf_counter()
            b = baseline_layout(graph, order, name)
            row[name] = {
                "arena_bytes": b.arena_bytes, "seconds": round(time.perf_counter() - t0, 2),
                "violations": len(check_arena(graph, order, b.offsets, b.arena_bytes, 512)),
            }
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _frag(row: dict[str, Any], key: str) -> str:
    return f"{100 * (row[key]['arena_bytes'] / row['peak_bytes'] - 1):.3f}%"


def _line(row: dict[str, Any]) -> str:
    cells = [row["graph"], row["order"], str(row["storages"]), f"{row['peak_bytes'] / MIB:.1f}",
             f"{row['arena']['arena_bytes'] / MIB:.1f}", _frag(row, "arena"),
             row["arena"]["method"], f"{row['arena']['seconds']:.1f}",
             f"{row['arena'].get('cpu_s', 0):.1f}", row["arena"].get("load", "-")]
    cells += [_frag(row, m) for m in LAYOUT_METHODS]
    bad = sum(row[k]["violations"] for k in ("arena", *LAYOUT_METHODS))
    cells.append(str(bad))
    return "| " + " | ".join(cells) + " |"


def write(rows: list[dict[str, Any]], out: Path, name: str, time_limit_s: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "time_limit_s": time_limit_s}
    (out / f"layout_{name}.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                        indent=1))
    head = ["graph", "order", "storages", "peak MiB", "arena MiB", "frag", "winner", "s",
            "CPU s", "load"]
    head += [f"{m} frag" for m in LAYOUT_METHODS] + ["violations"]
    lines = [
        f"# Arena layout on traced graphs ({name})", "",
        f"Measured {meta['date']} with `benchmarks/layout_bench.py` (time limit "
        f"{time_limit_s:g} s per graph, 2 shared CPU cores, nice).  `frag` = arena / planned "
        "peak - 1, where the planned peak is the simulated peak of the same order (512 B "
        "rounding, resident bytes included); every layout was checked with "
        "`validate.check_arena` (violations column, all layouts together).  Order `roam`: "
        "the planner's order from a plan file made by `make_plan(PlannerConfig(workers=1, "
        "solve_layout=False, order=OrderSolverConfig(time_limit_s=5)))`; `eager`: program "
        "order.  The baseline columns lay out the same order.  `s` / `CPU s`: wall and "
        "CPU seconds (`time.process_time`) of the arena planner; `load`: the 1-minute load "
        "average before/after it.", "",
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
        *(_line(r) for r in rows), "",
    ]
    worst = max((r["arena"]["arena_bytes"] / r["peak_bytes"] - 1 for r in rows), default=0)
    lines.append(f"Worst arena fragmentation: {100 * worst:.3f}% (target <= 0.1%).")
    (out / f"layout_{name}.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--orders", type=Path, default=None)
    ap.add_argument("--make-orders", action="store_true")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--name", default="roam_configs")
    args = ap.parse_args()
    paths = [p for p in args.graphs if args.only in p.name]
    rows = run(paths, args.orders, args.make_orders, args.time_limit)
    write(rows, args.out, args.name, args.time_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
