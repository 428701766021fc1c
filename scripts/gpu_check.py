"""Trace, plan and execute zoo models on one device; write every report to one folder.

Run by ``scripts/gpu_check.sh`` (which prepares the Python environment); usable directly::

    python scripts/gpu_check.py --device cuda --out benchmarks/results/gpu
    python scripts/gpu_check.py --smoke            # CPU, tiny models: the same pipeline

For every configuration ``MODEL:BATCH[:SEQ]`` the driver

1. traces the training step on the device (fake tensors) -> ``<cfg>.graph.json.gz``;
2. plans it with ROAM under a short time limit -> ``<cfg>.plan.json`` and the plan as a
   PyTorch memory snapshot ``<cfg>.plan.pickle`` (drag onto https://pytorch.org/memory_viz);
3. executes the plan in one arena and eager PyTorch, compares the numerics, and (CUDA)
   measures both peaks in fresh processes -> ``<cfg>.report.json``, plus recorded snapshots
   ``<cfg>.snapshots/{eager,planned}.pickle``;
4. writes ``summary.json`` and ``summary.md`` (one row per configuration).

A failing configuration is recorded (``error`` in the summary) and the others still run;
the exit status is 1 when any configuration failed or disagreed with eager.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_logger = logging.getLogger("gpu_check")

#: Default configurations on CUDA (MODEL:BATCH[:SEQ]); quick ones first, so that a run cut
#: short by the time limit still reports them (the summary is rewritten after each).
CUDA_CONFIGS = ("mobilenet_v2:32", "resnet50:32", "gpt2:8:1024", "gpt2-xl:1:1024")
#: Tiny configurations of the CPU smoke run.
SMOKE_CONFIGS = ("mlp:8", "tiny_gpt:2:32", "residual_block:4")
#: Planner seconds per configuration (the big graph gets more).
TIME_LIMITS_S = {"gpt2-xl": 60.0}
DEFAULT_TIME_LIMIT_S = 20.0


def _parse_config(text: str) -> tuple[str, int, int | None]:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise SystemExit(f"bad configuration {text!r}: expected MODEL:BATCH[:SEQ]")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None


def run_config(name: str, batch: int, seq_len: int | None, args: argparse.Namespace,
               out: Path) -> dict[str, Any]:
    """Trace, plan and execute one configuration; returns its summary row."""
    from roam_core.base.config import PlannerConfig
    from roam_core.formats.graph_io import save_graph
    from roam_core.formats.plan_io import save_plan
    from roam_core.formats.snapshot import load_snapshot, save_plan_snapshot
    from roam_core.planner import make_plan
    from roam_core.runtime.origin import execute_origin
    from roam_core.zoo import trace_zoo

    tag = f"{name}-b{batch}" + (f"-t{seq_len}" if seq_len else "")
    row: dict[str, Any] = {"config": tag, "model": name, "batch_size": batch,
                           "seq_len": seq_len, "device": args.device}
    t0 = time.perf_counter()
    ts = trace_zoo(name, batch, seq_len, args.setting, args.optimizer, device=args.device)
    g = ts.graph
    save_graph(g, out / f"{tag}.graph.json.gz")
    row.update(ops=len(g), storages=len(g.tensors), trace_s=round(time.perf_counter() - t0, 2))
    _logger.info("%s: traced %d ops in %.1f s", tag, len(g), row["trace_s"])

    t1 = time.perf_counter()
    limit = args.time_limit or TIME_LIMITS_S.get(name, DEFAULT_TIME_LIMIT_S)
    plan = make_plan(g, PlannerConfig(time_limit_s=limit, workers=args.workers))
    save_plan(plan, out / f"{tag}.plan.json")
    save_plan_snapshot(out / f"{tag}.plan.pickle", g, plan)
    row.update(plan_s=round(time.perf_counter() - t1, 2), plan_method=plan.method,
               baseline_peak_bytes=plan.baseline_peak_bytes,
               planned_peak_bytes=plan.planned_peak_bytes, arena_bytes=plan.arena_bytes,
               lower_bound_bytes=plan.lower_bound_bytes)
    _logger.info("%s: planned in %.1f s: eager %.1f MiB -> plan %.1f MiB, arena %.1f MiB",
                 tag, row["plan_s"], plan.baseline_peak_bytes / 2**20,
                 plan.planned_peak_bytes / 2**20, plan.arena_bytes / 2**20)

    t2 = time.perf_counter()
    snaps = out / f"{tag}.snapshots"
    report = execute_origin(g.origin, plan, device=args.device, steps=args.steps,
                            check_addresses=not args.no_address_check,
                            snapshot_dir=str(snaps) if args.device == "cuda" else None)
    body = report.to_dict() | {"graph": g.name, "plan_method": plan.method}
    (out / f"{tag}.report.json").write_text(json.dumps(body, indent=2) + "\n")
    row.update(execute_s=round(time.perf_counter() - t2, 2), **{k: body[k] for k in (
        "max_abs_diff", "numerics_ok", "eager_peak_allocated_bytes", "eager_peak_reserved_bytes",
        "planned_peak_allocated_bytes", "planned_peak_reserved_bytes", "extra_bytes",
        "out_variant_ops", "fallback_ops", "seconds_per_step_eager",
        "seconds_per_step_planned")})
    for which in ("eager", "planned"):
        path = snaps / f"{which}.pickle"
        if path.exists():
            try:
                row[f"{which}_snapshot_peak_bytes"] = load_snapshot(path).peak_bytes
            except Exception as e:  # a snapshot we cannot read must not fail the run
                row[f"{which}_snapshot_error"] = f"{type(e).__name__}: {e}"[:200]
    print(report.summary(), flush=True)
    return row


def _mib(b: Any) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.0f}"


def write_summary(rows: list[dict[str, Any]], out: Path) -> None:
    """``summary.json`` and a markdown table ``summary.md``."""
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    head = ("| config | ops | eager sim MiB | plan MiB | arena MiB | eager alloc MiB | "
            "planned alloc MiB | eager reserved MiB | planned reserved MiB | extra MiB | "
            "max abs diff | ok |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | error: {r['error']} |" + " |" * 10)
            continue
        lines.append(
            f"| {r['config']} | {r['ops']} | {_mib(r['baseline_peak_bytes'])} | "
            f"{_mib(r['planned_peak_bytes'])} | {_mib(r['arena_bytes'])} | "
            f"{_mib(r['eager_peak_allocated_bytes'])} | "
            f"{_mib(r['planned_peak_allocated_bytes'])} | "
            f"{_mib(r['eager_peak_reserved_bytes'])} | "
            f"{_mib(r['planned_peak_reserved_bytes'])} | {_mib(r['extra_bytes'])} | "
            f"{r['max_abs_diff']:.3g} | {'yes' if r['numerics_ok'] else 'NO'} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--smoke", action="store_true",
                   help="CPU smoke run with tiny models (implies --device cpu)")
    p.add_argument("--out", default="benchmarks/results/gpu", help="report folder")
    p.add_argument("--configs", nargs="*", default=None, metavar="MODEL:BATCH[:SEQ]",
                   help="configurations (default: gpt2, gpt2-xl, resnet50, mobilenet_v2)")
    p.add_argument("--setting", choices=("steady", "roam"), default="steady")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default=None)
    p.add_argument("--time-limit", type=float, default=None,
                   help="planner seconds per configuration (default 20, gpt2-xl 60)")
    p.add_argument("--workers", type=int, default=None, help="planner worker processes")
    p.add_argument("--steps", type=int, default=2, help="measured steps (default 2)")
    p.add_argument("--no-address-check", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.smoke:
        args.device = "cpu"
    configs = args.configs or (SMOKE_CONFIGS if args.smoke else CUDA_CONFIGS)
    if args.smoke and args.time_limit is None:
        args.time_limit = 5.0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: torch sees no CUDA device (torch "
                  f"{torch.__version__}); use --smoke for the CPU pipeline", file=sys.stderr)
            return 2
        _logger.info("device: %s, torch %s", torch.cuda.get_device_name(), torch.__version__)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    failed = False
    for text in configs:
        name, batch, seq = _parse_config(text)
        try:
            row = run_config(name, batch, seq, args, out)
            failed |= not row["numerics_ok"]
        except Exception as e:  # record and go on with the other configurations
            traceback.print_exc()
            row = {"config": text, "error": f"{type(e).__name__}: {e}"[:300]}
            failed = True
        rows.append(row)
        write_summary(rows, out)
    print((out / "summary.md").read_text())
    print(f"gpu_check: reports in {out}/", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":  # the guard matters: measuring processes are spawned
    sys.exit(main())
