"""Full-size GPT-2 (124M) replayed bit-exactly on CPU in reduced precision.

Usage::

    nice python benchmarks/replay_gpt2_bench.py [--model gpt2] [--batch 1] [--seq-len 32]
        [--precisions bf16-mixed fp16-mixed [bf16]] [--budget-share 0.5] [--steps 2]
        [--with-base]
        [--out benchmarks/results/replay_gpt2]

For each precision: trace the zoo model's steady AdamW step (``trace_zoo``), plan it
(``BudgetPlanner``, one worker, as ``make_plan``) under a budget ``--budget-share`` of the
way from the lowest peak roam reaches with recomputation to the arena without it, so the
replay also re-runs the recomputed ops (bf16 weight re-casts, fp32 islands) -- and with
``--with-base`` the plan without a budget too; then

* ``execute_plan`` (``execute_traced``): ``--steps`` steps of the plan in one arena against
  eager on the same weights, data and generator state: ``max_abs_diff`` over losses,
  parameters and optimizer state (0 is bit-exact);
* ``PlannedStep``: ``--steps`` calls of a training loop against an ordinary eager loop in the
  same precision (``StepPrecision``: autocast, and the ``GradScaler`` for ``fp16-mixed``),
  losses and ``state_dict`` compared bit for bit.

The small models of the test suite replay bit-exactly in every precision
(``tests/roam_core/runtime/test_precision_replay.py``); this checks the full-size model.
Writes ``.json`` and ``.md`` with the date, ``os.getloadavg()`` and ``nproc``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

MIB = 2**20


def log(msg: str) -> None:
    """Progress on stderr (a full-size replay takes minutes per stage on a loaded machine)."""
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def planned_step_diff(model_name: str, batch: int, seq: int, precision: str, plan: Any,
                      steps: int) -> tuple[float, int]:
    """``PlannedStep`` against an eager loop: the largest |difference| over the losses and
    the final ``state_dict`` (0: bit-exact), and how many updates the loop skipped."""
    import torch

    from roam_core.runtime import PlannedStep
    from roam_core.trace.precision import StepPrecision, resolve_precision
    from roam_core.zoo import build_zoo_step
    from roam_core.zoo.registry import model_spec

    step = build_zoo_step(model_name, batch, seq, "steady", device="cpu")
    eager = copy.deepcopy(step.model)
    gen = torch.Generator().manual_seed(1)
    vocab = model_spec(model_name).vocab_size
    batches = [step.example_inputs] + [
        (torch.randint(0, vocab, step.example_inputs[0].shape, generator=gen),)
        for _ in range(steps - 1)]
    planned = PlannedStep(step.model, plan, step.loss_fn, step.optimizer_factory,
                          example_inputs=step.example_inputs, precision=precision)
    torch.manual_seed(0)
    got = [planned(*b) for b in batches]
    prec = resolve_precision(precision)
    prec.cast_module(eager)
    opt = step.optimizer_factory(list(eager.parameters()))
    mixed = StepPrecision(prec, torch.device("cpu"))
    torch.manual_seed(0)
    want, skipped = [], 0
    for b in batches:
        with mixed.autocast():
            out = eager(*[prec.cast(x) for x in b])
            loss = out if step.loss_fn is None else step.loss_fn(out)
        mixed.backward(loss)
        skipped += not mixed.eager_step(opt)
        opt.zero_grad(set_to_none=True)
        want.append(loss.detach())
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(want, got, strict=True))
    for a, b in zip(eager.state_dict().values(), step.model.state_dict().values(), strict=True):
        if a.is_floating_point():
            diff = max(diff, float((a.float() - b.float()).abs().max()))
        elif not torch.equal(a, b):
            diff = float("inf")
    return diff, skipped


def measure(model: str, batch: int, seq: int, precision: str, share: float,
            steps: int, skip_base: bool = False, drops: str = "") -> dict[str, Any]:
    """Trace, plan (no budget and under a budget) and replay one precision."""
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime.execution import execute_traced
    from roam_core.zoo import build_zoo_step, trace_zoo

    t0 = time.perf_counter()
    ts = trace_zoo(model, batch, seq, "steady", precision=precision)
    g = ts.graph
    row: dict[str, Any] = {"precision": precision, "ops": len(g.ops),
                           "trace_s": time.perf_counter() - t0, "plans": []}
    log(f"{precision}: traced {len(g.ops)} ops in {row['trace_s']:.0f} s")
    t0 = time.perf_counter()
    bp = BudgetPlanner(g, PlannerConfig(workers=1))
    base, lowest = bp.base, bp.lowest_bytes()
    budget = int(lowest + share * (base.arena_bytes - lowest))
    plans = [(None, base, time.perf_counter() - t0)]
    t0 = time.perf_counter()
    if drops:  # a baseline's drop set: re-runs even where no budget needs them
        from roam_core.recompute.baselines import baseline_drop_set

        dropped = baseline_drop_set(g, drops) or ()
        plans.append((None, bp.plan_for_drops(dropped, drops), time.perf_counter() - t0))
    else:
        plans.append((budget, bp.plan_at(budget), time.perf_counter() - t0))
    log(f"{precision}: planned ({plans[0][2]:.0f} s, {plans[1][2]:.0f} s)")
    for budget_bytes, plan, plan_s in plans[1:] if skip_base else plans:
        p: dict[str, Any] = {"budget_bytes": budget_bytes, "method": plan.method,
                             "arena_bytes": plan.arena_bytes,
                             "lowest_bytes": lowest, "recompute_ops": len(plan.recompute),
                             "plan_s": plan_s}
        step = build_zoo_step(model, batch, seq, "steady", device="meta")
        t0 = time.perf_counter()
        r = execute_traced(ts, step.model, step.example_inputs, plan, loss_fn=step.loss_fn,
                           optimizer=step.optimizer_factory, steps=steps, strict=False)
        p.update(execute_max_abs_diff=r.max_abs_diff, numerics_ok=r.numerics_ok,
                 execute_s=time.perf_counter() - t0)
        log(f"{precision}: execute_plan max abs diff {r.max_abs_diff:g} ({p['execute_s']:.0f} s)")
        t0 = time.perf_counter()
        diff, skipped = planned_step_diff(model, batch, seq, precision, plan, steps)
        p.update(planned_step_max_abs_diff=diff, planned_step_skipped=skipped,
                 planned_step_s=time.perf_counter() - t0)
        row["plans"].append(p)
        print(json.dumps({"precision": precision, **p}), flush=True)
    return row


def write(res: dict[str, Any], out: Path) -> None:
    """The result files."""
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# Replay: {res['model']} b{res['batch']} t{res['seq_len']}, steady AdamW, "
             f"{res['steps']} steps, CPU", "",
             f"Produced by `benchmarks/replay_gpt2_bench.py` on {res['date']} (UTC); machine: "
             f"{res['nproc']} cores, load average {res['load_start']} at the start and "
             f"{res.get('load_end', '?')} at the end (shared: the seconds are noisy; the "
             "differences are not).  Eager is the baseline, run in the same process on the "
             "same weights, data and generator state.  max |diff| over the losses, parameters "
             "and optimizer state; 0 is bit-exact.", "",
             "| precision | ops | plan | budget MiB | arena MiB | recomputed ops | execute_plan "
             "max abs diff | PlannedStep max abs diff | skipped updates | trace s | plan s | "
             "execute s | PlannedStep s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        for p in r["plans"]:
            b = "none" if p["budget_bytes"] is None else f"{p['budget_bytes'] / MIB:,.1f}"
            lines.append(
                f"| {r['precision']} | {r['ops']:,} | {p.get('method', 'roam')} | {b} | "
                f"{p['arena_bytes'] / MIB:,.1f} | "
                f"{p['recompute_ops']} | {p['execute_max_abs_diff']:g} | "
                f"{p['planned_step_max_abs_diff']:g} | {p['planned_step_skipped']} | "
                f"{r['trace_s']:.0f} | {p['plan_s']:.0f} | {p['execute_s']:.0f} | "
                f"{p['planned_step_s']:.0f} |")
    lines += ["", f"Total wall time {res.get('total_s', 0):.0f} s."]
    lines += [f"- {n}" for n in res.get("notes", [])]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=1)
    # bf16 matmuls are emulated on a CPU without AVX512-BF16 (this machine: AVX2): at t128
    # one execute_plan of the full model took over 15 minutes at load 7-12
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--precisions", nargs="+", default=["bf16-mixed", "fp16-mixed"])
    ap.add_argument("--budget-share", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--with-base", action="store_true",
                    help="also replay the plan without recomputation (the plan with "
                         "recomputation runs all of its ops too, and the re-runs)")
    ap.add_argument("--drops", default="",
                    help="plan a baseline's drop set instead of a budget (e.g. "
                         "checkpoint_blocks: every block re-run in the backward)")
    ap.add_argument("--out", default="benchmarks/results/replay_gpt2")
    args = ap.parse_args()
    t_all = time.perf_counter()
    res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                           "load_start": [round(x, 2) for x in os.getloadavg()],
                           "nproc": os.cpu_count(), "model": args.model, "batch": args.batch,
                           "seq_len": args.seq_len, "steps": args.steps,
                           "budget_share": args.budget_share, "rows": []}
    for p in args.precisions:
        res["rows"].append(measure(args.model, args.batch, args.seq_len, p,
                                   args.budget_share, args.steps, not args.with_base,
                                   args.drops))
        res["load_end"] = [round(x, 2) for x in os.getloadavg()]
        res["total_s"] = time.perf_counter() - t_all
        write(res, Path(args.out))


if __name__ == "__main__":
    main()
