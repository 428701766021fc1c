"""Precision benchmark: the same step in fp32, bf16-mixed, bf16 and fp16-mixed.

Usage::

    nice python benchmarks/precision_bench.py [--model gpt2] [--batch 2] [--seq-len 512]
        [--attention sdpa,math,flash] [--no-replay] [--out benchmarks/results/precision]

For one zoo configuration (default GPT-2 small, batch 2, 512 tokens, steady AdamW step), each
attention kernel (``--attention``, :mod:`roam_core.trace.attention`) and each precision: bytes
by kind and dtype of the traced graph, the eager peaks (simulation and caching-allocator
model), roam's plan (``make_plan``, default settings, 1 worker), and the one-arena replay
against eager on CPU (``execute_plan``, bit-equality). The fp32 row is the baseline, measured
in the same run. Goals (issue 28): pure ``bf16`` activation + temporary bytes <= 0.55 x fp32's,
parameter bytes 0.5 x, replay bit-exact. Writes ``.json`` and ``.md`` with the date,
``os.getloadavg()`` and ``nproc``.
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
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "fp16-mixed")
NOTES = [
    "`sdpa` is the kernel torch picks on the tracing device (CPU). The zoo GPT-2 has attention "
    "dropout 0.1, which the CPU flash kernel lacks, so on CPU `sdpa` runs torch's math kernel "
    "(`_scaled_dot_product_attention_math`). That kernel computes in fp32 for bf16/fp16 inputs "
    "(q, k, v and the B x H x T x T scores upcast; torch's default on every device unless "
    "`torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`), so the pure-bf16 `sdpa` "
    "row keeps fp32 attention temporaries: that is torch's behaviour, not a tracing artefact.",
    "On CUDA, `sdpa` picks flash attention for bf16 (dropout included: its mask is re-drawn from "
    "a seed, not saved) and the memory-efficient kernel for fp32; both save the output and a "
    "logsumexp, which the `flash` rows model (the CPU flash kernel, attention dropout off in "
    "the CPU numerics, with a warning). `math` is the zoo's explicit matmul/softmax attention, "
    "which keeps the model's dtype.",
]


def measure(model: str, batch: int, seq: int, precision: str, replay: bool,
            attention: str = "sdpa") -> dict[str, Any]:
    """Trace, plan and (optionally) replay one precision."""
    from roam_core.oracle.baseline import eager_report
    from roam_core.oracle.precision_bytes import bytes_by_dtype, weight_copies
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime.execution import execute_traced
    from roam_core.zoo import build_zoo_step, trace_zoo

    t0 = time.perf_counter()
    ts = trace_zoo(model, batch, seq, "steady", precision=precision, attention=attention)
    g = ts.graph
    trace_s = time.perf_counter() - t0
    rep = eager_report(g)
    t0 = time.perf_counter()
    plan = make_plan(g, PlannerConfig(workers=1))
    plan_s = time.perf_counter() - t0
    kinds = dict(rep.bytes_by_kind)
    row: dict[str, Any] = {
        "precision": precision, "attention": attention, "ops": len(g.ops),
        "bytes_by_kind": kinds,
        "bytes_by_kind_and_dtype": bytes_by_dtype(g),
        "activation_temporary_bytes": kinds.get("activation", 0) + kinds.get("temporary", 0),
        "weight_copy_bytes": sum(g.tensors[t].size_bytes for t in weight_copies(g)),
        "eager_peak_bytes": rep.simulated_peak_bytes,
        "eager_reserved_bytes": rep.peak_reserved_bytes,
        "planned_peak_bytes": plan.planned_peak_bytes, "arena_bytes": plan.arena_bytes,
        "trace_s": trace_s, "plan_s": plan_s}
    if replay:
        step = build_zoo_step(model, batch, seq, "steady", device="meta",
                              attention=attention)
        t0 = time.perf_counter()
        r = execute_traced(ts, step.model, step.example_inputs, plan, loss_fn=step.loss_fn,
                           optimizer=step.optimizer_factory, strict=False)
        row.update(max_abs_diff=r.max_abs_diff, numerics_ok=r.numerics_ok,
                   replay_s=time.perf_counter() - t0)
    return row


def write(res: dict[str, Any], out: Path) -> None:
    """The result files."""
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    attentions = list(dict.fromkeys(r.get("attention", "sdpa") for r in res["rows"]))
    lines = [f"# Precision: {res['model']} b{res['batch']} t{res['seq_len']}, steady AdamW", "",
             f"Produced by `benchmarks/precision_bench.py` on {res['date']} (UTC); machine: "
             f"{res['nproc']} cores, load average {res['load_start']} at the start and "
             f"{res.get('load_end', '?')} at the end (shared: timings are noisy, bytes are "
             "not).  fp32 is the baseline, measured in the same run.  Bytes are the traced "
             "graph's, each storage rounded up to 512 B; peaks and arenas in MiB.", "",
             "| attention | precision | params | activations | temporaries | act. + temp. "
             "(x fp32) | of which weight copies | eager peak | eager reserved | roam peak | "
             "roam arena | replay max abs diff |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    goals = []
    for a in attentions:
        rows = {r["precision"]: r for r in res["rows"] if r.get("attention", "sdpa") == a}
        lines += _rows(a, rows)
        goals += _goal(a, rows)
    lines += [""] + goals + [f"- {n}" for n in res.get("notes", [])]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _rows(attention: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """The table rows of one attention kernel (fp32 is the ratio's baseline)."""
    base = rows.get("fp32")
    lines = []
    for p in PRECISIONS:
        r = rows.get(p)
        if r is None:
            continue
        k = r["bytes_by_kind"]
        ratio = (f" ({r['activation_temporary_bytes'] / base['activation_temporary_bytes']:.3f})"
                 if base else "")
        diff = r.get("max_abs_diff")
        lines.append(
            f"| {attention} | {p} | {k.get('parameter', 0) / MIB:,.1f} | "
            f"{k.get('activation', 0) / MIB:,.1f} "
            f"| {k.get('temporary', 0) / MIB:,.1f} | "
            f"{r['activation_temporary_bytes'] / MIB:,.1f}{ratio} | "
            f"{r['weight_copy_bytes'] / MIB:,.1f} | {r['eager_peak_bytes'] / MIB:,.1f} | "
            f"{r['eager_reserved_bytes'] / MIB:,.1f} | {r['planned_peak_bytes'] / MIB:,.1f} | "
            f"{r['arena_bytes'] / MIB:,.1f} | {'—' if diff is None else f'{diff:g}'} |")
    return lines


def _goal(attention: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's goal line for pure bf16 against fp32, with one attention kernel."""
    base, b = rows.get("fp32"), rows.get("bf16")
    if not base or not b:
        return []
    at = b["activation_temporary_bytes"] / base["activation_temporary_bytes"]
    pr = b["bytes_by_kind"]["parameter"] / base["bytes_by_kind"]["parameter"]
    return [f"- Goal, pure bf16, attention {attention}: activation + temporary bytes "
            f"{at:.3f} x fp32 (goal <= 0.55), parameter bytes {pr:.3f} x (goal 0.5); replay "
            f"max |diff| {b.get('max_abs_diff', 'not run')}."]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--attention", default="sdpa,math,flash",
                    help="comma-separated attention kernels, each a set of rows")
    ap.add_argument("--no-replay", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/precision")
    args = ap.parse_args()
    res: dict[str, Any] = {"model": args.model, "batch": args.batch, "seq_len": args.seq_len,
                           "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                           "load_start": [round(x, 2) for x in os.getloadavg()],
                           "nproc": os.cpu_count(), "rows": [], "notes": []}
    res["notes"] = NOTES
    for a in args.attention.split(","):
        for p in PRECISIONS:
            row = measure(args.model, args.batch, args.seq_len, p, not args.no_replay, a)
            res["rows"].append(row)
            res["load_end"] = [round(x, 2) for x in os.getloadavg()]
            write(res, Path(args.out))
            print(json.dumps({k: v for k, v in row.items()
                              if k != "bytes_by_kind_and_dtype"}), flush=True)


if __name__ == "__main__":
    main()
