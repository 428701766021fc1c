"""Per-rank plans for FSDP2: bytes per rank, the peer's peak, roam's eager and planned peaks.

Usage::

    nice python benchmarks/fsdp_rank_bench.py [--models gpt2 llama-125m] [--world-sizes 2 8 64]
                                              [--batch-size 2] [--seq-len 512]
                                              [--time-limit 20] [--out benchmarks/results]

For each model and world size W (FSDP2, ``fully_shard`` per block and the root, reshard after
forward, fp32, AdamW), in one run:

* the step of one rank is traced (fake process group) and compared with the single-device
  trace: parameter + optimizer-state bytes per rank against 1/W of the single device's (and
  against the padded shards FSDP2 holds);
* **the peer**: ``FSDPMemTracker`` (torch's FSDP2 memory tracker, on the fake process group,
  fake tensors) measures eager FSDP2's per-rank peak of the same step;
* **roam's simulated eager peak**: the live bytes of the traced rank step in program order
  (no rounding, as the tracker counts);
* **roam's planned peak**: ``make_plan`` on the rank's graph (the default 512-byte rounding,
  which only adds; compared with the eager peak at the same rounding), and its planning time
  (median of ``--repeats`` runs after a first, untimed one; wall and CPU seconds);
* **roam + recomputation**: the smallest arena roam reaches adding at most 5 % FLOPs
  (:func:`roam_core.planner.whatfits.fit_row`).

Goals (issue 29): parameter + optimizer bytes within 1 % of 1/W of the single device (plus
padding), simulated eager peak within 5 % of the tracker's, planned peak <= that, plan time at
W=64 <= 1.2x at W=2.  Writes ``fsdp_rank.md`` and ``fsdp_rank.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core


def _kind_bytes(graph: Any, kinds: tuple[str, ...]) -> int:
    return sum(t.size_bytes for t in graph.tensors.values() if t.kind.value in kinds)


def _single(model: str, b: int, t: int) -> dict[str, Any]:
    from roam_core.zoo.steps import trace_zoo

    g = trace_zoo(model, b, t, "steady").graph
    return {"param_bytes": _kind_bytes(g, ("parameter",)),
            "param_opt_bytes": _kind_bytes(g, ("parameter", "optimizer_state"))}


def _rank(model: str, b: int, t: int, w: int, single: dict[str, Any],
          args: argparse.Namespace) -> dict[str, Any]:
    from roam_core.model.parallel import ParallelSetting
    from roam_core.oracle.baseline import eager_report
    from roam_core.oracle.fsdp_eager import fsdp2_eager_peak_bytes
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import fit_row
    from roam_core.runtime.fsdp_peer import fsdp_mem_tracker_peak
    from roam_core.trace.parallel import RankLayout
    from roam_core.zoo import build_zoo_step
    from roam_core.zoo.steps import trace_zoo

    par = ParallelSetting("fsdp", w)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    g = trace_zoo(model, b, t, "steady", parallel=par).graph
    trace_s = time.perf_counter() - t0
    layout = RankLayout.build(build_zoo_step(model, b, t, "steady").model, par)
    padded = layout.bytes_per_rank(4)
    po = _kind_bytes(g, ("parameter", "optimizer_state"))
    eager = eager_report(g, 1)
    eager512 = eager_report(g, 512)
    cfg = PlannerConfig(workers=1, time_limit_s=args.time_limit)
    plan = make_plan(g, cfg)  # the first run also pays the solver's imports: not timed
    walls, cpus = [], []
    for _ in range(args.repeats):
        t1, c1 = time.perf_counter(), time.process_time()
        make_plan(g, cfg)
        walls.append(time.perf_counter() - t1)
        cpus.append(time.process_time() - c1)
    plan_wall, plan_cpu = statistics.median(walls), statistics.median(cpus)
    rec = fit_row(g, cfg, batch_size=b, seq_len=t, limits_pct=(5.0,))
    peer = fsdp_mem_tracker_peak(model, b, t, par)
    return {
        "model": model, "batch_size": b, "seq_len": t, "world_size": w, "ops": len(g),
        "param_bytes": _kind_bytes(g, ("parameter",)), "param_opt_bytes": po,
        "single_param_opt_bytes": single["param_opt_bytes"],
        "ideal_param_opt_bytes": single["param_opt_bytes"] / w,
        # parameters and AdamW's two moments at the padded shard size (+ the step counters)
        "padded_param_opt_bytes": 3 * padded,
        "param_opt_over_ideal": po / (single["param_opt_bytes"] / w),
        "communication_bytes": _kind_bytes(g, ("communication",)),
        "peer_peak_bytes": peer.peak_bytes, "peer_by_category": peer.bytes_by_category,
        "eager_sim_peak_bytes": eager.simulated_peak_bytes,
        "eager_over_peer": eager.simulated_peak_bytes / peer.peak_bytes,
        # with eager FSDP2's holds of the root's gathered parameters (oracle.fsdp_eager)
        "fsdp2_eager_peak_bytes": fsdp2_eager_peak_bytes(g),
        "fsdp2_eager_over_peer": fsdp2_eager_peak_bytes(g) / peer.peak_bytes,
        "eager_sim_peak_512_bytes": eager512.simulated_peak_bytes,
        "planned_peak_bytes": plan.planned_peak_bytes, "arena_bytes": plan.arena_bytes,
        "recompute_5pct_arena_bytes": rec.peak_bytes["roam_recompute_5pct"],
        "recompute_5pct_extra_time_pct": rec.extra_time_pct["roam_recompute_5pct"],
        "plan_baseline_peak_bytes": plan.baseline_peak_bytes,
        "planned_over_peer": plan.planned_peak_bytes / peer.peak_bytes,
        "plan_wall_seconds": plan_wall, "plan_cpu_seconds": plan_cpu,
        "trace_seconds": trace_s, "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def _mib(x: float) -> str:
    return f"{x / 2**20:,.1f}"


def _md(rows: list[dict[str, Any]], args: argparse.Namespace, when: str) -> str:
    lines = [
        "# Per-rank plans for FSDP2 against FSDPMemTracker",
        "",
        f"`python benchmarks/fsdp_rank_bench.py --models {' '.join(args.models)} --world-sizes "
        f"{' '.join(map(str, args.world_sizes))} --batch-size {args.batch_size} --seq-len "
        f"{args.seq_len} --time-limit {args.time_limit} --repeats {args.repeats}` on {when}, "
        f"{platform.machine()} with "
        f"{os.cpu_count()} CPUs (`nproc`); load averages per row. The machine is shared and "
        "was loaded while this ran: wall times are noisy, CPU seconds less so.",
        "",
        "FSDP2, `fully_shard` per block and on the root, reshard after forward, fp32, AdamW, "
        f"batch {args.batch_size} x {args.seq_len} tokens per rank. **Peer**: torch's "
        "`FSDPMemTracker` on the fake process group (fake tensors), two steps, its peak "
        "total. **Eager (roam)**: live bytes of roam's traced rank step in program order, "
        "unrounded; **+ holds**: the same with FSDP2's holds of the root's gathered "
        "parameters until its post-backward (`roam_core.oracle.fsdp_eager`). **Planned**: "
        "`make_plan`'s peak (512-byte rounding). All MiB per rank.",
        "",
        "| model | W | param+opt / (1/W single) | padded shards vs traced | peer peak | roam "
        "eager | eager/peer | + holds | holds/peer | roam eager (512 B) | roam planned | "
        "planned/peer | roam + "
        "recompute <=5% (extra FLOPs) | plan s (wall / CPU) | load 1-min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['world_size']} | {r['param_opt_over_ideal']:.4f} | "
            f"{_mib(r['padded_param_opt_bytes'])} vs {_mib(r['param_opt_bytes'])} | "
            f"{_mib(r['peer_peak_bytes'])} | {_mib(r['eager_sim_peak_bytes'])} | "
            f"{r['eager_over_peer']:.4f} | {_mib(r['fsdp2_eager_peak_bytes'])} | "
            f"{r['fsdp2_eager_over_peer']:.4f} | {_mib(r['eager_sim_peak_512_bytes'])} | "
            f"{_mib(r['planned_peak_bytes'])} | {r['planned_over_peer']:.4f} | "
            f"{_mib(r['recompute_5pct_arena_bytes'])} "
            f"({r['recompute_5pct_extra_time_pct']:.1f}%) | {r['plan_wall_seconds']:.2f} / "
            f"{r['plan_cpu_seconds']:.2f} | {r['load_before'][0]} -> {r['load_after'][0]} |")
    lines += ["", "Plan time at the largest world size over the smallest (goal <= 1.2):", ""]
    for m in args.models:
        mine = sorted((r for r in rows if r["model"] == m), key=lambda r: r["world_size"])
        if len(mine) >= 2:
            a, z = mine[0], mine[-1]
            lines.append(
                f"- {m}: W={z['world_size']} / W={a['world_size']}: wall "
                f"{z['plan_wall_seconds'] / a['plan_wall_seconds']:.2f}, CPU "
                f"{z['plan_cpu_seconds'] / a['plan_cpu_seconds']:.2f} (ops "
                f"{z['ops']} vs {a['ops']})")
    lines += ["", "Peer categories at its peak (MiB):", ""]
    for r in rows:
        cats = ", ".join(f"{k} {_mib(v)}" for k, v in r["peer_by_category"].items() if v)
        lines.append(f"- {r['model']} W={r['world_size']}: {cats}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama-125m"])
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[2, 8, 64])
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3, help="timed plans per row (median)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    when = datetime.date.today().isoformat()
    rows = []
    for m in args.models:
        single = _single(m, args.batch_size, args.seq_len)
        for w in args.world_sizes:
            print(f"fsdp_rank_bench: {m} W={w} ...", file=sys.stderr, flush=True)
            r = _rank(m, args.batch_size, args.seq_len, w, single, args)
            print(f"  eager/peer {r['eager_over_peer']:.4f}, planned/peer "
                  f"{r['planned_over_peer']:.4f}, plan {r['plan_wall_seconds']:.1f} s",
                  file=sys.stderr, flush=True)
            rows.append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fsdp_rank.json").write_text(json.dumps(
        {"date": when, "nproc": os.cpu_count(), "rows": rows}, indent=1, sort_keys=True) + "\n")
    (out / "fsdp_rank.md").write_text(_md(rows, args, when))
    print(f"wrote {out / 'fsdp_rank.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
