"""Trace, plan and train zoo models eagerly and with a plan on one GPU; write every report.

Run by ``scripts/gpu_check.sh`` (which prepares the Python path on the GPU machine); usable
directly::

    python scripts/gpu_check.py --device cuda --out benchmarks/results/gpu
    python scripts/gpu_check.py --dry-run      # CPU, tiny models: the same code path

For every configuration ``MODEL:BATCH[:SEQ][@PRECISION]`` (default: resnet50 b32, gpt2 b8
t1024, the same in bf16 mixed precision, GPT2-XL b1 t1024; ``@fp16-mixed`` adds the grad
scaler) the driver

1. traces the steady training step **on the device** (fake tensors) ->
   ``<cfg>.graph.json.gz``;
2. plans it with ROAM under a short time limit -> ``<cfg>.plan.json`` and the plan as a
   PyTorch memory snapshot ``<cfg>.plan.pickle`` (drag onto https://pytorch.org/memory_viz);
3. trains ``--steps`` steps (default 20) **eagerly** and **planned**
   (:class:`roam_core.PlannedStep`), each in a **fresh process**
   (``--child eager|planned``), from the same seeded weights on the same synthetic batches,
   the RNG seeded the same before every step.  Each child measures
   ``max_memory_allocated`` / ``max_memory_reserved`` over the steps after the first (the
   first creates eager's gradients and the planned step's checked run), the median step
   time, and records its last step as a memory snapshot ``<cfg>.snapshots/<variant>.pickle``
   -> ``<cfg>.<variant>.json``;
4. checks the numerics: every step's loss and the final parameters and buffers (exactly when
   they are small enough to save, ``<= 256 MiB``; otherwise per-tensor float64 sums and sums
   of squares), bit-equal on CPU, ``rtol = 1e-5`` on CUDA (deterministic kernels on);
5. writes ``<cfg>.report.json``, ``summary.json`` and ``summary.md`` with the issue's goals:
   planned reserved <= arena x 1.02 + declared workspaces, >= 15 % below eager reserved on
   GPT2-XL b1, steps/s >= eager.

Then the **loops** people write (``--loops MODEL:BATCH[:SEQ][@PRECISION]``, default gpt2 b2
t256, ``@fp16-mixed`` for the grad scaler's unscale-then-clip; the dry
run tiny_gpt b2 t32): gradient clipping in the plan (``max_grad_norm=1.0`` against
``clip_grad_norm_``), accumulation (2 micro-batches per update) and two batch shapes (every
third micro-batch half as large, planned on first use), eager and planned one after the other
in this process (:func:`roam_core.runtime.compare_training.compare_training`): the numerics,
step times and peaks go to ``loops.json`` and a second table of ``summary.md``.

A failing configuration is recorded (``error`` in the summary) and the others still run;
configurations that no longer fit the time budget (``--budget-s``) are skipped and said so.
The exit status is 1 when any configuration failed or its numerics differ.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_logger = logging.getLogger("gpu_check")
ROOT = Path(__file__).resolve().parents[1]

#: Default configurations on CUDA (MODEL:BATCH[:SEQ]); quick ones first, so that a run cut
#: short still reports them (the summary is rewritten after each).
CUDA_CONFIGS = ("resnet50:32", "gpt2:8:1024", "gpt2:8:1024@bf16-mixed", "gpt2-xl:1:1024")
#: Tiny configurations of the CPU dry run.
SMOKE_CONFIGS = ("mlp:8", "tiny_gpt:2:32", "residual_block:4", "tiny_gpt:2:32@bf16-mixed",
                 "mlp:8@fp16-mixed")
#: Planner seconds per configuration (the big graph gets more).
TIME_LIMITS_S = {"gpt2-xl": 60.0}
DEFAULT_TIME_LIMIT_S = 20.0
#: cuBLAS workspace of the deterministic set-up (CUBLAS_WORKSPACE_CONFIG=:4096:8).
CUBLAS_WORKSPACE_BYTES = 8 * 4096 * 1024
#: Final states up to this size are saved and compared exactly.
EXACT_STATE_BYTES = 256 * 2**20
#: CUDA tolerance (relative, plus a small absolute floor).
RTOL, ATOL = 1e-5, 1e-6
#: Seconds a configuration needs at least (trace + plan + two children), to decide skips.
MIN_CONFIG_S = {"gpt2-xl": 150.0}
DEFAULT_MIN_CONFIG_S = 60.0
#: The loops check (clipping, accumulation, two shapes): configuration, updates, settings.
LOOPS_CUDA, LOOPS_SMOKE = "gpt2:2:256", "tiny_gpt:2:32"
LOOPS = {"max_grad_norm": 1.0, "accumulation_steps": 2}
MIN_LOOPS_S = 90.0


def parse_config(text: str) -> tuple[str, int, int | None]:
    """``MODEL:BATCH[:SEQ][@PRECISION]`` -> ``(model, batch, seq_len)``."""
    parts = text.partition("@")[0].split(":")
    if len(parts) not in (2, 3):
        raise SystemExit(f"bad configuration {text!r}: expected MODEL:BATCH[:SEQ]")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None


def config_precision(text: str) -> str:
    """The ``@PRECISION`` of a configuration (``fp32`` without one)."""
    return text.partition("@")[2] or "fp32"


def config_tag(name: str, batch: int, seq_len: int | None, precision: str = "fp32") -> str:
    return (f"{name}-b{batch}" + (f"-t{seq_len}" if seq_len else "")
            + ("" if precision == "fp32" else f"-{precision}"))


# ------------------------------------------------------------------ child: one training loop
def _deterministic(device: str) -> None:
    import torch

    if device == "cuda":
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def _sync(dev: Any) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _record_snapshot(dev: Any, path: Path | None, fn: Any) -> Any:
    """Run ``fn`` recording the allocator history; dump a snapshot (CUDA, if supported)."""
    import torch

    mem = getattr(torch.cuda, "memory", None)
    if (path is None or dev.type != "cuda" or not hasattr(mem, "_record_memory_history")
            or not hasattr(mem, "_dump_snapshot")):  # private API: detect it
        return fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    mem._record_memory_history(max_entries=1_000_000, stacks="python")
    try:
        out = fn()
        _sync(dev)
        mem._dump_snapshot(str(path))
    finally:
        mem._record_memory_history(enabled=None)
    return out


def _state_summary(state: dict[str, Any]) -> dict[str, list[float]]:
    """Per-tensor float64 ``[sum, sum of squares]`` (for states too big to save)."""
    out = {}
    for k, v in state.items():
        d = v.detach().double()
        out[k] = [float(d.sum()), float((d * d).sum())]
    return out


def run_child(variant: str, text: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Train one configuration with one variant in this (fresh) process; write its JSON."""
    import torch

    from roam_core.formats.plan_io import load_plan
    from roam_core.runtime import PlannedStep, resolve_device
    from roam_core.runtime.compare_training import synthetic_batches
    from roam_core.trace.params import unique_named_parameters
    from roam_core.trace.precision import StepPrecision
    from roam_core.zoo import build_zoo_step

    name, batch, seq = parse_config(text)
    precision = config_precision(text)
    tag = config_tag(name, batch, seq, precision)
    dev = resolve_device(args.device)
    _deterministic(dev.type)
    t_start = time.perf_counter()
    zs = build_zoo_step(name, batch, seq, "steady", args.optimizer, dev, seed=args.seed)
    batches = synthetic_batches(name, "steady", zs.example_inputs, args.steps, args.seed + 1)
    model = zs.model
    if variant == "eager":
        mixed = StepPrecision(precision, dev)
        mixed.precision.cast_module(model)
        opt = zs.optimizer_factory([p for _, p in unique_named_parameters(model)])

        def one(b: list[Any]) -> torch.Tensor:
            b = [mixed.precision.cast(x) for x in b]
            with mixed.autocast():
                loss = model(*b)
                loss = loss if zs.loss_fn is None else zs.loss_fn(loss)
            mixed.backward(loss)
            mixed.eager_step(opt)
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        arena_bytes = None
    else:
        plan = load_plan(out / f"{tag}.plan.json")
        step = PlannedStep(model, plan, zs.loss_fn, zs.optimizer_factory,
                           example_inputs=zs.example_inputs, device=dev, precision=precision)
        arena_bytes = int(plan.arena_bytes)

        def one(b: list[Any]) -> torch.Tensor:
            return step(*b).detach().clone()
    setup_s = time.perf_counter() - t_start
    losses: list[float] = []
    times: list[float] = []
    peaks: dict[str, Any] = {"allocated": None, "reserved": None}
    snap = out / f"{tag}.snapshots" / f"{variant}.pickle" if args.snapshots else None
    for i, raw in enumerate(batches):
        b = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in raw]
        torch.manual_seed(args.seed + 100 + i)
        _sync(dev)
        t0 = time.perf_counter()
        last = i == len(batches) - 1 and len(batches) > 2
        loss = _record_snapshot(dev, snap, functools.partial(one, b)) if last else one(b)
        _sync(dev)
        if not last:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss.cpu()))
        if i == 0 and dev.type == "cuda":  # steady state from here on
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
    if dev.type == "cuda":
        peaks = {"allocated": int(torch.cuda.max_memory_allocated(dev)),
                 "reserved": int(torch.cuda.max_memory_reserved(dev))}
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    state_bytes = sum(v.numel() * v.element_size() for v in state.values())
    exact = state_bytes <= EXACT_STATE_BYTES
    if exact:
        torch.save(state, out / f"{tag}.{variant}.state.pt")
    steady = times[1:] or times
    body: dict[str, Any] = {
        "config": tag, "variant": variant, "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "steps": len(losses), "losses": losses,
        "step_seconds_median": statistics.median(steady) if steady else None,
        "first_step_seconds": times[0] if times else None, "setup_seconds": setup_s,
        "peak_allocated_bytes": peaks["allocated"], "peak_reserved_bytes": peaks["reserved"],
        "arena_bytes": arena_bytes, "state_exact": exact, "state_bytes": state_bytes,
        "state_summary": None if exact else _state_summary(state),
        "snapshot": str(snap) if snap is not None and snap.exists() else None,
    }
    if variant == "planned":
        st = step.stats()
        body.update(out_variant_ops=st.out_variant_ops, fallback_ops=st.fallback_ops,
                    fallback_targets=list(st.fallback_targets),
                    extra_bytes=int(st.extra_bytes))
    (out / f"{tag}.{variant}.json").write_text(json.dumps(body, indent=2) + "\n")
    return body


# ------------------------------------------------------------------ parent
def _spawn(variant: str, text: str, args: argparse.Namespace, out: Path,
           timeout_s: float) -> dict[str, Any]:
    """Run one training loop in a fresh process; returns its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--configs",
           text, "--device", args.device, "--steps", str(args.steps), "--seed",
           str(args.seed), "--out", str(out)]
    if args.optimizer:
        cmd += ["--optimizer", args.optimizer]
    if not args.snapshots:
        cmd.append("--no-snapshots")
    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=max(30.0, timeout_s))
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{variant} process failed (exit {proc.returncode}): "
                           + " | ".join(tail))
    name, batch, seq = parse_config(text)
    tag = config_tag(name, batch, seq, config_precision(text))
    return json.loads((out / f"{tag}.{variant}.json").read_text())


def compare_runs(eager: dict[str, Any], planned: dict[str, Any], out: Path, tag: str,
                 device: str) -> tuple[float, bool, str]:
    """``(max |diff|, ok, how)`` over every loss and the final state of both runs."""
    import torch

    rtol, atol = (0.0, 0.0) if device == "cpu" else (RTOL, ATOL)
    worst, ok = 0.0, len(eager["losses"]) == len(planned["losses"])
    for a, b in zip(eager["losses"], planned["losses"], strict=False):
        d = abs(a - b)
        worst = max(worst, d)
        ok &= d <= atol + rtol * abs(a)
    if eager["state_exact"] and planned["state_exact"]:
        se = torch.load(out / f"{tag}.eager.state.pt", weights_only=True)
        sp = torch.load(out / f"{tag}.planned.state.pt", weights_only=True)
        ok &= se.keys() == sp.keys()
        for k, a in se.items():
            b = sp.get(k)
            if b is None or a.shape != b.shape:
                return float("inf"), False, f"state {k} missing or reshaped"
            if torch.equal(a, b):
                continue
            d = (a.double() - b.double()).abs()
            worst = max(worst, float(d.max()))
            ok &= bool((d <= atol + rtol * a.double().abs()).all())
        return worst, ok, "losses and final state, exactly"
    se, sp = eager["state_summary"] or {}, planned["state_summary"] or {}
    ok &= se.keys() == sp.keys()
    for k, a in se.items():
        for x, y in zip(a, sp.get(k, [float("nan")] * 2), strict=True):
            d = abs(x - y)
            ok &= d <= max(1e-3, rtol * 100) * max(1.0, abs(x))  # sums of many values
    return worst, ok, "losses exactly (rtol); final state by per-tensor sums"


def run_config(text: str, args: argparse.Namespace, out: Path,
               deadline: float) -> dict[str, Any]:
    """Trace, plan and train one configuration; returns its summary row."""
    from roam_core.formats.graph_io import save_graph
    from roam_core.formats.plan_io import save_plan
    from roam_core.formats.snapshot import load_snapshot, save_plan_snapshot
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig
    from roam_core.runtime import resolve_device
    from roam_core.trace import trace_fx
    from roam_core.zoo import build_zoo_step, zoo_origin

    name, batch, seq = parse_config(text)
    precision = config_precision(text)
    tag = config_tag(name, batch, seq, precision)
    dev = resolve_device(args.device)
    row: dict[str, Any] = {"config": tag, "model": name, "batch_size": batch,
                           "seq_len": seq, "precision": precision, "device": dev.type}
    t0 = time.perf_counter()
    zs = build_zoo_step(name, batch, seq, "steady", args.optimizer, "meta")
    origin = zoo_origin(name, batch, seq, "steady", args.optimizer, precision=precision)
    ts = trace_fx(zs.model, zs.example_inputs, zs.loss_fn, zs.optimizer_factory,
                  setting="steady", name=f"{tag}-steady", origin=origin, device=dev,
                  precision=precision)
    g = ts.graph
    save_graph(g, out / f"{tag}.graph.json.gz")
    row.update(ops=len(g), storages=len(g.tensors), trace_s=round(time.perf_counter() - t0, 2))
    _logger.info("%s: traced %d ops on %s in %.1f s", tag, len(g), dev, row["trace_s"])

    t1 = time.perf_counter()
    limit = args.time_limit or TIME_LIMITS_S.get(name, DEFAULT_TIME_LIMIT_S)
    plan = make_plan(g, PlannerConfig(time_limit_s=limit, workers=args.workers))
    save_plan(plan, out / f"{tag}.plan.json")
    save_plan_snapshot(out / f"{tag}.plan.pickle", g, plan)
    row.update(plan_s=round(time.perf_counter() - t1, 2), plan_method=plan.method,
               baseline_peak_bytes=plan.baseline_peak_bytes,
               planned_peak_bytes=plan.planned_peak_bytes, arena_bytes=plan.arena_bytes,
               lower_bound_bytes=plan.lower_bound_bytes)
    _logger.info("%s: planned in %.1f s: eager sim %.1f MiB -> plan %.1f MiB, arena %.1f MiB",
                 tag, row["plan_s"], plan.baseline_peak_bytes / 2**20,
                 plan.planned_peak_bytes / 2**20, plan.arena_bytes / 2**20)

    runs = {}
    for variant in ("eager", "planned"):
        left = deadline - time.monotonic()
        t2 = time.perf_counter()
        runs[variant] = _spawn(variant, text, args, out, left)
        row[f"{variant}_process_s"] = round(time.perf_counter() - t2, 2)
    e, p = runs["eager"], runs["planned"]
    diff, ok, how = compare_runs(e, p, out, tag, dev.type)
    row.update(max_abs_diff=diff, numerics_ok=ok, numerics_compared=how, steps=e["steps"],
               eager_peak_allocated_bytes=e["peak_allocated_bytes"],
               eager_peak_reserved_bytes=e["peak_reserved_bytes"],
               planned_peak_allocated_bytes=p["peak_allocated_bytes"],
               planned_peak_reserved_bytes=p["peak_reserved_bytes"],
               eager_step_seconds=e["step_seconds_median"],
               planned_step_seconds=p["step_seconds_median"],
               extra_bytes=p.get("extra_bytes"), fallback_ops=p.get("fallback_ops"),
               out_variant_ops=p.get("out_variant_ops"),
               fallback_targets=p.get("fallback_targets"), torch=p["torch"],
               device_name=p["device_name"])
    row.update(goals(row))
    for which in ("eager", "planned"):
        path = out / f"{tag}.snapshots" / f"{which}.pickle"
        if path.exists():
            try:
                row[f"{which}_snapshot_peak_bytes"] = load_snapshot(path).peak_bytes
            except Exception as ex:  # a snapshot we cannot read must not fail the run
                row[f"{which}_snapshot_error"] = f"{type(ex).__name__}: {ex}"[:200]
    (out / f"{tag}.report.json").write_text(json.dumps(
        row | {"eager": e, "planned": p}, indent=2) + "\n")
    return row


def goals(row: dict[str, Any]) -> dict[str, Any]:
    """The issue's §5 goals for one row (``None`` where not measurable, e.g. on CPU)."""
    res, er = row.get("planned_peak_reserved_bytes"), row.get("eager_peak_reserved_bytes")
    workspace = int(row.get("extra_bytes") or 0) + CUBLAS_WORKSPACE_BYTES
    out: dict[str, Any] = {"declared_workspace_bytes": workspace}
    if res is not None:
        out["goal_reserved_within_arena"] = res <= row["arena_bytes"] * 1.02 + workspace
    if res is not None and er:
        out["reserved_saving"] = 1.0 - res / er
        if row["model"] == "gpt2-xl" and row["batch_size"] == 1:
            out["goal_saving_15pct"] = out["reserved_saving"] >= 0.15
    te, tp = row.get("eager_step_seconds"), row.get("planned_step_seconds")
    if te and tp:
        out["planned_over_eager_time"] = tp / te
        if row["device"] == "cuda":
            out["goal_steps_per_s"] = tp <= te
    return out


def run_loops(text: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Clipping, accumulation and two shapes, eager against planned (module notes)."""
    from roam_core.runtime.compare_training import compare_training

    name, batch, seq = parse_config(text)
    precision = config_precision(text)  # @fp16-mixed: the grad scaler unscales, then clips
    other = max(1, batch // 2)
    limit = args.time_limit or TIME_LIMITS_S.get(name, DEFAULT_TIME_LIMIT_S)
    t0 = time.perf_counter()
    r = compare_training(name, batch, seq, steps=args.loop_steps, device=args.device,
                         planner_time_limit_s=limit, seed=args.seed, precision=precision,
                         other_batch_size=other if other != batch else None, **LOOPS)
    r["wall_seconds"] = round(time.perf_counter() - t0, 1)
    r["config"] = config_tag(name, batch, seq, precision)
    (out / "loops.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    return r


def _loops_table(r: dict[str, Any]) -> list[str]:
    if "error" in r or "skipped" in r:
        return ["", "## Loops", "", f"{r.get('config')}: {r.get('error') or r['skipped']}"]
    return [
        "", "## Loops: clipping, accumulation, two shapes", "",
        "| config | clip | micro-batches | other batch | plans | calls | eager s/call | "
        "planned s/call | eager reserved MiB | planned reserved MiB | max abs diff | ok |",
        "|" + "---|" * 12,
        f"| {r['config']} | {r['max_grad_norm']} | {r['accumulation_steps']} | "
        f"{r['other_batch_size']} | {r['plans']} | {r['calls']} | "
        f"{r['eager_step_seconds']:.4f} | {r['planned_step_seconds']:.4f} | "
        f"{_mib(r['eager_peak_reserved_bytes'])} | {_mib(r['planned_peak_reserved_bytes'])} | "
        f"{r['max_abs_diff']:.3g} | {'yes' if r['numerics_ok'] else 'NO'} |",
    ]


def _mib(b: Any) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.0f}"


def write_summary(rows: list[dict[str, Any]], out: Path,
                  loops: dict[str, Any] | None = None) -> None:
    """``summary.json`` and a markdown table ``summary.md`` (plus the loops table)."""
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    head = ("| config | ops | plan s | arena MiB | eager alloc | planned alloc | eager "
            "reserved | planned reserved | saving | eager s/step | planned s/step | "
            "max abs diff | ok |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if "error" in r or "skipped" in r:
            why = r.get("error") or r["skipped"]
            lines.append(f"| {r['config']} | {why} |" + " |" * 11)
            continue
        sav = r.get("reserved_saving")
        te, tp = r.get("eager_step_seconds"), r.get("planned_step_seconds")
        lines.append(
            f"| {r['config']} | {r['ops']} | {r['plan_s']} | {_mib(r['arena_bytes'])} | "
            f"{_mib(r['eager_peak_allocated_bytes'])} | "
            f"{_mib(r['planned_peak_allocated_bytes'])} | "
            f"{_mib(r['eager_peak_reserved_bytes'])} | "
            f"{_mib(r['planned_peak_reserved_bytes'])} | "
            f"{'n/a' if sav is None else f'{sav:.1%}'} | "
            f"{'n/a' if te is None else f'{te:.4f}'} | {'n/a' if tp is None else f'{tp:.4f}'} "
            f"| {r['max_abs_diff']:.3g} | {'yes' if r['numerics_ok'] else 'NO'} |")
    lines.append("")
    lines.append("MiB columns are `torch.cuda.max_memory_allocated` / `max_memory_reserved` of "
                 "the steps after the first, each loop in a fresh process; n/a on CPU.")
    if loops is not None:
        lines += _loops_table(loops)
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dry-run", "--smoke", dest="dry_run", action="store_true",
                   help="CPU run with tiny models (implies --device cpu): the same code path")
    p.add_argument("--out", default="benchmarks/results/gpu", help="report folder")
    p.add_argument("--configs", nargs="*", default=None,
                   metavar="MODEL:BATCH[:SEQ][@PRECISION]",
                   help="configurations (default: " + " ".join(CUDA_CONFIGS) + ")")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default=None)
    p.add_argument("--time-limit", type=float, default=None,
                   help="planner seconds per configuration (default 20, gpt2-xl 60)")
    p.add_argument("--workers", type=int, default=None, help="planner worker processes")
    p.add_argument("--steps", type=int, default=20, help="training steps of each loop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="skip configurations that no longer fit this many seconds")
    p.add_argument("--no-snapshots", dest="snapshots", action="store_false")
    p.add_argument("--loops", default=None, metavar="MODEL:BATCH[:SEQ][@PRECISION]",
                   help="configuration of the loops check (default gpt2:2:256; dry run "
                        "tiny_gpt:2:32; e.g. gpt2:2:256@fp16-mixed); 'none' skips it")
    p.add_argument("--loop-steps", type=int, default=6,
                   help="optimizer updates of the loops check (2 micro-batches each)")
    p.add_argument("--child", choices=("eager", "planned"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.dry_run:
        args.device = "cpu"
        if args.time_limit is None:
            args.time_limit = 5.0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        run_child(args.child, args.configs[0], args, out)
        return 0
    configs = args.configs or (SMOKE_CONFIGS if args.dry_run else CUDA_CONFIGS)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: torch sees no CUDA device (torch "
                  f"{torch.__version__}); use --dry-run for the CPU code path", file=sys.stderr)
            return 2
        _logger.info("device: %s, torch %s", torch.cuda.get_device_name(), torch.__version__)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    start = time.monotonic()
    deadline = start + args.budget_s
    rows: list[dict[str, Any]] = []
    failed = False
    for text in configs:
        name = parse_config(text)[0]
        need = MIN_CONFIG_S.get(name, DEFAULT_MIN_CONFIG_S) if not args.dry_run else 0.0
        if time.monotonic() + need > deadline:
            rows.append({"config": text, "skipped": f"not enough time left (needs ~{need:.0f} s)"})
            write_summary(rows, out)
            continue
        try:
            row = run_config(text, args, out, deadline)
            failed |= not row["numerics_ok"]
        except Exception as e:  # record and go on with the other configurations
            traceback.print_exc()
            row = {"config": text, "error": f"{type(e).__name__}: {e}"[:300]}
            failed = True
        rows.append(row)
        write_summary(rows, out)
    loops_cfg = args.loops or (LOOPS_SMOKE if args.dry_run else LOOPS_CUDA)
    if loops_cfg != "none":
        if time.monotonic() + (0.0 if args.dry_run else MIN_LOOPS_S) > deadline:
            loops: dict[str, Any] = {"config": loops_cfg, "skipped": "not enough time left"}
        else:
            try:
                loops = run_loops(loops_cfg, args, out)
                failed |= not loops["numerics_ok"]
            except Exception as e:  # recorded like a failing configuration
                traceback.print_exc()
                loops = {"config": loops_cfg, "error": f"{type(e).__name__}: {e}"[:300]}
                failed = True
        write_summary(rows, out, loops)
    print((out / "summary.md").read_text())
    print(f"gpu_check: reports in {out}/ ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":  # the guard matters: the children are spawned processes
    sys.exit(main())
