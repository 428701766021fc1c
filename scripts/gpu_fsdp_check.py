"""FSDP2 per-rank peaks on one GPU: roam's simulated eager and planned peaks beside the peer
(``FSDPMemTracker``) and eager FSDP2's real ``max_memory_allocated`` on a fake process group.

Usage::

    python scripts/gpu_fsdp_check.py --device cuda --out DIR [--configs gpt2:2:512 ...]
                                     [--world-sizes 8] [--time-limit 10]
    python scripts/gpu_fsdp_check.py --dry-run --out DIR     # the same path on CPU, tiny

One GPU holds what one rank of a world of ``W`` ranks holds: ``fully_shard`` per block and on
the root over torch's fake process group (collectives move no data but FSDP2 allocates its
real buffers), real weights on the device, two AdamW steps.  The measured peak is
``torch.cuda.max_memory_allocated`` over both steps (the second starts with the optimizer
state, as roam's steady trace does).  roam's figures come from the rank's traced step (fake
tensors): the simulated eager peak in program order (unrounded, as the allocator stats count
before its own rounding), the same with eager FSDP2's holds of gathered parameters
(:mod:`roam_core.oracle.fsdp_eager`) and ``make_plan``'s planned peak.  The peer is torch's
own estimate of the same step (:func:`roam_core.runtime.fsdp_peer.fsdp_mem_tracker_peak`).  Writes
``fsdp_peaks.json`` and ``fsdp_peaks.md`` to ``--out``; exit 0 unless a configuration fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

#: Configurations ``MODEL:BATCH:SEQ[@PRECISION]`` of the GPU run (per rank) and the dry run.
CUDA_CONFIGS = ("gpt2:2:512", "llama-125m:2:512", "llama-125m:2:512@bf16-mixed")
DRY_CONFIGS = ("tiny_gpt:2:32", "tiny_llama:2:32")
MiB = 2**20


def parse_config(text: str) -> tuple[str, int, int, str]:
    """``"llama-125m:2:512@bf16-mixed"`` -> ``("llama-125m", 2, 512, "bf16-mixed")``."""
    spec, _, precision = text.partition("@")
    parts = spec.split(":")
    if len(parts) != 3:
        raise SystemExit(f"gpu_fsdp_check: config {text!r} is not MODEL:BATCH:SEQ[@PRECISION]")
    return parts[0], int(parts[1]), int(parts[2]), precision or "fp32"


def measured_peak(model: str, b: int, t: int, world_size: int, precision: str,
                  device: str, steps: int = 2) -> int | None:
    """Eager FSDP2's ``max_memory_allocated`` on ``device`` over ``steps`` steps (CPU: None,
    after running the same code)."""
    import torch

    from roam_core.model.parallel import ParallelSetting
    from roam_core.runtime.rank_training import torch_parallel_model
    from roam_core.trace.parallel import rank_process_group
    from roam_core.zoo.steps import build_zoo_step

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    par = ParallelSetting("fsdp", world_size)
    with rank_process_group(world_size):
        zs = build_zoo_step(model, b, t, "steady", None, device)
        m = torch_parallel_model(zs.model, par, precision)
        opt = zs.optimizer_factory(list(m.parameters()))
        inputs = list(zs.example_inputs)
        for _ in range(steps):
            # no Python name holds the output: it is freed as the eager loop frees it
            loss = m(*inputs) if zs.loss_fn is None else zs.loss_fn(m(*inputs))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        if cuda:
            torch.cuda.synchronize()
        peak = int(torch.cuda.max_memory_allocated()) if cuda else None
        del m, opt, zs, inputs
    if cuda:
        torch.cuda.empty_cache()
    return peak


def check(config: str, world_size: int, device: str, time_limit_s: float) -> dict[str, Any]:
    """One row: roam's eager and planned peaks, the peer's, and the measured one."""
    from roam_core.model.parallel import ParallelSetting
    from roam_core.oracle.baseline import eager_report
    from roam_core.oracle.fsdp_eager import fsdp2_eager_peak_bytes
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime.fsdp_peer import fsdp_mem_tracker_peak
    from roam_core.zoo.steps import trace_zoo

    model, b, t, precision = parse_config(config)
    par = ParallelSetting("fsdp", world_size)
    t0 = time.perf_counter()
    g = trace_zoo(model, b, t, "steady", parallel=par, precision=precision).graph
    eager = eager_report(g, 1).simulated_peak_bytes
    held = fsdp2_eager_peak_bytes(g)  # with FSDP2's holds of gathered parameters
    plan = make_plan(g, PlannerConfig(workers=1, time_limit_s=time_limit_s))
    peer = fsdp_mem_tracker_peak(model, b, t, par, precision).peak_bytes
    measured = measured_peak(model, b, t, world_size, precision, device)
    row: dict[str, Any] = {
        "config": config, "model": model, "batch_size": b, "seq_len": t,
        "precision": precision, "world_size": world_size, "device": device,
        "roam_eager_sim_peak_bytes": int(eager), "roam_fsdp2_eager_peak_bytes": int(held),
        "roam_planned_peak_bytes":
        int(plan.planned_peak_bytes), "peer_peak_bytes": int(peer),
        "measured_eager_peak_bytes": measured, "seconds": time.perf_counter() - t0}
    if measured:
        row["roam_eager_over_measured"] = eager / measured
        row["roam_fsdp2_eager_over_measured"] = held / measured
        row["peer_over_measured"] = peer / measured
        row["planned_over_measured"] = plan.planned_peak_bytes / measured
    return row


def _md(rows: list[dict[str, Any]]) -> str:
    def mib(x: Any) -> str:
        return "n/a" if x is None else f"{x / MiB:,.1f}"

    lines = ["# FSDP2 per-rank peaks (MiB per rank)", "",
             "| config | W | device | measured eager (max allocated) | peer (FSDPMemTracker) "
             "| roam eager (simulated) | roam eager + FSDP2 holds | roam planned |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['config']} | {r['world_size']} | {r['device']} | "
              f"{mib(r['measured_eager_peak_bytes'])} | {mib(r['peer_peak_bytes'])} | "
              f"{mib(r['roam_eager_sim_peak_bytes'])} | "
              f"{mib(r.get('roam_fsdp2_eager_peak_bytes'))} | "
              f"{mib(r['roam_planned_peak_bytes'])} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny models")
    ap.add_argument("--configs", nargs="+", default=None, metavar="MODEL:B:T[@P]")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[8])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    device = "cpu" if args.dry_run else args.device
    configs = args.configs or (DRY_CONFIGS if args.dry_run else CUDA_CONFIGS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], 0
    for config in configs:
        for w in args.world_sizes:
            try:
                rows.append(check(config, w, device, args.time_limit))
            except Exception as e:  # one failing configuration must not hide the others
                failed += 1
                rows.append({"config": config, "world_size": w, "device": device,
                             "error": f"{type(e).__name__}: {e}",
                             **dict.fromkeys(("measured_eager_peak_bytes", "peer_peak_bytes",
                                              "roam_eager_sim_peak_bytes",
                                              "roam_planned_peak_bytes"))})
            print(json.dumps(rows[-1], sort_keys=True), flush=True)
            (out / "fsdp_peaks.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
            (out / "fsdp_peaks.md").write_text(_md(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
