"""Cost model against measurement: predicted vs measured CPU overhead of recomputation.

Usage::

    nice python benchmarks/cost_model_bench.py [--reps 20] [--calibrate-seconds 3]
        [--only NAME] [--out benchmarks/results]

The ``cpu`` device profile is measured (``roam calibrate``'s micro-benchmarks) right before
each config, so that the machine's load then is in the prices (each config's profile is kept
in the results).  For each config (steady AdamW steps of small zoo models) roam plans the step
without a budget and at budgets between its lowest reachable peak and the plain arena, with
the time objective priced on that profile (``extra_seconds``: the prediction).  The machine is
shared (its load average often exceeds its 2 cores several times over), so both the
calibration and the steps are timed in this process's CPU seconds (``time.process_time``)
with one intra-op thread: other processes do not inflate them, and with one thread CPU time
is the unloaded wall time.  Then one
process trains every variant -- eager, the plain plan (twice: an A/A pair), each budget plan
and the same order without its re-runs, all with ``PlannedStep`` except eager -- from copies
of the same model on the same batch, **interleaved step by step** (the order rotated each
round), and takes medians after two warm-up steps.  The measured overhead of a budget plan is
its median step time less the same-order plan's, with a 95 % bootstrap interval over the
paired rounds.  The A/A pair's interval gives each config's noise floor; budget plans whose
*predicted* overhead is below it are reported as below noise.  Results: ``cost_model.md`` /
``cost_model.json`` with Spearman's rank correlation and the median relative error, over all
budget plans and over those above the noise floor, the machine's load and the calibrated
profile.

Goals (issue 27): rank correlation >= 0.8, median relative error <= 30 %.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

#: (model, batch, seq_len, rounds factor): small steady configs a 2-core CPU trains in
#: milliseconds (twice ``--reps`` rounds: cheap, and a tighter noise floor), and a Llama-style
#: model whose step takes a second (``--reps`` rounds).
CONFIGS = [("teach_recompute", 512, None, 2), ("mlp", 1024, None, 2), ("tiny_gpt", 16, 64, 2),
           ("residual_block", 32, None, 2), ("llama", 2, 128, 1)]
#: Budgets per config, as fractions of the way from the plain arena down to the lowest peak.
FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)
GOAL_RANK, GOAL_ERROR = 0.8, 0.30
#: Bootstrap resamples of the paired rounds for the noise floor and confidence intervals.
BOOTSTRAP = 2000


def median_diff_ci(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of ``median(a) - median(b)`` over paired rounds (round k of
    ``a`` and of ``b`` ran next to each other, so rounds are resampled together)."""
    import random

    rng = random.Random(seed)
    n = len(a)
    med = statistics.median
    ds = sorted(med([a[i] for i in idx]) - med([b[i] for i in idx])
                for idx in ([rng.randrange(n) for _ in range(n)] for _ in range(BOOTSTRAP)))
    return ds[int(0.025 * BOOTSTRAP)], ds[int(0.975 * BOOTSTRAP) - 1]


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else 0.0


def _plans(g: Any, cfg: Any) -> tuple[Any, list[tuple[float, Any]]]:
    from roam_core.planner.budget import BudgetPlanner

    bp = BudgetPlanner(g, cfg)
    plain = bp._timed(bp.base)
    hi, lo = bp.base.arena_bytes, bp.lowest_bytes()
    out: list[tuple[float, Any]] = []
    seen: set[tuple[str, ...]] = set()
    for f in FRACTIONS:
        b = -(-int(hi - f * (hi - lo)) // 512) * 512
        try:
            p = bp.plan_at(b)
        except Exception as e:
            print(f"  budget {b}: {e}", flush=True)
            continue
        key = tuple(r.id for r in p.recompute)
        if p.recompute and key not in seen:
            seen.add(key)
            out.append((f, p))
    return plain, out


def _same_order(g: Any, cfg: Any, plan: Any) -> Any:
    """``plan``'s order without its re-runs, laid out and validated as a plan of its own:
    the baseline that differs from ``plan`` only by the re-runs (and the arena offsets)."""
    from roam_core.oracle.simulate import simulate
    from roam_core.planner.summary import ChosenOrder, finish_plan

    ops = set(g.op_ids)
    order = tuple(o for o in plan.order if o in ops)
    prof = simulate(g, order, alignment_bytes=cfg.alignment_bytes)
    chosen = ChosenOrder("same order, no re-runs", order, prof, None, {}, ())
    return finish_plan(g, cfg, chosen, baseline_peak_bytes=plan.baseline_peak_bytes,
                       lower_bound_bytes=plan.lower_bound_bytes, records=[], notes=(),
                       t_start=time.perf_counter(), cancel=None,
                       emit=lambda *a: None)


def _time_variants(zs: Any, plans: list[Any], reps: int) -> tuple[list[float], list[list[float]]]:
    """Median-ready step times: eager, then each plan's PlannedStep, interleaved."""
    import torch

    from roam_core.runtime.planned_step import PlannedStep

    batch = list(zs.example_inputs)
    em = copy.deepcopy(zs.model)
    opt = zs.optimizer_factory(list(dict.fromkeys(em.parameters())))

    def eager() -> None:
        loss = zs.loss_fn(em(*batch)) if zs.loss_fn is not None else em(*batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    steps = [PlannedStep(copy.deepcopy(zs.model), p, zs.loss_fn, zs.optimizer_factory,
                         example_inputs=zs.example_inputs) for p in plans]
    runs: list[Any] = [eager, *[(lambda s=s: s(*batch)) for s in steps]]
    for _ in range(2):  # warm-up (the first planned step runs checked)
        for r in runs:
            r()
    times: list[list[float]] = [[] for _ in runs]
    for k in range(reps):
        idx = list(range(len(runs)))
        idx = idx[k % len(idx):] + idx[:k % len(idx)]
        for i in idx:
            torch.manual_seed(k)
            t0 = time.process_time()
            runs[i]()
            times[i].append(time.process_time() - t0)
    return times[0], times[1:]


def run_config(name: str, batch: int, seq: int | None, out: Path, reps: int,
               calibrate_s: float) -> dict[str, Any]:
    from roam_core.formats.device_profile_io import profile_to_dict, save_profile
    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime.calibrate import calibrate
    from roam_core.trace.tracer import trace_fx
    from roam_core.zoo import build_zoo_step, zoo_origin

    load0 = os.getloadavg()
    prof = calibrate("cpu", seconds=calibrate_s, clock="cpu")
    profile_path = out / f"cost_model_cpu_profile_{name}.json"
    save_profile(prof, profile_path)
    zs = build_zoo_step(name, batch, seq, "steady", None, "cpu", seed=0)
    origin = zoo_origin(name, batch, seq, "steady", None)
    g = trace_fx(zs.model, zs.example_inputs, zs.loss_fn, zs.optimizer_factory,
                 setting="steady", name=f"{name}-b{batch}" + (f"-t{seq}" if seq else ""),
                 origin=origin).graph
    cfg = PlannerConfig(workers=1, layout_time_limit_s=5.0).with_order(
        time_limit_s=2.0).with_recompute(device_profile=str(profile_path))
    t0 = time.perf_counter()
    plain, budgeted = _plans(g, cfg)
    plan_s = time.perf_counter() - t0
    same = [_same_order(g, cfg, p) for _, p in budgeted]
    # the plain plan twice (two PlannedSteps of one plan, interleaved like the rest): their
    # difference is pure noise, and its interval is the config's noise floor
    variants = [plain, plain] + [v for (_, p), q in zip(budgeted, same, strict=True)
                                 for v in (p, q)]
    t_eager, t_plans = _time_variants(zs, variants, reps)
    profile_path.unlink()
    med = statistics.median
    base = med(t_plans[0])
    aa_lo, aa_hi = median_diff_ci(t_plans[1], t_plans[0])
    # the largest difference two runs of one plan plausibly show: the interval's far end (two
    # PlannedSteps of one plan can differ by a steady amount, e.g. their arenas' addresses)
    noise = max(abs(aa_lo), abs(aa_hi))
    rows = []
    for k, (f, p) in enumerate(budgeted):
        ts, ts_same = t_plans[2 + 2 * k], t_plans[3 + 2 * k]
        # measured: the budget plan less the same order without its re-runs (an order and
        # layout that differ from the plain plan's move a CPU step by more than re-runs cost)
        meas = med(ts) - med(ts_same)
        lo, hi = median_diff_ci(ts, ts_same, seed=k + 1)
        rows.append({"fraction": f, "arena_bytes": p.arena_bytes,
                     "measured_ci95_seconds": [lo, hi],
                     "below_noise": p.extra_seconds < noise,
                     "recomputed_ops": len(p.recompute), "extra_flops": p.extra_flops,
                     "predicted_seconds": p.extra_seconds, "measured_seconds": meas,
                     "measured_vs_plain_seconds": med(ts) - base,
                     "step_seconds": med(ts), "same_order_step_seconds": med(ts_same),
                     "relative_error": abs(p.extra_seconds - meas) / meas if meas > 0 else None})
    return {"config": g.name, "ops": len(g.ops), "reps": reps, "plan_s": plan_s,
            "eager_step_seconds": med(t_eager), "plain_planned_step_seconds": base,
            "aa_difference_seconds": med(t_plans[1]) - base,
            "aa_ci95_seconds": [aa_lo, aa_hi], "noise_floor_seconds": noise,
            "plain_arena_bytes": plain.arena_bytes,
            "predicted_step_seconds": plain.step_seconds, "plans": rows,
            "profile": profile_to_dict(prof),
            "load_before": load0, "load_after": os.getloadavg()}


def _stats(pts: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Spearman and median relative error (over measurements above 0) of ``pts``."""
    errs = [abs(p - m) / m for p, m in pts if m > 0]
    rho = spearman([p for p, _ in pts], [m for _, m in pts]) if len(pts) > 2 else None
    return rho, statistics.median(errs) if errs else None


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for c in results for r in c["plans"]]
    pts = [(r["predicted_seconds"], r["measured_seconds"]) for r in rows]
    above = [(r["predicted_seconds"], r["measured_seconds"]) for r in rows
             if not r["below_noise"]]
    rho, err = _stats(pts)
    rho_a, err_a = _stats(above)
    return {"plans": len(pts), "models": len(results), "spearman": rho,
            "median_relative_error": err, "above_noise_plans": len(above),
            "spearman_above_noise": rho_a, "median_relative_error_above_noise": err_a,
            "negative_measurements": sum(1 for _, m in pts if m <= 0)}


def _verdict(value: float | None, goal: float, higher: bool, pct: bool = False) -> str:
    if value is None:
        return "n/a"
    ok = value >= goal if higher else value <= goal
    v, g = (f"{100 * value:.1f} %", f"{100 * goal:.0f} %") if pct else (f"{value:.3f}",
                                                                       f"{goal}")
    return f"{v} (goal {'>=' if higher else '<='} {g}: {'met' if ok else 'missed'})"


def write_md(doc: dict[str, Any], path: Path) -> None:
    s = doc["summary"]
    lines = [
        "# Cost model vs measured recomputation overhead (CPU)", "",
        f"Run {doc['date_utc']} UTC on {doc['nproc']} CPUs, torch {doc['torch']}; load "
        f"average {doc['load_start'][0]:.1f} at the start, {doc['load_end'][0]:.1f} at the "
        "end.  The machine is shared with other sessions, so the calibration and the steps "
        "are timed in this process's CPU seconds with one intra-op thread (other processes "
        "do not inflate them); medians of interleaved steps.", "",
        "The `cpu` profile is measured by `roam calibrate` right before each config (below, "
        "per config: matmul, conv and attention GFLOP/s, elementwise, tanh (and the "
        "functions timed one by one), layer norm, batch norm and copy GB/s, launch us).", "",
        "Predicted: the plan's `extra_seconds` on that profile (the planner's objective).  "
        "Measured: median PlannedStep time of the budget plan less that of the *same order "
        "without its re-runs* (laid out and validated as a plan of its own), so that only "
        "the re-runs and the arena offsets differ, with its 95 % bootstrap interval over the "
        "paired rounds.  The difference to the plain plan (roam without a budget: another "
        "order) is beside it; on CPU an order change moves a step by more than the re-runs "
        "cost.", "",
        "**Noise rule.** Each config also times the plain plan twice (two PlannedSteps of one "
        "plan, interleaved like the rest): their difference is noise, and the far end of its "
        "95 % bootstrap interval (the largest difference two runs of one plan plausibly "
        "show) is the config's *noise floor*.  A budget plan whose "
        "*predicted* extra time is below its config's noise floor is marked *below noise*: "
        "the measurement cannot resolve it.  The rule looks at the prediction and the A/A "
        "pair only, never at the plan's own measurement.  Both statistics are reported, over "
        "all plans and over the plans above the noise floor.", "",
        f"- **all {s['plans']} budget plans** ({s['models']} models): Spearman "
        f"{_verdict(s['spearman'], GOAL_RANK, True)}; median relative error "
        f"{_verdict(s['median_relative_error'], GOAL_ERROR, False, True)}"
        + (f"; {s['negative_measurements']} measured at or below 0"
           if s["negative_measurements"] else "") + ".",
        f"- **{s['above_noise_plans']} plans above the noise floor**: Spearman "
        f"{_verdict(s['spearman_above_noise'], GOAL_RANK, True)}; median relative error "
        f"{_verdict(s['median_relative_error_above_noise'], GOAL_ERROR, False, True)}.", "",
        "| config | eager ms | plain planned ms | noise floor ms | predicted step ms | budget "
        "plan | arena MiB | re-runs | predicted +ms | measured +ms (95 % CI) | rel. error | "
        "vs plain plan +ms |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in doc["results"]:
        for i, r in enumerate(c["plans"]):
            head = (f"| {c['config']} | {1e3 * c['eager_step_seconds']:.2f} | "
                    f"{1e3 * c['plain_planned_step_seconds']:.2f} | "
                    f"{1e3 * c['noise_floor_seconds']:.3f} | "
                    f"{1e3 * c['predicted_step_seconds']:.2f} |") if i == 0 else "| | | | | |"
            err = "-" if r["relative_error"] is None else f"{100 * r['relative_error']:.0f} %"
            if r["below_noise"]:
                err = "below noise"
            lo, hi = r["measured_ci95_seconds"]
            lines.append(f"{head} {r['fraction']:.1f} of the way down | "
                         f"{r['arena_bytes'] / 2**20:,.2f} | {r['recomputed_ops']} | "
                         f"{1e3 * r['predicted_seconds']:.3f} | "
                         f"{1e3 * r['measured_seconds']:.3f} ({1e3 * lo:.2f} .. "
                         f"{1e3 * hi:.2f}) | {err} | "
                         f"{1e3 * r['measured_vs_plain_seconds']:.3f} |")
    lines += [""]
    for c in doc["results"]:
        m = c["profile"]["calibrated"]["measured"]
        att = m.get("attention_flops_per_s", {}).get("float32", 0.0)
        lines.append(
            f"- {c['config']}: {c['reps']} rounds, load {c['load_before'][0]:.1f} -> "
            f"{c['load_after'][0]:.1f}; A/A difference "
            f"{1e3 * c['aa_difference_seconds']:.3f} ms; profile: matmul "
            f"{m['matmul_flops_per_s']['float32'] / 1e9:.1f}, conv "
            f"{m['conv_flops_per_s']['float32'] / 1e9:.1f}, attention {att / 1e9:.1f} "
            f"GFLOP/s; elementwise {m['elementwise_bytes_per_s'] / 1e9:.2f}, tanh "
            f"{m['transcendental_bytes_per_s'] / 1e9:.2f} ("
            + ", ".join(f"{f} {r / 1e9:.2f}"
                        for f, r in m.get("function_bytes_per_s", {}).items())
            + f"), layer norm "
            f"{m.get('norm_bytes_per_s', 0.0) / 1e9:.2f}, batch norm "
            f"{m.get('batch_norm_bytes_per_s', 0.0) / 1e9:.2f}, copy "
            f"{m['copy_bytes_per_s'] / 1e9:.2f} GB/s; launch {1e6 * m['launch_s']:.2f} us.")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    import platform

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--calibrate-seconds", type=float, default=3.0)
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--md-only", action="store_true",
                    help="rewrite cost_model.md from the committed cost_model.json")
    args = ap.parse_args()
    if args.md_only:
        out = Path(args.out)
        write_md(json.loads((out / "cost_model.json").read_text()), out / "cost_model.md")
        return
    torch.set_num_threads(1)  # CPU time of one thread: the unloaded wall time
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    results = []
    for name, b, t, factor in CONFIGS:
        if args.only and args.only not in name:
            continue
        r = run_config(name, b, t, out, factor * args.reps, args.calibrate_seconds)
        print(json.dumps({"config": r["config"], "plans": [
            (round(1e3 * p["predicted_seconds"], 3), round(1e3 * p["measured_seconds"], 3))
            for p in r["plans"]]}), flush=True)
        results.append(r)
    doc = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "nproc": os.cpu_count(), "torch": torch.__version__,
           "machine": platform.machine(), "load_start": load_start,
           "load_end": os.getloadavg(), "results": results, "summary": summary(results)}
    (out / "cost_model.json").write_text(json.dumps(doc, indent=1))
    write_md(doc, out / "cost_model.md")
    print(json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
