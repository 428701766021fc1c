"""What fits per rank: Llama-2-7B with FSDP2 on 8 ranks of 80 GiB, bf16-mixed, t4096.

Usage::

    nice python benchmarks/fit_fsdp_bench.py [--model llama2-7b] [--seq-len 4096]
        [--world-size 8] [--memory 80GiB] [--precision bf16-mixed]
        [--batch-sizes 1 2 3 4 6 8] [--out benchmarks/results/fit_fsdp]

The rules of ``roam fit --parallel fsdp`` (:func:`roam_core.zoo.fit_sweep.fit_config` with
``parallel``): each
per-rank batch size is traced as the step of one rank (fake process group, fake tensors,
FSDP2 per block and the root, reshard after forward, ``MixedPrecisionPolicy(bfloat16,
float32)``, AdamW) and checked against one device's memory four ways: PyTorch eager's reserved
memory (caching-allocator model on the program order), roam's arena, and roam's cheapest
recomputation plan that fits, counted for <= 5 % / <= 25 % extra time (the cost model's
estimate on the planner's device profile, h100-sxm by default).  Batches run in
increasing order and stop once no method fits; results are written after every batch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

GIB = 2**30
METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def _row(args: argparse.Namespace, batch: int, memory: int) -> dict[str, Any]:
    from roam_core.model.parallel import ParallelSetting
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo.fit_sweep import fit_config
    from roam_core.zoo.sources import ModelSource

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    par = ParallelSetting("fsdp", args.world_size)
    fit = fit_config(ModelSource(args.model), batch, args.seq_len, memory_bytes=memory,
                     precision=args.precision, attention=None,
                     planner=PlannerConfig(workers=1), parallel=par)
    fits = fit.fits(memory)
    rec = next((m for m in METHODS[2:] if fits.get(m)), None)
    row: dict[str, Any] = {
        "batch_size": batch, "seq_len": fit.seq_len, "graph": fit.graph_name,
        "world_size": par.world_size, "precision": args.precision,
        "eager_reserved_bytes": fit.peak_bytes["eager_reserved"],
        "roam_arena_bytes": fit.peak_bytes["roam"], "step_flops": fit.step_flops,
        "recompute_arena_bytes": fit.peak_bytes[rec] if rec else None,
        "recompute_extra_time_pct": fit.extra_time_pct.get(rec) if rec else None,
        "fits": {m: bool(fits.get(m)) for m in METHODS}}
    row["seconds"] = time.perf_counter() - t0
    row["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row["load_before"] = [round(x, 2) for x in load0]
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def _largest(rows: list[dict[str, Any]]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for m in METHODS:
        best = None
        for r in sorted(rows, key=lambda r: r["batch_size"]):
            if not r["fits"][m]:
                break
            best = r["batch_size"]
        out[m] = best
    return out


def _md(rows: list[dict[str, Any]], args: argparse.Namespace, when: str) -> str:
    def gib(x: int | None) -> str:
        return "—" if x is None else f"{x / GIB:.2f}"

    lines = [
        f"# What fits per rank: {args.model}, FSDP2 on {args.world_size} ranks, "
        f"{args.precision}, t{args.seq_len}, {args.memory} each",
        "",
        f"`python benchmarks/fit_fsdp_bench.py --model {args.model} --seq-len {args.seq_len} "
        f"--world-size {args.world_size} --memory {args.memory} --precision {args.precision} "
        f"--batch-sizes {' '.join(map(str, args.batch_sizes))}` on {when}, {os.cpu_count()} "
        "CPUs (`nproc`), a shared machine under load (load averages per row; times are "
        "noisy).  Each row is the step of one rank (fake process group, fake tensors): FSDP2 "
        "`fully_shard` per block and on the root, reshard after forward, FSDP2's "
        "`MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)` (fp32 master "
        "weights, gradients and AdamW state, sharded 1/W), per-rank batch x sequence.",
        "",
        "| batch per rank | eager reserved GiB | roam GiB | roam + recompute GiB (extra "
        "time, h100-sxm) | s | max RSS MiB | load 1-min |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        rec = ("fits without" if r["roam_arena_bytes"] <= r["memory_bytes"] else
               "no plan fits" if r["recompute_arena_bytes"] is None else
               f"{gib(r['recompute_arena_bytes'])} (+{r['recompute_extra_time_pct']:.2f}%)")
        lines.append(
            f"| {r['batch_size']} | {gib(r['eager_reserved_bytes'])} | "
            f"{gib(r['roam_arena_bytes'])} | {rec} | {r['seconds']:.0f} | "
            f"{r['max_rss_mib']:.0f} | {r['load_before'][0]} -> {r['load_after'][0]} |")
    lines += ["", "Largest per-rank batch that fits (every smaller batch fits too):", "",
              "| method | largest batch per rank |", "|---|---:|"]
    for m, b in _largest(rows).items():
        lines.append(f"| {m} | {'nothing fits' if b is None else b} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from roam_core.base.units import parse_size

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--memory", default="80GiB")
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    ap.add_argument("--out", default="benchmarks/results/fit_fsdp")
    args = ap.parse_args(argv)
    memory = parse_size(args.memory)
    when = datetime.date.today().isoformat()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for b in sorted(args.batch_sizes):
        print(f"fit_fsdp_bench: batch {b} ...", file=sys.stderr, flush=True)
        r = _row(args, b, memory)
        r["memory_bytes"] = memory
        rows.append(r)
        out.with_suffix(".json").write_text(json.dumps(
            {"date": when, "nproc": os.cpu_count(), "rows": rows,
             "largest": _largest(rows)}, indent=1, sort_keys=True) + "\n")
        out.with_suffix(".md").write_text(_md(rows, args, when))
        print(f"  {r['fits']} in {r['seconds']:.0f} s", file=sys.stderr, flush=True)
        if not any(r["fits"].values()):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
