"""What fits for Hugging Face configs in bf16 mixed precision: largest batch per method.

Usage::

    nice python benchmarks/fit_hf_bench.py [--configs docs/examples/hf/llama-1b.json
        docs/examples/hf/gpt2-xl.json] [--seq-len 2048] [--memory 80GiB]
        [--precision bf16-mixed] [--batch-sizes 1 2 4 8 16 24 32]
        [--out benchmarks/results/fit_hf] [--keep] [--merge-casts]

A config entry is ``PATH[@ATTENTION][+KEY=VALUE...]``: the attention kernel
(``sdpa`` by default: what torch picks on CPU) and config settings to change, e.g.
``docs/examples/hf/gpt2-xl.json@flash+attn_pdrop=0`` (CPU's flash kernel has no dropout;
CUDA's flash kernel re-draws its dropout mask from a seed and saves what the CPU kernel saves
without dropout, so this models GPT2-XL with flash attention on a GPU).  ``--keep`` adds the
configs to an existing result file.  ``--merge-casts``: roam's methods plan the step with
autocast's repeated casts made once (``roam fit --merge-casts``,
:mod:`roam_core.trace.identical_casts`); eager's column is the step as eager runs it, both
traced in the same run.

The rules of ``roam fit --hf-config CONFIG --precision bf16-mixed --memory 80GiB --seq-lens
2048`` (:mod:`roam_core.zoo.fit_sweep`, :func:`roam_core.planner.whatfits.fit_row` with the
memory size): every batch is traced on fake tensors (steady AdamW step, the config's own
dropout, SDPA as torch picks it on CPU) and checked four ways: eager PyTorch's reserved
memory (the caching-allocator model on the program order: the baseline, measured in the
same run), roam's arena, and roam's cheapest recomputation plan that fits, counted for the
<= 5% / <= 25% methods when its extra time is within the limit (extra time estimated from
FLOPs: ``EXTRA_TIME_ESTIMATE``).  A config's sweep stops at the first batch nothing fits.
Each stage is timed, and the files are rewritten after every batch (``.json`` and ``.md``),
with the date, ``os.getloadavg()`` and ``nproc`` inside.
"""

from __future__ import annotations

import argparse
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


def parse_entry(entry: str) -> tuple[str, str, dict[str, Any]]:
    """``PATH[@ATTENTION][+KEY=VALUE...]`` -> ``(path, attention, settings)``."""
    head, *sets = entry.split("+")
    path, _, attention = head.partition("@")
    settings: dict[str, Any] = {}
    for s in sets:
        k, _, v = s.partition("=")
        try:
            settings[k] = json.loads(v)
        except ValueError:
            settings[k] = v
    return path, attention or "sdpa", settings


def measure(config: str, batch: int, seq: int, memory: int, precision: str,
            merge_casts: bool = False) -> dict[str, Any]:
    """Trace one batch and measure it as ``roam fit`` does, with stage timings
    (``merge_casts``: as ``roam fit --merge-casts``, eager on the step as eager runs it, roam
    on the step with autocast's repeated casts made once; traced twice)."""
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import fit_row
    from roam_core.zoo.sources import ModelSource

    path, attention, settings = parse_entry(config)
    t0 = time.perf_counter()
    src = ModelSource(hf_config=path, hf_overrides=settings)
    g = src.trace(batch, seq, precision=precision, attention=attention).graph
    eager = None
    if merge_casts:
        eager, g = g, src.trace(batch, seq, precision=precision, attention=attention,
                                merge_casts=True).graph
    trace_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    row = fit_row(g, PlannerConfig(workers=1), batch_size=batch, seq_len=seq,
                  memory_bytes=memory, eager_graph=eager)
    return {"batch_size": batch, "seq_len": seq, "graph": g.name, "ops": len(g.ops),
            "resident_bytes": g.resident_bytes(), "peak_bytes": dict(row.peak_bytes),
            "extra_time_pct": dict(row.extra_time_pct), "fits": row.fits(memory),
            "trace_s": trace_s, "plan_s": time.perf_counter() - t0,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def largest(rows: list[dict[str, Any]]) -> dict[str, int | None]:
    """Largest batch per method that fits, counting only batches whose smaller ones fit."""
    out: dict[str, int | None] = {}
    for m in METHODS:
        best = None
        for r in sorted(rows, key=lambda r: r["batch_size"]):
            if not r["fits"][m]:
                break
            best = r["batch_size"]
        out[m] = best
    return out


def _cell(r: dict[str, Any], m: str) -> str:
    b = r["peak_bytes"][m] / GIB
    pct = r["extra_time_pct"].get(m)
    tail = ""
    if m.startswith("roam_recompute") and pct:
        # a method that does not fit shows its lowest peak within its limit, and the extra
        # time the cheapest plan that fits would need
        tail = f" (+{pct:.2f}%)" if r["fits"][m] else f" (fits at +{pct:.2f}%)"
    return f"{b:.2f}{' ✓' if r['fits'][m] else ''}{tail}"


def write(res: dict[str, Any], out: Path) -> None:
    """The result files (rewritten after every batch)."""
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    mem = res["memory_bytes"] / GIB
    lines = [f"# What fits: Hugging Face configs, {res['precision']}, t{res['seq_len']}, "
             f"{mem:g} GiB", "",
             f"Produced by `benchmarks/fit_hf_bench.py` on {res['date']} (UTC); machine: "
             f"{res['nproc']} cores, load average {res['load_start']} at the start and "
             f"{res.get('load_end', '?')} at the end (a shared machine: other sessions were "
             "running; timings are noisy, byte figures are not).", "",
             "Rules of `roam fit --hf-config CONFIG --precision "
             f"{res['precision']} --memory {mem:g}GiB --seq-lens {res['seq_len']}`: steady "
             "AdamW step traced on fake tensors (no weights); **eager reserved** (the baseline, "
             "same run) = the caching-allocator model's reserved bytes on the program order; "
             "**roam** = its arena; **roam <= p%** = the cheapest recomputation plan whose arena "
             f"fits, counted when its extra time is <= p% ({res['extra_time_estimate']}).  "
             "A ✓ marks a method that fits.", ""]
    for name, c in res["configs"].items():
        lines += [f"## {name}", "", f"`{c['path']}`; resident (fp32 weights + AdamW state): "
                  f"{c['rows'][0]['resident_bytes'] / GIB:.2f} GiB" if c["rows"] else "", "",
                  "| batch | ops | eager reserved GiB | roam GiB | roam <= 5% GiB | "
                  "roam <= 25% GiB | trace s | plan s | max RSS MiB |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in c["rows"]:
            lines.append(f"| {r['batch_size']} | {r['ops']:,} | "
                         + " | ".join(_cell(r, m) for m in METHODS)
                         + f" | {r['trace_s']:.0f} | {r['plan_s']:.0f} | {r['max_rss_mib']} |")
        lg = largest(c["rows"])
        lines += ["", "Largest batch that fits (every smaller batch of the sweep fits too):",
                  "", "| method | largest batch |", "|---|---:|"]
        lines += [f"| {m} | {lg[m] if lg[m] is not None else 'none'} |" for m in METHODS]
        e, r5 = lg["eager_reserved"], lg["roam_recompute_5pct"]
        if e and r5:
            lines += ["", f"roam with <= 5% extra time fits batch {r5}, "
                          f"{r5 / e:.2f}x eager reserved's {e} (goal: >= 2x)."]
        lines.append("")
    lines += [f"- {n}" for n in res.get("notes", [])]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    from roam_core.commands.arg_types import size_bytes
    from roam_core.planner.whatfits import EXTRA_TIME_ESTIMATE

    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", default=["docs/examples/hf/llama-1b.json",
                                                     "docs/examples/hf/gpt2-xl.json"])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--memory", type=size_bytes, default=80 * GIB)
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    ap.add_argument("--out", default="benchmarks/results/fit_hf")
    ap.add_argument("--keep", action="store_true", help="add to an existing result file")
    ap.add_argument("--merge-casts", action="store_true",
                    help="roam's methods on the step with autocast's repeated casts made "
                         "once (roam fit --merge-casts); eager's column unchanged")
    args = ap.parse_args()
    out = Path(args.out)
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_start": [round(x, 2) for x in os.getloadavg()], "nproc": os.cpu_count(),
        "precision": args.precision, "seq_len": args.seq_len, "memory_bytes": args.memory,
        "extra_time_estimate": EXTRA_TIME_ESTIMATE, "configs": {}, "notes": []}
    if args.keep and out.with_suffix(".json").exists():
        old = json.loads(out.with_suffix(".json").read_text())
        res["configs"], res["notes"] = old["configs"], old.get("notes", [])
        res["date"] = f"{old['date']} and {res['date']}"
        res["load_start"] = f"{old['load_start']}, then {res['load_start']}"
    for entry in args.configs:
        path, attention, settings = parse_entry(entry)
        name = Path(path).stem + ("" if attention == "sdpa" else f", attention {attention}") \
            + "".join(f", {k}={v}" for k, v in settings.items()) \
            + (", roam with merge_casts" if args.merge_casts else "")
        res["configs"][name] = {"path": entry, "rows": []}
        for b in sorted(args.batch_sizes):
            row = measure(entry, b, args.seq_len, args.memory, args.precision,
                          args.merge_casts)
            res["configs"][name]["rows"].append(row)
            res["load_end"] = [round(x, 2) for x in os.getloadavg()]
            write(res, out)
            print(json.dumps(row), flush=True)
            if not any(row["fits"].values()):
                break
    write(res, out)


if __name__ == "__main__":
    main()
