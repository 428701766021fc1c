"""Where the gap between roam's planned peak and the lower bound sits, per graph (issue 13).

For each graph: plan it twice with ``make_plan`` (``search_evaluations=0``: the tree, the
CP-SAT sub-tasks and polishing only, i.e. the planner before this change; then the default,
with the peak-directed search over the whole order), and for the first plan report

* the peak step, its op and phase, the sub-task that owns it (kind, CP-SAT status, proven
  sub-task bound) and the sub-task's boundary storages live there (largest first);
* the bytes live at the peak that the live-set argument does not force (the material of the
  gap: what some other order might not hold there);
* the bounds: the previous best (``bounds.best_lower_bound``), the per-op choice bound over
  free branches and the CP-SAT restriction bound on a window around the peak
  (``oracle/proven_bounds.py``), all valid for every order;
* the verdict: *closed* when the plan meets the best proven bound; *search* when the
  search on the input graph lowered the peak (the gap was in the decomposition: tree borders
  and pinned updates); *open* otherwise (the sub-task is optimal within its boundary, and
  no bound or move we have decides between a loose bound and a better far order).

Usage: ``python benchmarks/gap_diagnosis.py [GRAPH_DIR ...]`` (sample_graphs/ with the ``-roam``
configs by default; pass a folder from ``benchmarks/gap_graphs.py`` to add those).  Writes
``benchmarks/results/gap_diagnosis.{md,json}``.  Timing: 2 shared CPU cores, noisy.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from roam_core.base.config import PlannerConfig
from roam_core.formats.graph_io import load_graph
from roam_core.model.graph import round_size
from roam_core.model.reach import reachability
from roam_core.oracle.bounds import best_lower_bound, forced_live_masks
from roam_core.oracle.proven_bounds import (
    chain_group_lower_bound,
    choice_lower_bound,
    storage_masks,
    window_bound,
)
from roam_core.oracle.simulate import lifetimes, simulate
from roam_core.planner import make_plan

MIB = 2**20
ROOT = Path(__file__).resolve().parent


def diagnose(path: Path) -> dict:
    g = load_graph(path)
    a = 512
    t0 = time.perf_counter()
    base_cfg = PlannerConfig(workers=2, solve_layout=False, search_evaluations=0,
                             tighten_bound=False)
    p0 = make_plan(g, base_cfg)
    t_plan0 = time.perf_counter() - t0
    t0 = time.perf_counter()
    p1 = make_plan(g, PlannerConfig(workers=2, solve_layout=False))
    t_plan1 = time.perf_counter() - t0
    r = reachability(g)
    old = best_lower_bound(g, a, reach=r)
    prof = simulate(g, p0.order, alignment_bytes=a)
    ps = prof.peak_step
    x = p0.order[ps]
    tid = p0.task_of_op.get(x)
    rec = next((q for q in p0.provenance if q.stage == "order" and q.task_id == tid), None)
    fm = forced_live_masks(g, r)
    xi = r.index[x]
    lts = lifetimes(g, p0.order)
    live_at = [s for s, lt in lts.items() if lt.start <= ps < lt.end]
    unforced = sum(round_size(g.tensors[s].size_bytes, a) for s in live_at
                   if not fm.get(s, 0) >> xi & 1)
    own = {op for op, t in p0.task_of_op.items() if t == tid}
    boundary = []
    for s in live_at:
        t = g.tensors[s]
        inside_p = t.producer in own
        inside_u = any(c in own for c in t.consumers)
        if inside_p != inside_u or (not inside_p and inside_u):
            boundary.append((round_size(t.size_bytes, a), s, t.kind.value,
                             "CIFO" if inside_p else "COFI"))
    boundary.sort(reverse=True)
    t0 = time.perf_counter()
    cb = choice_lower_bound(g, a, reach=r)
    t_choice = time.perf_counter() - t0
    t0 = time.perf_counter()
    sm = storage_masks(g, a, reach=r)
    wb, wrecs = window_bound(g, p1.order, a, half_widths=(30,), max_windows=1,
                             time_limit_s=2.0, reach=r, masks=sm)
    t_window = time.perf_counter() - t0
    t0 = time.perf_counter()
    cg = chain_group_lower_bound(g, None, a, reach=r, masks=sm)
    t_chain = time.perf_counter() - t0
    best = max(old.bound_bytes, cb.bound_bytes, wb, cg.bound_bytes)
    assert p1.lower_bound_bytes <= best
    planned0, planned1 = p0.planned_peak_bytes, p1.planned_peak_bytes
    if planned0 <= old.bound_bytes:
        verdict = "closed (old bound)"
    elif planned1 <= best:
        verdict = "closed by the bound" if planned1 == planned0 else "closed by search + bound"
    elif planned1 < planned0:
        verdict = "search + bound (part)"
    else:
        verdict = "bound (part)" if best > old.bound_bytes else "open"
    return {
        "graph": g.name, "file": path.name, "ops": len(g.ops),
        "planned_tree_mib": planned0 / MIB, "planned_search_mib": planned1 / MIB,
        "old_bound_mib": old.bound_bytes / MIB, "choice_bound_mib": cb.bound_bytes / MIB,
        "window_bound_mib": wb / MIB, "chain_group_bound_mib": cg.bound_bytes / MIB,
        "chain_group": list(cg.group)[:4], "chain_ops": cg.chain_ops,
        "window_status": wrecs[0].status if wrecs else None,
        "best_bound_mib": best / MIB,
        "gap_before": planned0 / old.bound_bytes, "proven_gap": planned1 / best,
        "peak_step": ps, "peak_op": x, "peak_phase": g.op(x).phase.value,
        "subtask": tid, "subtask_status": None if rec is None else str(rec.status),
        "subtask_bound_mib": None if rec is None or rec.best_bound is None
        else rec.best_bound / MIB,
        "boundary_at_peak": [{"storage": s, "mib": sz / MIB, "kind": k, "class": c}
                             for sz, s, k, c in boundary[:3]],
        "unforced_at_peak_mib": unforced / MIB,
        "bound_op": old.op_id,
        "verdict": verdict,
        "seconds": {"plan_tree": t_plan0, "plan_search": t_plan1, "choice": t_choice,
                    "window": t_window, "chain_group": t_chain},
    }


def main(argv: list[str]) -> None:
    files = sorted((ROOT.parent / "sample_graphs").glob("*-roam.json.gz"))
    for d in argv:
        files += sorted(Path(d).glob("*.json.gz"))
    rows = []
    for f in files:
        row = diagnose(f)
        rows.append(row)
        print(f"{row['file']}: {row['planned_tree_mib']:.1f} -> {row['planned_search_mib']:.1f}"
              f" MiB, bound {row['best_bound_mib']:.1f}, gap {row['gap_before']:.4f} -> "
              f"{row['proven_gap']:.4f} ({row['verdict']})", flush=True)
        write(rows)  # after every graph, so an interrupted run keeps what it measured


def write(rows: list[dict]) -> None:
    out = ROOT / "results"
    (out / "gap_diagnosis.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "# Gap diagnosis (issue 13)", "",
        "Produced by `benchmarks/gap_diagnosis.py` (see its docstring). MiB include resident "
        "bytes, 512 B rounding. `tree` = make_plan without the new search (the planner before "
        "this change: task tree + CP-SAT sub-tasks + polishing); `search` = default make_plan "
        "(adds the peak-directed search over the whole order on the input graph). Bounds are "
        "valid for every order: `old` = bounds.best_lower_bound (live-set / update-group), "
        "`choice` = per-op choice bound over free branches, `window` = CP-SAT restriction "
        "bound on a 61-step window around the peak (2 s deterministic), `chain` = "
        "chain-group bound (heavy chain + one free branch, exact DP). `gap before` = tree "
        "/ old, `proven gap` = search / best bound. Peak / sub-task / boundary columns are "
        "for the tree plan. Timing measured on 2 shared CPU cores: noisy.", "",
        "| graph | ops | tree MiB | search MiB | old | choice | window | chain | gap before | "
        "proven gap | peak op (phase) | sub-task (status) | largest boundary at peak | "
        "unforced at peak MiB | verdict | plan s (tree / search) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|---|",
    ]
    for r in rows:
        b = r["boundary_at_peak"]
        bnd = ", ".join(f"{x['storage']} {x['mib']:.1f} ({x['class']})" for x in b[:2]) or "-"
        lines.append(
            f"| {r['file'].removesuffix('.json.gz')} | {r['ops']} | {r['planned_tree_mib']:.1f} "
            f"| {r['planned_search_mib']:.1f} | {r['old_bound_mib']:.1f} | "
            f"{r['choice_bound_mib']:.1f} | {r['window_bound_mib']:.1f} "
            f"({r['window_status']}) | {r['chain_group_bound_mib']:.1f} | "
            f"{r['gap_before']:.4f} | {r['proven_gap']:.4f} | "
            f"{r['peak_op']} ({r['peak_phase']}) | {r['subtask']} ({r['subtask_status']}) | "
            f"{bnd} | {r['unforced_at_peak_mib']:.1f} | {r['verdict']} | "
            f"{r['seconds']['plan_tree']:.1f} / {r['seconds']['plan_search']:.1f} |")
    (out / "gap_diagnosis.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
