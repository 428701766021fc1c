"""Trace benchmark: every zoo config, one fresh subprocess each (so max RSS is the trace's).

Usage::

    nice python benchmarks/trace_bench.py [--steady] [--only SUBSTRING] [--out benchmarks/results]

For each config the child process builds the model on the meta device, traces it with
:func:`roam_core.zoo.trace_zoo` (timed; max RSS read right after the trace), then computes
the program-order ("eager") peak with :func:`roam_core.oracle.simulate.simulate` and, when those
modules are available, the caching-allocator model's peak reserved
(:mod:`roam_core.oracle.allocator_sim`), the moved-state eager peak
(:mod:`roam_core.oracle.baseline`) and
the live-set lower bound (:mod:`roam_core.oracle.bounds`).  Results go to ``trace.md`` and
``trace.json`` in ``--out``.  Children run with ``OMP_NUM_THREADS=2``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MIB = 2**20

ROAM = [(m, b, None, "roam") for m in ("alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2",
                                        "efficientnet_b0", "vit_b_16", "roberta-base")
        for b in (1, 32)]
GPT2XL = [("gpt2-xl", b, 1024, "roam") for b in (1, 2, 4)]
STEADY = [("gpt2", 8, 1024, "steady"), ("gpt2-xl", 1, 1024, "steady"),
          ("resnet50", 32, None, "steady"), ("mobilenet_v2", 32, None, "steady"),
          ("roberta-base", 8, 512, "steady")]


def _child(model: str, batch: int, seq: int | None, setting: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    from roam_core.zoo import trace_zoo

    t1 = time.perf_counter()
    g = trace_zoo(model, batch, seq, setting).graph
    trace_s = time.perf_counter() - t1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    from roam_core.oracle.simulate import simulate

    row: dict[str, Any] = {
        "model": model, "batch": batch, "seq_len": g.origin.get("seq_len"), "setting": setting,
        "optimizer": g.origin.get("optimizer"), "ops": len(g), "storages": len(g.tensors),
        "aliases": len(g.aliases), "control_edges": len(g.control_edges),
        "trace_s": round(trace_s, 2), "process_s": None, "max_rss_bytes": rss,
        "resident_bytes": g.resident_bytes(),
        "eager_peak_bytes": simulate(g, g.op_ids).peak_bytes,
        "eager_reserved_bytes": None, "moved_state_peak_bytes": None, "lower_bound_bytes": None,
    }
    try:
        from roam_core.oracle.allocator_sim import simulate_allocator

        row["eager_reserved_bytes"] = simulate_allocator(g, g.op_ids).peak_reserved_bytes
    except ImportError:
        pass
    try:
        from roam_core.oracle.baseline import moved_state_order

        row["moved_state_peak_bytes"] = simulate(g, moved_state_order(g)).peak_bytes
    except ImportError:
        pass
    try:
        from roam_core.oracle.bounds import live_set_lower_bound

        row["lower_bound_bytes"] = live_set_lower_bound(g).bound_bytes
    except ImportError:
        pass
    row["process_s"] = round(time.perf_counter() - t0, 2)
    return row


def _run_child(cfg: tuple[str, int, int | None, str]) -> dict[str, Any]:
    model, batch, seq, setting = cfg
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    cmd = [sys.executable, __file__, "--child", model, str(batch), str(seq or 0), setting]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"model": model, "batch": batch, "seq_len": seq, "setting": setting,
                "error": tail[0]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def _mib(v: Any) -> str:
    return "" if v is None else f"{v / MIB:,.1f}"


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Trace benchmark",
        "",
        f"`python benchmarks/trace_bench.py` on {meta['machine']} ({meta['cpus']} CPUs), "
        f"torch {meta['torch']}, {meta['date']}. One fresh process per config "
        "(`OMP_NUM_THREADS=2`); trace s = building the meta model + make_fx + graph build; "
        "max RSS = the child process right after the trace. Memory in MiB, resident bytes "
        "(parameters, buffers, batch, resident optimizer state) included; eager = program "
        "order through `simulate` (512 B rounding); reserved = `allocator_sim` "
        "(caching-allocator model) in program order; moved = eager with optimizer-state "
        "creation moved to first use (`baseline.moved_state_order`); bound = live-set lower "
        "bound (`bounds`).",
        "",
        "| model | batch | seq | setting | ops | storages | trace s | max RSS MiB | resident "
        "| eager | reserved | moved | bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['seq_len'] or ''} | "
                         f"{r['setting']} | error: {r['error']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['seq_len'] or ''} | {r['setting']} | "
            f"{r['ops']:,} | {r['storages']:,} | {r['trace_s']:.1f} | "
            f"{r['max_rss_bytes'] / MIB:,.0f} | {_mib(r['resident_bytes'])} | "
            f"{_mib(r['eager_peak_bytes'])} | {_mib(r['eager_reserved_bytes'])} | "
            f"{_mib(r['moved_state_peak_bytes'])} | {_mib(r['lower_bound_bytes'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one config) and write the results."""
    ap = argparse.ArgumentParser(description="trace every zoo config and record its size")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "B", "T", "SETTING"))
    ap.add_argument("--steady", action="store_true", help="also the steady-setting configs")
    ap.add_argument("--only", default=None, help="only models whose name contains this")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    if args.child:
        m, b, t, s = args.child
        print(json.dumps(_child(m, int(b), int(t) or None, s)))
        return 0
    import torch

    configs = ROAM + GPT2XL + (STEADY if args.steady else [])
    if args.only:
        configs = [c for c in configs if args.only in c[0]]
    rows = []
    for cfg in configs:
        row = _run_child(cfg)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    meta = {"machine": platform.machine() + " " + platform.processor(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                       time.gmtime())}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "trace.md").write_text(_markdown(rows, meta))
    print(_markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
