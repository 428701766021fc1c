"""The families mode of ``scale_bench.py``: planning cost over the scale-suite families.

``python benchmarks/scale_bench.py --families [--quick] [--before REV] [--repeat N]`` traces
each family of :data:`roam_core.zoo.families.FAMILIES` (GPT-2, Llama-style, T5, ViT,
ResNet, MoE; batch 1, steady, AdamW, on meta) at the depths that give about ``--ops`` ops,
plus the Llama-style family with its blocks in ``torch.utils.checkpoint`` segments of 1, 2
and 4 blocks, and plans each graph in fresh subprocesses with ``--before``'s roam_core and
this checkout's ``HEAD`` (both extracted with ``git archive``), interleaved, keeping the run
with the least CPU time of ``--repeat``.  The graphs are traced by this checkout (the
families are new here) and read by both versions.  ``scale_families.{json,md}`` hold the
numbers: wall and CPU seconds (whole plan and per recorded stage), max RSS, planned peak /
proven bound, fragmentation (arena / planned peak - 1) and whether the arena is within the
value contract, ``max(0.01 %, 64 KiB)`` of the planned peak.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 2**20
#: ``--ops`` targets of the full run and of ``--quick``.
FULL_OPS = (10_000, 25_000, 50_000, 100_000)
QUICK_OPS = (1_000, 2_000, 4_000, 8_000)
#: Checkpoint-segment variants: (family, ops target) at segments of 1, 2 and 4 blocks.
CKPT = ("llama", (4_000, 25_000))
SEGMENTS = (1, 2, 4)
FAMILY_OPS = {"gpt2": 196, "llama": 303, "t5": 710, "vit": 201, "resnet": 119, "moe": 409}


def cases(families: list[str], ops: tuple[int, ...], quick: bool) -> list[tuple[str, int, str]]:
    """``(family, depth, segment)``: every family at each ops target, then the checkpoint
    variants (``segment`` ``"-"``: none)."""
    out = []
    for fam in families:
        depths = sorted({max(1, round(o / FAMILY_OPS[fam])) for o in ops})
        out += [(fam, d, "-") for d in depths]
    fam, targets = CKPT
    if fam in families:
        d = max(4, round(targets[0 if quick else 1] / FAMILY_OPS[fam]))
        out += [(fam, d, str(k)) for k in SEGMENTS]
    return out


def _trace(case: tuple[str, int, str], cache: Path, env: dict[str, str], root: Path,
           run_child: Callable[..., dict[str, Any]], code: str) -> tuple[Path, dict[str, Any]]:
    fam, depth, seg = case
    stem = f"{fam}-L{depth}" + (f"-ckpt{seg}" if seg != "-" else "")
    path, meta = cache / f"{stem}.json.gz", cache / f"{stem}.trace.json"
    if path.exists() and meta.exists():
        return path, {**json.loads(meta.read_text()), "cached": True}
    rec = run_child(code, [fam, str(depth), seg, str(path)], {**env, "PYTHONPATH": str(root)})
    meta.write_text(json.dumps(rec))
    return path, {**rec, "cached": False}


def _within_contract(run: dict[str, Any]) -> bool:
    peak = run["planned_peak_bytes"]
    return run["arena_bytes"] - peak <= max(-(-peak // 10_000), 64 * 1024)


def run_families(args: Any, res: dict[str, Any], srcs: dict[str, str], env: dict[str, str],
                 root: Path, run_child: Callable[..., dict[str, Any]], plan_code: str,
                 trace_code: str) -> None:
    """Trace and plan every case, writing ``args.name`` json/md after each one."""
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    ops = tuple(args.ops) if args.ops else (QUICK_OPS if args.quick else FULL_OPS)
    res.update(mode="families", quick=bool(args.quick), ops_targets=list(ops))
    for case in cases(args.family_list, ops, args.quick):
        path, trace = _trace(case, cache, env, root, run_child, trace_code)
        row: dict[str, Any] = {"family": case[0], "layers": case[1], "segment": case[2],
                               "ops": trace["ops"], "trace": trace}
        for rep in range(res["repeat"]):
            for key, src in srcs.items():
                print(f"[{time.strftime('%H:%M:%S')}] {case} ({trace['ops']} ops): {key} "
                      f"({rep + 1}/{res['repeat']})", file=sys.stderr, flush=True)
                run = run_child(plan_code, [src, str(path), str(args.workers)], env)
                cpus = [*row.get(key, {}).get("plan_cpu_s_runs", []), run["plan_cpu_s"]]
                if key not in row or run["plan_cpu_s"] < row[key]["plan_cpu_s"]:
                    row[key] = run
                row[key]["plan_cpu_s_runs"] = cpus
        for key in srcs:
            r = row[key]
            r["fragmentation"] = r["arena_bytes"] / r["planned_peak_bytes"] - 1
            r["within_contract"] = _within_contract(r)
        res["rows"].append(row)
        res["load_end"] = os.getloadavg()[0]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
        (out / f"{args.name}.md").write_text(markdown(res))


def _f(x: dict[str, Any] | None, k: str, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    return fmt.format(x[k] / scale) if x and x.get(k) is not None else "-"


def _per_10k(r: dict[str, Any], key: str, what: str = "plan_wall_s") -> str:
    x = r.get(key)
    return f"{x[what] / r['ops'] * 1e4:.2f}" if x else "-"


def _stage_line(run: dict[str, Any] | None) -> str:
    if not run or not run.get("stages"):
        return "-"
    parts = [f"{s['stage']} {s['cpu_s']:.2f}" for s in run["stages"] if s["cpu_s"] >= 0.05]
    return ", ".join(parts) or "all < 0.05"


def markdown(res: dict[str, Any]) -> str:
    """The result page."""
    before = res.get("before_sha", "")[:10] or "none"
    lines = [
        "# Scaling over model families: planning cost against depth",
        "",
        f"Measured {res['date']} on {res['machine']} ({res['cpus']} CPUs; 1-minute load "
        f"{res.get('load_start', float('nan')):.1f} at the start, "
        f"{res.get('load_end', float('nan')):.1f} at the end: a **shared, loaded** machine, "
        "wall times are inflated by the load, CPU times are the steadier figure; the goals "
        "are for an idle machine). "
        f"{'`--quick` depths. ' if res.get('quick') else ''}"
        f"Each graph planned {res['repeat']} time(s) per version, interleaved, the run with "
        f"the least CPU time shown. Planner defaults, {res['workers']} worker(s). `before` is "
        f"roam_core of `{res['before_rev']}` ({before}), `after` this checkout "
        f"({res['after_sha'][:10]}), in the same invocation. Batch 1, steady, AdamW, t128 / "
        "224x224; graphs traced by `after` (roam_core.zoo.families).",
        "",
        "| family | depth | ckpt | ops | wall s before / after | CPU s before / after | "
        "wall s / 10k ops after | CPU s / 10k ops before / after | max RSS MiB before / after "
        "| peak / bound before / after | arena - peak KiB before / after | "
        "in contract before / after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        b, a = r.get("before"), r.get("after")

        def gap(x: dict[str, Any] | None) -> str:
            return f"{(x['arena_bytes'] - x['planned_peak_bytes']) / 1024:,.1f}" if x else "-"

        def ok(x: dict[str, Any] | None) -> str:
            return ("yes" if x["within_contract"] else "**no**") if x else "-"

        lines.append(
            f"| {r['family']} | {r['layers']} | {r['segment']} | {r['ops']:,} | "
            f"{_f(b, 'plan_wall_s')} / {_f(a, 'plan_wall_s')} | "
            f"{_f(b, 'plan_cpu_s')} / {_f(a, 'plan_cpu_s')} | {_per_10k(r, 'after')} | "
            f"{_per_10k(r, 'before', 'plan_cpu_s')} / {_per_10k(r, 'after', 'plan_cpu_s')} | "
            f"{_f(b, 'max_rss_bytes', '{:.0f}', MIB)} / {_f(a, 'max_rss_bytes', '{:.0f}', MIB)}"
            f" | {_f(b, 'peak_over_bound', '{:.4f}')} / {_f(a, 'peak_over_bound', '{:.4f}')} | "
            f"{gap(b)} / {gap(a)} | {ok(b)} / {ok(a)} |")
    lines += ["", "CPU seconds per recorded stage, `after` (stages under 0.05 s left out; "
              "`before` records none):", "", "| family | depth | ckpt | stages |",
              "|---|---:|---:|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['family']} | {r['layers']} | {r['segment']} | "
                     f"{_stage_line(r.get('after'))} |")
    lines += ["", res.get("note", "")]
    return "\n".join(lines) + "\n"
