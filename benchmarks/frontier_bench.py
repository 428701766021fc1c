"""Recomputation frontier benchmark, in time: roam at several budgets beside its peers.

Usage::

    nice python benchmarks/frontier_bench.py [--only NAME] [--budgets 8] [--profile h100-sxm]
        [--no-min-cut] [--no-autosac] [--layout-time-limit 60] [--out benchmarks/results]
        [--png assets/frontier.png]
    nice python benchmarks/frontier_bench.py --only gpt2-xl --plan-at 18809
    python benchmarks/frontier_bench.py --plot-only [--png assets/frontier.png]

For each config (steady AdamW steps; math attention for the transformers) the step is
traced and :func:`roam_core.planner.budget_frontier.recompute_frontier` plans roam at
``--budgets`` budgets (plus each peer's memory and the midway one) with the time objective
on the ``--profile`` device profile, beside every peer on the same simulator, planner stages
and cost model:

* the module-structure baselines (every block, every 2nd block, sqrt(n) segments,
  ``checkpoint_sequential``, selective attention), drop sets on the same graph;
* torch's min-cut partitioner at ``activation_memory_budget`` 0.1 ... 1.0, its decision
  mapped onto the graph (:mod:`roam_core.trace.min_cut`);
* ``torch_checkpoint_blocks``: the model with every block in ``torch.utils.checkpoint``,
  traced (the real one);
* ``torch_sac_save_matmuls``: every block in ``torch.utils.checkpoint`` under the "save
  matmuls" selective policy (``create_selective_checkpoint_contexts``: matmul and attention
  outputs saved, the rest recomputed), traced (:mod:`roam_core.zoo.traced_peers`);
* ``torch_autosac_<k>``: torch's AutoSAC ILP at 5 budgets, its decisions run in the model
  and traced (:mod:`roam_core.zoo.autosac`).

``peak`` is each plan's arena (resident included); extra time is the cost model's estimate
(roofline of FLOPs and bytes plus launch overhead), FLOPs and bytes moved are kept as
columns.  Goals per config (issue 27): every peer point has a roam point with no more
memory and no more extra time; at the midway budget roam's extra time is at most 1/4 of
every block's (moonshot 1/10); roam's lowest peak is at most the real every-block
checkpoint's.  ``--plot-only`` redraws the PNG from the committed ``frontier.json``.
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

MIB = 2**20
#: (model, batch, seq_len), small first: the big ones run at the end.
CONFIGS = [("resnet50", 32, None), ("llama", 4, 256), ("vit_b_16", 32, None),
           ("gpt2", 2, 512), ("gpt2-xl", 1, 1024)]


def planner_config(args: argparse.Namespace) -> Any:
    """The planner settings of every roam plan here: one process, 2 deterministic seconds
    per ordering solve, ``--layout-time-limit`` CPU seconds of layout safety limit."""
    from roam_core.planner.config import PlannerConfig

    return PlannerConfig(workers=1, layout_time_limit_s=args.layout_time_limit).with_order(
        time_limit_s=2.0).with_recompute(device_profile=args.profile)


def _trace(name: str, batch: int, seq: int | None) -> Any:
    from roam_core.zoo import ZOO, trace_zoo

    attention = "math" if ZOO[name].family in ("gpt", "roberta") or name == "vit_b_16" \
        else None
    return trace_zoo(name, batch, seq, "steady", attention=attention)


def plan_at(name: str, batch: int, seq: int | None, mib: float, args: argparse.Namespace
            ) -> dict[str, Any]:
    """One budget only (``--plan-at MIB``): :meth:`BudgetPlanner.plan_at` with this
    benchmark's planner settings and, as the frontier plans its budgets, the portfolio on
    (``roam plan --budget B --portfolio``)."""
    from roam_core.base.errors import BudgetInfeasibleError
    from roam_core.planner.budget import BudgetPlanner

    load0 = os.getloadavg()
    g = _trace(name, batch, seq).graph
    t0, c0 = time.perf_counter(), time.process_time()
    bp = BudgetPlanner(g, planner_config(args), portfolio=True)
    out: dict[str, Any] = {"config": g.name, "budget_mib": mib,
                           "layout_time_limit_s": args.layout_time_limit}
    try:
        p = bp.plan_at(int(mib * MIB))
        out.update(fits=True, arena_mib=p.arena_bytes / MIB,
                   planned_peak_mib=p.planned_peak_bytes / MIB,
                   extra_ms=1e3 * p.extra_seconds, reruns=len(p.recompute),
                   notes=[n for n in p.notes if "again" in n or "overshot" in n
                          or "portfolio" in n])
    except BudgetInfeasibleError as e:
        out.update(fits=False, smallest_mib=e.smallest_peak_bytes / MIB, message=str(e))
    out.update(plans_made=len(bp.made), relaid=len(bp.relaid_keys()),
               wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
               load_before=load0, load_after=os.getloadavg(),
               run_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
    return out


def run_config(name: str, batch: int, seq: int | None, args: argparse.Namespace
               ) -> dict[str, Any]:
    from roam_core.commands.frontier import min_cut_record, point_dict
    from roam_core.formats.device_profile_io import resolve_profile
    from roam_core.planner.budget_frontier import recompute_frontier, step_time
    from roam_core.trace.min_cut import MIN_CUT_BUDGETS
    from roam_core.zoo.min_cut import zoo_min_cut
    from roam_core.zoo.traced_peers import traced_peers

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    traced = _trace(name, batch, seq)
    g = traced.graph
    trace_s = time.perf_counter() - t0
    notes: list[str] = []
    t0, c0 = time.perf_counter(), time.process_time()
    mc = None if args.no_min_cut else zoo_min_cut(g, MIN_CUT_BUDGETS, traced=traced)
    extra = {d.method: d.dropped for d in mc.decisions} if mc else {}
    if mc is not None:
        if mc.reason is not None:
            notes.append(f"baseline torch_min_cut: not applicable ({mc.reason})")
        notes.extend(f"torch_min_cut: {n}" for n in mc.notes)
    peers, sac, more = traced_peers(g, resolve_profile(args.profile),
                                    autosac_points=0 if args.no_autosac else 5)
    notes.extend(more)
    peers_s = (time.perf_counter() - t0, time.process_time() - c0)
    t0, c0 = time.perf_counter(), time.process_time()
    cfg = planner_config(args)
    sf, points, fnotes = recompute_frontier(g, cfg, budgets=args.budgets, extra_baselines=extra,
                                            traced_peers=peers, fewest_flops=False)
    ss, profile = step_time(g, cfg)
    return {"config": g.name, "ops": len(g.ops), "step_flops": sf, "step_seconds": ss,
            "device_profile": profile, "resident_bytes": g.resident_bytes(),
            "trace_s": trace_s, "peers_s": peers_s[0], "peers_cpu_s": peers_s[1],
            "frontier_s": time.perf_counter() - t0,
            "frontier_cpu_s": time.process_time() - c0,
            "load_before": load0, "load_after": os.getloadavg(), "budgets": args.budgets,
            "run_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "points": [point_dict(p) for p in points],
            "torch_min_cut": min_cut_record(mc) if mc is not None else None,
            "torch_autosac": sac, "notes": fnotes + notes}


def goals(res: dict[str, Any]) -> dict[str, Any]:
    """The issue's three frontier goals for one config, in time."""
    pts = res["points"]
    roam = [p for p in pts if p["method"] == "roam"]
    peers = [p for p in pts if p["method"] != "roam"]
    eps = 1e-9

    def beaten_by(p: dict[str, Any]) -> bool:
        return not any(r["peak_bytes"] <= p["peak_bytes"]
                       and r["extra_seconds"] <= p["extra_seconds"] + eps for r in roam)

    out: dict[str, Any] = {"peers_beating_roam": [p["method"] for p in peers if beaten_by(p)]}
    by = {p["method"]: p for p in peers}
    none, blocks = by.get("none"), by.get("checkpoint_blocks")
    if none and blocks and blocks["extra_seconds"] > 0:
        mid = (none["peak_bytes"] + blocks["peak_bytes"]) / 2
        best = min((r["extra_seconds"] for r in roam if r["peak_bytes"] <= mid), default=None)
        out["midway_bytes"] = int(mid)
        out["midway_ratio"] = None if best is None else best / blocks["extra_seconds"]
    real = by.get("torch_checkpoint_blocks") or blocks
    if real is not None and roam:
        out["real_blocks_method"] = real["method"]
        out["real_blocks_bytes"] = real["peak_bytes"]
        out["roam_lowest_bytes"] = min(r["peak_bytes"] for r in roam)
        out["lowest_peak_ok"] = out["roam_lowest_bytes"] <= real["peak_bytes"]
    return out


def _ms(s: float) -> str:
    return f"{1e3 * s:,.3f}"


def _peer_lines(r: dict[str, Any]) -> list[str]:
    """torch's min-cut and AutoSAC decisions beside the roam point at or below each."""
    out: list[str] = []
    ss = r["step_seconds"] or 1e-12
    roam = [p for p in r["points"] if p["method"] == "roam"]
    pts = {p["method"]: p for p in r["points"]}

    def roam_at(peak: int) -> str:
        at = [q for q in roam if q["peak_bytes"] <= peak]
        q = min(at, key=lambda q: q["extra_seconds"], default=None)
        return "none" if q is None else f"+{_ms(q['extra_seconds'])} ms"

    mc = r.get("torch_min_cut")
    if mc and mc.get("applicable"):
        out += ["", f"torch's min-cut partitioner ({mc['matched_ops']} of {mc['forward_ops']} "
                    "forward ops matched):", "",
                "| activation_memory_budget | torch saves MiB | peak MiB | extra ms (% step) | "
                "extra FLOPs | roam at <= that peak |", "|---:|---:|---:|---:|---:|---:|"]
        for b in mc["budgets"]:
            p = pts.get(b["method"])
            if p is not None:
                out.append(f"| {b['activation_memory_budget']:g} | "
                           f"{b['saved_bytes'] / MIB:,.0f} | {p['peak_bytes'] / MIB:,.0f} | "
                           f"+{_ms(p['extra_seconds'])} "
                           f"({100 * p['extra_seconds'] / ss:.2f}%) | "
                           f"+{100 * p['extra_flops'] / max(r['step_flops'], 1):.2f}% | "
                           f"{roam_at(p['peak_bytes'])} |")
    elif mc:
        out.append(f"- torch min-cut: not applicable ({mc['reason']}).")
    sac = r.get("torch_autosac")
    if sac and sac.get("applicable") and sac["budgets"]:
        out += ["", "torch's AutoSAC (statistics priced by the same cost model; its ILP's "
                    "decisions run in the model and traced):", "",
                "| method | ILP budget MiB | ILP peak MiB | ILP recompute ms | modules | "
                "traced peak MiB | traced extra ms | roam at <= that peak |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for b in sac["budgets"]:
            p = pts.get(b["method"])
            if p is not None:
                out.append(f"| {b['method']} | {b['memory_budget_bytes'] / MIB:,.0f} | "
                           f"{b['ilp_peak_bytes'] / MIB:,.0f} | "
                           f"{_ms(b['ilp_recompute_seconds'])} | "
                           f"{b['checkpointed_modules']} | {p['peak_bytes'] / MIB:,.0f} | "
                           f"+{_ms(p['extra_seconds'])} | {roam_at(p['peak_bytes'])} |")
    elif sac:
        out.append(f"- torch AutoSAC: not applicable ({sac.get('reason')}).")
    return [*out, ""]


def write_md(results: list[dict[str, Any]], path: Path) -> None:
    lines = ["# Recomputation frontier in time: roam beside its peers", "",
             "Steady AdamW steps, math attention for the transformers, planned on the shared "
             "2-core machine (its load average is given per config; planning times are "
             "noisy, the plans are not).  `peak` is each plan's arena, resident bytes "
             "included.  Extra time is the cost model's estimate on the device profile named "
             "per config (`roam_core.model.cost_model`: per op max(FLOPs / peak x efficiency, "
             "bytes / bandwidth x efficiency) + 5 us launch, ops one after another), roam's "
             "objective; FLOPs (torch's formulas) and bytes moved are kept as columns.  Every "
             "peer runs on the same graph, simulator, planner stages and cost model: the "
             "module-structure baselines and torch's min-cut as drop sets on roam's graph; "
             "`torch_checkpoint_blocks` (every block in `torch.utils.checkpoint`), "
             "`torch_sac_save_matmuls` (every block under torch's \"save matmuls\" selective "
             "policy) and `torch_autosac_<k>` (torch's AutoSAC ILP) run in the model and "
             "traced by roam.",
             ""]
    for r in results:
        sf, ss = r["step_flops"] or 1, r["step_seconds"] or 1e-12
        g = goals(r)
        lines += [f"## {r['config']}", "",
                  f"{r['ops']} ops; step {sf / 1e9:,.1f} GFLOP, {_ms(ss)} ms estimated on "
                  f"{r['device_profile']}; resident {r['resident_bytes'] / MIB:,.0f} MiB.  "
                  f"Run {r['run_utc']} UTC: trace {r['trace_s']:.0f} s, peers (min-cut, "
                  f"checkpoint, AutoSAC) {r['peers_s']:.0f} s, frontier {r['frontier_s']:.0f} "
                  f"s ({r['frontier_cpu_s']:.0f} CPU s); load average "
                  f"{r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f} on "
                  f"{os.cpu_count()} CPUs.", "",
                  "| method | peak MiB | extra ms | % of step | extra FLOPs | re-runs | "
                  "MiB moved | roam kept |", "|---|---:|---:|---:|---:|---:|---:|---|"]
        for p in sorted(r["points"], key=lambda p: (p["method"] != "roam", -p["peak_bytes"])):
            lines.append(f"| {p['method']} | {p['peak_bytes'] / MIB:,.0f} | "
                         f"+{_ms(p['extra_seconds'])} | "
                         f"{100 * p['extra_seconds'] / ss:.2f}% | "
                         f"+{100 * p['extra_flops'] / sf:.2f}% | {p['recomputed_ops']} | "
                         f"{p['extra_bytes_moved'] / MIB:,.0f} | "
                         + (p.get("kept", "roam") if p["method"] == "roam" else "") + " |")
        beaten = g["peers_beating_roam"]
        lines += ["", "- **Dominance** (peak and extra time): "
                  + ("every peer point has a roam point as low and as fast." if not beaten
                     else "missed: " + ", ".join(beaten) + " have no roam point as low and "
                          "as fast.")]
        if "midway_ratio" in g:
            ratio = g["midway_ratio"]
            lines.append(f"- **Midway** ({g['midway_bytes'] / MIB:,.0f} MiB): roam's extra time "
                         + ("unreachable" if ratio is None else
                            f"is {ratio:.3f} x every block's")
                         + " (goal <= 0.25, moonshot <= 0.1"
                         + ("" if ratio is None else
                            ": goal " + ("met" if ratio <= 0.25 else "missed")
                            + ", moonshot " + ("met" if ratio <= 0.1 else "missed")) + ").")
        if "lowest_peak_ok" in g:
            lines.append(f"- **Lowest peak**: roam {g['roam_lowest_bytes'] / MIB:,.0f} MiB vs "
                         f"{g['real_blocks_method']} {g['real_blocks_bytes'] / MIB:,.0f} MiB: "
                         + ("met." if g["lowest_peak_ok"] else "missed."))
        lines += _peer_lines(r)
        lines += [f"- note: {n}" for n in r["notes"]] + [""]
    path.write_text("\n".join(lines) + "\n")


SYMBOLS = ("diamond", "square", "triangle-up", "cross", "star", "triangle-down", "x",
           "pentagon")


def write_png(res: dict[str, Any], path: Path) -> None:
    """One config's frontier in time: roam's line, each baseline a marker, torch's min-cut
    and AutoSAC points as series."""
    import plotly.graph_objects as go

    ss = res["step_seconds"] or 1e-12
    fig = go.Figure()
    roam = sorted((p for p in res["points"] if p["method"] == "roam"),
                  key=lambda p: p["peak_bytes"])
    fig.add_trace(go.Scatter(x=[1e3 * p["extra_seconds"] for p in roam],
                             y=[p["peak_bytes"] / MIB for p in roam],
                             mode="lines+markers", name="roam (one plan per budget)",
                             line={"width": 3, "color": "#d62728"}))
    others = [p for p in res["points"] if p["method"] != "roam"]
    series = {"torch_min_cut_": "torch min-cut (activation_memory_budget)",
              "torch_autosac_": "torch AutoSAC ILP"}
    for prefix, label in series.items():
        pts = [p for p in others if p["method"].startswith(prefix)]
        if pts:
            fig.add_trace(go.Scatter(
                x=[1e3 * p["extra_seconds"] for p in pts], y=[p["peak_bytes"] / MIB for p in pts],
                mode="markers+text" if prefix == "torch_min_cut_" else "markers", name=label,
                text=[p["method"].removeprefix(prefix) for p in pts],
                textposition="top center",
                marker={"size": 11, "symbol": "circle-open" if prefix == "torch_min_cut_"
                        else "hexagon-open", "line": {"width": 2}}))
    single = [p for p in others if not p["method"].startswith(tuple(series))]
    for k, p in enumerate(single):
        fig.add_trace(go.Scatter(x=[1e3 * p["extra_seconds"]], y=[p["peak_bytes"] / MIB],
                                 mode="markers", name=p["method"],
                                 marker={"size": 12, "symbol": SYMBOLS[k % len(SYMBOLS)]}))
    fig.update_layout(
        title=f"{res['config']}: peak memory vs extra time per step (estimated on "
              f"{res['device_profile']}; step {1e3 * ss:.1f} ms)",
        xaxis_title="extra time per step (ms, cost model)",
        yaxis_title="peak memory (arena, MiB, resident included)", width=1150, height=560,
        template="plotly_white", legend={"x": 1.02, "y": 1.0})
    fig.write_image(str(path))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None,
                    help="comma-separated models to (re)run; the others are kept from the "
                         "existing frontier.json")
    ap.add_argument("--budgets", type=int, default=8)
    ap.add_argument("--profile", default="h100-sxm")
    ap.add_argument("--no-min-cut", action="store_true")
    ap.add_argument("--no-autosac", action="store_true")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--png", default="assets/frontier.png")
    ap.add_argument("--png-config", default="gpt2-b2", help="the config drawn (prefix)")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw the PNG from the committed frontier.json")
    ap.add_argument("--layout-time-limit", type=float, default=60.0,
                    help="the layout's safety limit, CPU seconds (the planner's default)")
    ap.add_argument("--plan-at", type=float, default=None, metavar="MIB",
                    help="only plan the --only model at this budget (MiB), portfolio on, "
                         "and print it")
    args = ap.parse_args()
    if args.plan_at is not None:
        for name, b, t in CONFIGS:
            if name == args.only:
                print(json.dumps(plan_at(name, b, t, args.plan_at, args), indent=1),
                      flush=True)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    old = out / "frontier.json"
    if not args.plot_only:
        kept = json.loads(old.read_text()) if args.only and old.exists() else []
        kept = [k for k in kept if "step_seconds" in k]  # results in time only
        wanted = args.only.split(",") if args.only else None
        for name, b, t in CONFIGS:
            if wanted and name not in wanted:
                continue
            r = run_config(name, b, t, args)
            r["goals"] = goals(r)
            print(json.dumps({"config": r["config"], "goals": r["goals"],
                              "frontier_s": round(r["frontier_s"], 1)}), flush=True)
            kept = [k for k in kept if k["config"] != r["config"]] + [r]
            order = {f"{n}-b{bb}": i for i, (n, bb, _) in enumerate(CONFIGS)}
            kept.sort(key=lambda k: min((i for p, i in order.items()
                                         if k["config"].startswith(p + "-")), default=99))
            old.write_text(json.dumps(kept, indent=1))
            write_md(kept, out / "frontier.md")
    if args.png:
        allr = json.loads(old.read_text())
        first = next((r for r in allr if r["config"].startswith(args.png_config)), allr[0])
        write_png(first, Path(args.png))


if __name__ == "__main__":
    main()
