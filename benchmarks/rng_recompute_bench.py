"""Recomputing dropout: the recomputation frontier before and after random ops may be re-run.

Usage::

    nice python benchmarks/rng_recompute_bench.py [--configs gpt2:1:256,gpt2:2:512]
        [--budgets 6] [--out benchmarks/results]

For each config (zoo GPT-2 124M, dropout 0.1, steady AdamW, math attention) the step is
traced once.  Two graphs are planned through the same stages
(:func:`roam_core.planner.budget_frontier.recompute_frontier`: roam at ``--budgets`` budgets plus
each baseline's memory, and the module-structured baselines):

* **before** -- the random ops marked not recomputable (roam's rule until now: a dropout
  mask is always kept, ``checkpoint_blocks`` keeps every block's masks);
* **after** -- the tracer's verdict: dropout draws are replayed from the recorded RNG state,
  so masks (CPU: ``empty_like`` -> ``bernoulli_`` -> ``div_``, a float32 tensor the size of
  the activation) may be dropped and re-drawn, as ``torch.utils.checkpoint`` does.

"after" is also planned at every budget of "before" (same budgets, fewer FLOPs or the same).
Peaks are plan arenas (resident bytes included); extra FLOPs are torch's formulas recorded at
trace time (dropout's re-run is elementwise: 0 FLOPs by torch's count, bytes moved are
counted by the planner's cost).  Timings on the shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

MIB = 2**20


def _points(pts: Any) -> list[dict[str, Any]]:
    return [{"method": p.method, "peak_bytes": p.peak_bytes, "extra_flops": p.extra_flops,
             "budget_bytes": p.budget_bytes, "recomputed_ops": p.recomputed_ops} for p in pts]


def run_config(name: str, batch: int, seq: int, budgets: int) -> dict[str, Any]:
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.model.recompute_ops import inplace_built_storages
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.budget_frontier import recompute_frontier
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    t0 = time.perf_counter()
    after = trace_zoo(name, batch, seq, "steady", attention="math").graph
    trace_s = time.perf_counter() - t0
    before = replace(after, ops=tuple(replace(o, recomputable=False) if o.random else o
                                      for o in after.ops))
    random_ops = [o for o in after.ops if o.random]
    masks = [s for s in inplace_built_storages(after)
             if any(after.op(w).random for w in after.tensors[s].consumers)]
    cfg = PlannerConfig(workers=1, layout_time_limit_s=5.0).with_order(time_limit_s=2.0)
    out: dict[str, Any] = {
        "config": after.name, "ops": len(after.ops), "random_ops": len(random_ops),
        "mask_storages": len(masks),
        "mask_bytes": sum(after.tensors[s].size_bytes for s in masks),
        "inplace_built_before": len(inplace_built_storages(before)),
        "resident_bytes": after.resident_bytes(), "trace_s": trace_s}
    for label, g in (("before", before), ("after", after)):
        t0 = time.perf_counter()
        sf, pts, notes = recompute_frontier(g, cfg, budgets=budgets)
        out["step_flops"] = sf
        out[label] = {"points": _points(pts), "notes": notes,
                      "frontier_s": time.perf_counter() - t0}
    # "after" at the budgets "before" was planned at
    bp = BudgetPlanner(after, cfg)
    same: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for b in sorted({p["budget_bytes"] for p in out["before"]["points"]
                     if p["method"] == "roam" and p["budget_bytes"]}, reverse=True):
        try:
            p = bp.plan_at(int(b))
        except BudgetInfeasibleError:
            continue
        same.append({"budget_bytes": int(b), "peak_bytes": p.arena_bytes,
                     "extra_flops": p.extra_flops, "recomputed_ops": len(p.recompute),
                     "recomputed_random": sum(after.op(r.source).random
                                              for r in p.recompute)})
    out["after_at_before_budgets"] = same
    out["after_at_before_budgets_s"] = time.perf_counter() - t0
    return out


def _summary(side: dict[str, Any]) -> dict[str, Any]:
    pts = side["points"]
    roam = [p for p in pts if p["method"] == "roam"]
    by = {p["method"]: p for p in pts if p["method"] != "roam"}
    none, blocks = by.get("none"), by.get("checkpoint_blocks")
    s: dict[str, Any] = {"roam_lowest_bytes": min(p["peak_bytes"] for p in roam)}
    s["roam_lowest_extra_flops"] = min(p["extra_flops"] for p in roam
                                       if p["peak_bytes"] == s["roam_lowest_bytes"])
    if none and blocks:
        s["none_bytes"] = none["peak_bytes"]
        s["blocks_bytes"], s["blocks_extra_flops"] = blocks["peak_bytes"], blocks["extra_flops"]
        mid = (none["peak_bytes"] + blocks["peak_bytes"]) // 2
        at = [p["extra_flops"] for p in roam if p["peak_bytes"] <= mid]
        s["midway_bytes"] = mid
        s["midway_extra_flops"] = min(at) if at else None
        s["roam_at_or_below_blocks"] = [p for p in roam if p["peak_bytes"] <= blocks["peak_bytes"]
                                        and p["extra_flops"] <= blocks["extra_flops"]] != []
    return s


def write_md(results: list[dict[str, Any]], path: Path) -> None:
    lines = ["# Recomputing dropout: frontier before and after random ops may be re-run", "",
             "Zoo GPT-2 124M (dropout 0.1), steady AdamW, math attention, planned on the "
             "shared 2-core machine (timings noisy, several sessions at once).  **before**: "
             "random ops marked not recomputable (every dropout mask kept, roam's rule until "
             "now); **after**: masks re-drawn from the replayed RNG state.  Peaks are plan "
             "arenas, resident included; extra FLOPs are torch's counts as a share of the "
             "step (a dropout re-run is elementwise: 0 FLOPs by torch's count).  Baselines "
             "follow the same rules on each side (after: `checkpoint_blocks` re-draws the "
             "masks, as `torch.utils.checkpoint` does).  Produced by "
             "`benchmarks/rng_recompute_bench.py`.", ""]
    for r in results:
        sf = r["step_flops"] or 1
        b, a = _summary(r["before"]), _summary(r["after"])

        def pct(x: Any, sf: int = sf) -> str:
            return "unreachable" if x is None else f"+{100 * x / sf:.2f}%"

        lines += [f"## {r['config']}", "",
                  f"{r['ops']} ops, {r['random_ops']} random ops, {r['mask_storages']} "
                  f"dropout masks ({r['mask_bytes'] / MIB:,.0f} MiB); resident "
                  f"{r['resident_bytes'] / MIB:,.0f} MiB; step {sf / 1e9:.1f} GFLOP; trace "
                  f"{r['trace_s']:.0f} s, frontier before {r['before']['frontier_s']:.0f} s, "
                  f"after {r['after']['frontier_s']:.0f} s.", "",
                  "| | before | after |", "|---|---:|---:|",
                  f"| no recomputation, peak MiB | {b.get('none_bytes', 0) / MIB:,.0f} | "
                  f"{a.get('none_bytes', 0) / MIB:,.0f} |",
                  f"| every block (`checkpoint_blocks`), peak MiB | "
                  f"{b.get('blocks_bytes', 0) / MIB:,.0f} | "
                  f"{a.get('blocks_bytes', 0) / MIB:,.0f} |",
                  f"| every block, extra FLOPs | {pct(b.get('blocks_extra_flops'))} | "
                  f"{pct(a.get('blocks_extra_flops'))} |",
                  f"| roam lowest peak MiB | {b['roam_lowest_bytes'] / MIB:,.0f} | "
                  f"{a['roam_lowest_bytes'] / MIB:,.0f} |",
                  f"| roam lowest peak, extra FLOPs | {pct(b['roam_lowest_extra_flops'])} | "
                  f"{pct(a['roam_lowest_extra_flops'])} |",
                  f"| roam at the midway budget ({b.get('midway_bytes', 0) / MIB:,.0f} / "
                  f"{a.get('midway_bytes', 0) / MIB:,.0f} MiB), extra FLOPs | "
                  f"{pct(b.get('midway_extra_flops'))} | {pct(a.get('midway_extra_flops'))} |",
                  f"| roam reaches every block's peak at <= its FLOPs | "
                  f"{'yes' if b.get('roam_at_or_below_blocks') else 'no'} | "
                  f"{'yes' if a.get('roam_at_or_below_blocks') else 'no'} |", "",
                  "Same budgets (those planned for *before*):", "",
                  "| budget MiB | before: peak MiB | before: extra FLOPs | after: peak MiB | "
                  "after: extra FLOPs | after: dropout re-runs |",
                  "|---:|---:|---:|---:|---:|---:|"]
        bef = {p["budget_bytes"]: p for p in r["before"]["points"] if p["method"] == "roam"}
        for s in r["after_at_before_budgets"]:
            p = bef.get(s["budget_bytes"])
            if p is None:
                continue
            lines.append(f"| {s['budget_bytes'] / MIB:,.0f} | {p['peak_bytes'] / MIB:,.0f} | "
                         f"{pct(p['extra_flops'])} | {s['peak_bytes'] / MIB:,.0f} | "
                         f"{pct(s['extra_flops'])} | {s['recomputed_random']} |")
        lines += ["", "Frontier points:", "", "| side | method | peak MiB | extra FLOPs | "
                  "re-runs |", "|---|---|---:|---:|---:|"]
        for side in ("before", "after"):
            for p in sorted(r[side]["points"], key=lambda p: (p["method"] != "roam",
                                                              -p["peak_bytes"])):
                lines.append(f"| {side} | {p['method']} | {p['peak_bytes'] / MIB:,.0f} | "
                             f"{pct(p['extra_flops'])} | {p['recomputed_ops']} |")
        lines.append("")
        for side in ("before", "after"):
            for n in r[side]["notes"]:
                lines.append(f"- {side}: {n}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="gpt2:1:256",
                    help="comma-separated model:batch:seq (zoo token models)")
    ap.add_argument("--budgets", type=int, default=6)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in args.configs.split(","):
        name, b, t = spec.split(":")
        r = run_config(name, int(b), int(t), args.budgets)
        r["summary"] = {"before": _summary(r["before"]), "after": _summary(r["after"])}
        results.append(r)
        print(json.dumps({"config": r["config"], **r["summary"]}), flush=True)
        (out / "rng_recompute.json").write_text(json.dumps(results, indent=1))
        write_md(results, out / "rng_recompute.md")


if __name__ == "__main__":
    main()
