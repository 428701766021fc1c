"""DSA benchmark: the standalone layout solver on real allocation problems with known results.

Usage::

    nice python benchmarks/dsa_bench.py [--time-limit S] [--only SUBSTR] [--out benchmarks/results]

Instances (``$ROAM_DSA_DIR``, default ``<repo>/../shared/dsa``, see its README):

* ``minimalloc/A..K.1048576.csv``: 11 TPU allocation problems; the task is a valid layout
  within capacity 1,048,576 (MiniMalloc's C++ solver: all 11 in 0.4-3.9 s; greedy: none);
* ``minimalloc/input.12.csv`` at capacity 12;
* ``training/somas_resnet50.csv`` and ``training/iopddl_G_1.csv``: minimise the height
  (MiniMalloc: 1.0042 x LB and = LB).

Each instance runs in a fresh subprocess (so one instance's memo cannot help another) with
:func:`roam_core.layout.dsa_solver.solve_dsa`; every solution is checked with
:func:`roam_core.oracle.validate.check_dsa_solution`.  The layout baselines (greedy by size, LLFB,
inductor pool) are reported beside it.  Results: ``dsa.md`` and ``dsa.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DSA = Path(os.environ.get("ROAM_DSA_DIR", ROOT.parent / "shared" / "dsa"))
CAP = 1_048_576

INSTANCES: list[tuple[str, int | None]] = [
    *((f"minimalloc/{x}.1048576.csv", CAP) for x in "ABCDEFGHIJK"),
    ("minimalloc/input.12.csv", 12),
    ("training/somas_resnet50.csv", None),
    ("training/iopddl_G_1.csv", None),
]

#: Published reference results (MiniMalloc C++, from the data README).
REFERENCE = {
    "somas_resnet50": "MiniMalloc 1.0042 x LB",
    "iopddl_G_1": "MiniMalloc = LB (optimal)",
}


def _child(path: str, capacity: int | None, time_limit_s: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from roam_core.base.errors import InfeasibleError
    from roam_core.formats.dsa_csv import load_problem
    from roam_core.layout.dsa_solver import solve_dsa
    from roam_core.layout.layout_baselines import LAYOUT_METHODS
    from roam_core.oracle.validate import check_dsa_solution

    p = load_problem(DSA / path, capacity=capacity)
    lb = p.lower_bound()
    row: dict[str, Any] = {"instance": Path(path).stem.split(".")[0], "buffers": len(p),
                           "capacity": capacity, "lower_bound": lb}
    t0 = time.perf_counter()
    try:
        r = solve_dsa(p, time_limit_s=time_limit_s)
        sol = r.solution
        row.update(status=r.status, method=r.method, nodes=r.nodes,
                   proven_bound=r.lower_bound)
    except InfeasibleError as e:
        sol = None
        row.update(status="infeasible", method=str(e), nodes=0, proven_bound=None)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["height"] = sol.height if sol else None
    row["violations"] = len(check_dsa_solution(p, sol)) if sol else None
    row["solved"] = bool(sol) and row["violations"] == 0 and (
        capacity is None or sol.height <= capacity)
    for name, fn in LAYOUT_METHODS.items():
        row[name] = fn(p.with_capacity(None)).height
    return row


def _ratio(h: int | None, lb: int) -> str:
    return f"{h / lb:.4f}" if h and lb else "-"


def write(rows: list[dict[str, Any]], out: Path, time_limit_s: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "time_limit_s": time_limit_s, "load_avg": os.getloadavg()}
    (out / "dsa.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    mm = [r for r in rows if r["capacity"] == CAP]
    solved = [r for r in mm if r["solved"]]
    lines = [
        "# DSA solver on published allocation problems", "",
        f"Measured {meta['date']} with `benchmarks/dsa_bench.py` (`solve_dsa`, time limit "
        f"{time_limit_s:g} s, pure Python + numpy, one process per instance, 2 CPU cores shared "
        f"with other work: load average {meta['load_avg'][0]:.1f}).  Every layout was checked "
        "with `validate.check_dsa_solution`.  Ratios are height / live-set lower bound.", "",
        f"**MiniMalloc A-K within capacity 1,048,576: {len(solved)}/{len(mm)} solved** "
        f"(MiniMalloc C++: 11/11 in <= 4 s; greedy best fit: 0/11).", "",
        "| instance | buffers | capacity | LB | height | ratio | solved | status | seconds | "
        "nodes | method | greedy_size | llfb | inductor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['instance']} | {r['buffers']} | {r['capacity'] or '-'} | {r['lower_bound']} "
            f"| {r['height'] or '-'} | {_ratio(r['height'], r['lower_bound'])} | "
            f"{'yes' if r['solved'] else 'no'} | {r['status']} | {r['seconds']} | {r['nodes']} "
            f"| {r['method']} | {_ratio(r['greedy_size'], r['lower_bound'])} | "
            f"{_ratio(r['llfb'], r['lower_bound'])} | {_ratio(r['inductor'], r['lower_bound'])} |")
    lines += ["", "References: " + "; ".join(f"{k}: {v}" for k, v in REFERENCE.items()) + "."]
    (out / "dsa.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, cap = args.child
        row = _child(path, None if cap == "none" else int(cap), args.time_limit)
        print(json.dumps(row))
        return 0
    rows = []
    for path, cap in INSTANCES:
        if args.only not in path:
            continue
        proc = subprocess.run(
            [sys.executable, __file__, "--time-limit", str(args.time_limit), "--child", path,
             "none" if cap is None else str(cap)],
            capture_output=True, text=True, check=False,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['instance']}: {'solved' if row['solved'] else 'NOT solved'} "
              f"height {row['height']} LB {row['lower_bound']} {row['seconds']} s "
              f"({row['status']}, {row['method']})", flush=True)
    write(rows, args.out, args.time_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
