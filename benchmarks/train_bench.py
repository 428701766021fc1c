"""Training benchmark: planned (PlannedStep) versus eager step time, interleaved in one run.

Usage::

    nice python benchmarks/train_bench.py [--only SUBSTRING] [--steps N] [--method NAME]
                                          [--time-limit S] [--threads T]
                                          [--out benchmarks/results]

For each configuration :func:`roam_core.runtime.compare_training.compare_training` builds the zoo
model with a seeded init, traces its steady step, plans it (``--method``, ``--time-limit``),
then trains ``--steps`` steps eagerly and with ``PlannedStep`` from identical weights on the
same synthetic batches, **interleaved step by step** (alternating which goes first), and
checks that every loss and the final parameters are bit-equal.  Step times are medians over
the steps after the first (the first planned step sets up and runs checked).  Results go to
``train.md`` and ``train.json`` in ``--out``, with the machine's load average before and
after each configuration: on a shared machine the absolute times are noisy; the ratio of two
interleaved loops is what the table is for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

#: (model, batch, seq_len, small): the issue's four CPU configurations; small ones run
#: ``--small-steps`` steps (their medians need more samples), the others ``--steps``.
CONFIGS = [("mlp", 8, None, True), ("tiny_gpt", 2, 32, True), ("gpt2", 2, 128, False),
           ("resnet50", 8, None, False)]
#: The loops people write, on the small configurations: clipping in the plan, 2 micro-batches
#: per update, every third micro-batch half as large (planned on first use).
LOOPS = {"max_grad_norm": 1.0, "accumulation_steps": 2}
TARGET = 1.0  # planned / eager


def _row(model: str, batch: int, seq: int | None, steps: int,
         args: argparse.Namespace, loops: bool = False) -> dict[str, Any]:
    from roam_core.runtime.compare_training import compare_training

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    extra: dict[str, Any] = dict(LOOPS, other_batch_size=max(1, batch // 2)) if loops else {}
    r = compare_training(model, batch, seq, steps=steps, device="cpu",
                         method=args.method, planner_time_limit_s=args.time_limit, **extra)
    r["wall_seconds"] = round(time.perf_counter() - t0, 1)
    r["load_before"] = [round(x, 2) for x in load0]
    r["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return r


def _shape_costs(args: argparse.Namespace) -> dict[str, Any]:
    """What a new shape costs (trace + plan, once) and what a cached one costs (a trace):
    tiny_gpt b2 t32 planned by ``PlannedStep`` into an empty plan cache, then again from it."""
    import tempfile
    import warnings

    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime import PlannedStep
    from roam_core.zoo import build_zoo_step

    out: dict[str, Any] = {"config": "tiny_gpt b2 t32 (+ b1 t32)"}
    cfg = PlannerConfig(workers=1, time_limit_s=args.time_limit)
    with tempfile.TemporaryDirectory() as cache:
        for run in ("empty cache", "warm cache"):
            zs = build_zoo_step("tiny_gpt", 2, 32, "steady", None, "cpu", seed=0)
            other = build_zoo_step("tiny_gpt", 1, 32, "steady", None, "cpu", seed=0)
            t0 = time.perf_counter()
            step = PlannedStep(zs.model, None, zs.loss_fn, zs.optimizer_factory,
                               example_inputs=zs.example_inputs, planner=cfg,
                               plan_cache=cache)
            t1 = time.perf_counter()
            step(*zs.example_inputs)
            t2 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step(*other.example_inputs)  # a new shape: traced and planned (or loaded)
            t3 = time.perf_counter()
            step(*other.example_inputs)
            t4 = time.perf_counter()
            out[run] = {"setup_s": t1 - t0, "first_call_s": t2 - t1, "new_shape_call_s": t3 - t2,
                        "next_call_s": t4 - t3, "planned_s": step.planned_seconds,
                        "trace_s": sum(v.extra["trace_seconds"] for v in step.variants.values())}
            del step, zs, other
    return out


def _md(rows: list[dict[str, Any]], args: argparse.Namespace,
        costs: dict[str, Any] | None = None) -> str:
    cpus = os.cpu_count()
    lines = [
        "# Training with a plan: planned vs eager step time (CPU)",
        "",
        f"`python benchmarks/train_bench.py --steps {args.steps} --small-steps "
        f"{args.small_steps} --method {args.method} --time-limit {args.time_limit} --threads "
        f"{args.threads}` on {platform.machine()} with {cpus} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"torch {rows[0]['torch_version'] if rows else '?'}, {rows[0]['threads'] if rows else '?'}"
        " intra-op threads.",
        "",
        "Eager (`loss.backward(); opt.step()`, single-tensor AdamW) and `PlannedStep` (the plan's "
        "order in one arena, prepared out= kernels) train the same model from identical weights "
        "on the same batches, interleaved step by step in one process; times are medians over "
        "the calls after the first. `bit-equal`: every call's loss and the final parameters "
        f"and buffers are identical. Target: planned/eager <= {TARGET}. Rows marked `loops` "
        f"clip in the plan (max_grad_norm {LOOPS['max_grad_norm']}), take "
        f"{LOOPS['accumulation_steps']} micro-batches per update and every third micro-batch "
        "half as large (4 plans, the extra ones made on first use); their times are per call "
        "(micro-batch) and their `steps` count updates.",
        "",
        f"Machine: `nproc` = {cpus}; load average (1 min) at the start "
        f"{rows[0]['load_before'][0] if rows else '?'}, at the end "
        f"{rows[-1]['load_after'][0] if rows else '?'}.",
        "",
        "| config | ops | plan | steps | eager ms/call | planned ms/call | planned/eager "
        "| first planned call ms | fallback ops | bit-equal | load avg before -> after |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        cfg = f"{r['model']} b{r['batch_size']}" + (f" t{r['seq_len']}" if r["seq_len"] else "")
        if r.get("accumulation_steps", 1) > 1:
            cfg += f" loops (+b{r['other_batch_size']})"
        lines.append(
            f"| {cfg} | {r['graph_ops']} | {r['plan_method']} | {r['steps']} | "
            f"{r['eager_step_seconds'] * 1e3:.1f} | {r['planned_step_seconds'] * 1e3:.1f} | "
            f"{r['planned_over_eager']:.3f} | {r['planned_first_step_seconds'] * 1e3:.0f} | "
            f"{r['fallback_ops']} | {'yes' if r['max_abs_diff'] == 0 else r['max_abs_diff']} | "
            f"{r['load_before'][0]} -> {r['load_after'][0]} |")
    lines += ["", "Fallback targets (ops without a usable out= kernel; computed into a temporary "
              "and copied into the slot):", ""]
    for r in rows:
        lines.append(f"- {r['model']}: {', '.join(r['fallback_targets']) or '-'}")
    if costs:
        lines += ["", f"## What a new shape costs: {costs['config']}", "",
                  "`PlannedStep(model, None, ...)` plans its first shape at set-up and the "
                  "second (b1) on first use, into an empty plan cache; then the same again "
                  "with the cache filled (a new run):", "",
                  "| run | set-up s | first call s | new-shape call s | its next call s | "
                  "planning s (in all) | tracing s (in all) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for run in ("empty cache", "warm cache"):
            c = costs[run]
            lines.append(f"| {run} | {c['setup_s']:.2f} | {c['first_call_s']:.3f} | "
                         f"{c['new_shape_call_s']:.2f} | {c['next_call_s']:.3f} | "
                         f"{c['planned_s']:.2f} | {c['trace_s']:.2f} |")
    lines += ["", args.note, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="run configs whose model name contains this")
    ap.add_argument("--steps", type=int, default=5,
                    help="steps per loop for gpt2 and resnet50 (default 5)")
    ap.add_argument("--small-steps", type=int, default=30,
                    help="steps per loop for mlp and tiny_gpt (default 30)")
    ap.add_argument("--method", default="roam", help="planning method (default roam)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="planner budget, s")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--no-loops", action="store_true",
                    help="skip the clipping + accumulation + two-shape rows")
    ap.add_argument("--note", default="Machine: 2 cores shared with other work while this "
                    "ran (see the load averages): absolute times are noisy, the ratio of the "
                    "two interleaved loops less so.")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "train.json"
    # --only re-measures some configurations and keeps the others' last results
    old = json.loads(path.read_text()) if args.only and path.exists() else []
    rows = []
    todo = [(m, b, t, small, False) for m, b, t, small in CONFIGS]
    if not args.no_loops:
        todo += [(m, b, t, small, True) for m, b, t, small in CONFIGS if small]
    for model, batch, seq, small, loops in todo:
        if args.only and args.only not in model:
            kept = [r for r in old if (r["model"], r["batch_size"],
                                       r.get("accumulation_steps", 1) > 1) == (model, batch,
                                                                                 loops)]
            rows.extend(kept)
            continue
        print(f"train_bench: {model} b{batch}{' loops' if loops else ''} ...", file=sys.stderr,
              flush=True)
        steps = args.small_steps if small else args.steps
        r = _row(model, batch, seq, steps // 2 if loops else steps, args, loops)
        print(f"train_bench: {model} b{batch}: eager {r['eager_step_seconds'] * 1e3:.1f} ms, "
              f"planned {r['planned_step_seconds'] * 1e3:.1f} ms "
              f"({r['planned_over_eager']:.3f}x), max |diff| {r['max_abs_diff']}",
              file=sys.stderr, flush=True)
        rows.append(r)
    costs = None if args.only else _shape_costs(args)
    path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    if costs:
        (out / "train_shape_costs.json").write_text(json.dumps(costs, indent=1) + "\n")
    (out / "train.md").write_text(_md(rows, args, costs))
    print(f"wrote {out / 'train.md'}", file=sys.stderr)
    return 0 if all(r["max_abs_diff"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
