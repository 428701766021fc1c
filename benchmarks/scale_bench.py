"""Scaling benchmark: planning cost against depth, this checkout beside a "before" revision.

Usage::

    nice python benchmarks/scale_bench.py [--layers 24 48 96 192] [--before REV]
        [--cache DIR] [--workers 1] [--repeat 1] [--out benchmarks/results]
    nice python benchmarks/scale_bench.py --families [NAME ...] [--quick] [--before REV]
        [--repeat N]      # the scale-suite families: see scale_families.py

The graphs are Hugging Face GPT-2 training steps (``transformers.GPT2Config`` with ``n_layer``
layers, 768 wide, 12 heads, batch 1, 128 tokens, the ``steady`` setting, AdamW), built from the
config with no weights and traced on fake tensors (:func:`roam_core.zoo.hf.trace_hf`), one
fresh subprocess per depth; traced graphs are cached in ``--cache`` (with their trace times) so
a rerun only plans.

Every depth is planned twice, in fresh subprocesses, with the default
:class:`~roam_core.planner.config.PlannerConfig` (``--workers`` sub-task processes, default 1 so
that all the work is in one process and its CPU time is exact): once with ``roam_core`` of
``--before`` (extracted with ``git archive`` into a temporary folder and put first on
``sys.path``) and once with this checkout's ``HEAD`` (extracted the same way, so editing the
checkout while it runs changes nothing).  Both run in the same invocation, so they see the
same machine load; with ``--repeat N`` each is planned ``N`` times, interleaved, and the run
with the least CPU time is kept (full collections of Python's garbage collector and the
memory layout move one process's CPU time by 10-20% at 100k ops; the planned order must be
the same every time).  Reported per run: ops, plan CPU seconds (``time.process_time`` plus reaped
children) and wall seconds, CPU seconds per stage (baselines + rewrites, decompose, sub-task
problems, sub-task solves + polish, layout + validation), max RSS of the planning process,
planned peak, lower bound, peak / bound, arena bytes.  ``scale.json`` holds every number,
``scale.md`` the table and the growth exponents (slope of log CPU seconds against log ops).

Timings on a shared machine are noisy: CPU time is the steadier figure, wall time is shown
beside it.  The layout's stages are cut by counts of work, and its safety limit
(``layout_time_limit_s``) counts the layout thread's CPU seconds, so a loaded machine does not
change the arena.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20

_TRACE_CHILD = r"""
import json, resource, sys, time
from transformers import GPT2Config
from roam_core.formats.graph_io import save_graph
from roam_core.zoo.hf import trace_hf
layers, width, heads, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=50257, n_positions=128)
t0, c0 = time.perf_counter(), time.process_time()
g = trace_hf(cfg, 1, 128, setting="steady").graph
rec = {"layers": layers, "width": width, "ops": len(g.ops), "trace_s": time.perf_counter() - t0,
       "trace_cpu_s": time.process_time() - c0,
       "trace_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
save_graph(g, out)
print(json.dumps(rec))
"""

_PLAN_CHILD = r"""
import hashlib, json, resource, sys, time
src, path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, src)
import roam_core
assert roam_core.__file__.startswith(src), roam_core.__file__
from roam_core.planner.config import PlannerConfig
from roam_core.formats.graph_io import load_graph
from roam_core.planner import make_plan
g = load_graph(path)
marks = []
def progress(p):
    marks.append((time.process_time(), p.stage))
c0, t0 = time.process_time(), time.perf_counter()
plan = make_plan(g, PlannerConfig(workers=workers), progress=progress)
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
# first event of each stage; the time between two stages' first events is what ran between
first = {}
for c, s in marks:
    first.setdefault(s, c)
names = {("baseline", "rewrite"): "baselines_rewrites", ("rewrite", "decompose"): "decompose",
         ("decompose", "order"): "subtask_problems", ("order", "layout"): "subtask_solves",
         ("layout", "done"): "layout_validate"}
stages = {v: round(first[b] - first[a], 3) for (a, b), v in names.items()
          if a in first and b in first}
print(json.dumps({
    "ops": len(g.ops), "plan_cpu_s": cpu + kids.ru_utime + kids.ru_stime, "plan_wall_s": wall,
    "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "stage_cpu_s": stages, "planned_peak_bytes": plan.planned_peak_bytes,
    "lower_bound_bytes": plan.lower_bound_bytes, "arena_bytes": plan.arena_bytes,
    "baseline_peak_bytes": plan.baseline_peak_bytes,
    "peak_over_bound": plan.planned_peak_bytes / plan.lower_bound_bytes
    if plan.lower_bound_bytes else None,
    "subtasks": sum(r.stage == "order" for r in plan.provenance), "notes": list(plan.notes),
    "stages": [{"stage": s.stage, "wall_s": round(s.wall_s, 3), "cpu_s": round(s.cpu_s, 3),
                "gained_bytes": s.gained_bytes, "work": f"{s.work_done}/{s.work_limit} "
                f"{s.work_unit}".strip(), "stopped": s.stopped}
               for s in getattr(plan, "stages", ())],
    "order_sha256": hashlib.sha256("\n".join(plan.order).encode()).hexdigest()}))
"""

_FAMILY_TRACE_CHILD = r"""
import json, resource, sys, time
from roam_core.formats.graph_io import save_graph
from roam_core.zoo.families import trace_family
fam, depth, seg, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0, c0 = time.perf_counter(), time.process_time()
g = trace_family(fam, depth, blocks_per_segment=int(seg) if seg != "-" else None)
rec = {"family": fam, "layers": depth, "segment": seg, "ops": len(g.ops),
       "trace_s": time.perf_counter() - t0, "trace_cpu_s": time.process_time() - c0,
       "trace_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
save_graph(g, out)
print(json.dumps(rec))
"""


def _python() -> str:
    return sys.executable


def _run_child(code: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([_python(), "-c", code, *args], capture_output=True, text=True,
                         env=env, cwd=str(ROOT), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _trace(layers: int, width: int, heads: int, cache: Path, env: dict[str, str],
           ) -> tuple[Path, dict[str, Any]]:
    path = cache / f"gpt2-L{layers}-w{width}.json.gz"
    meta = cache / f"gpt2-L{layers}-w{width}.trace.json"
    if path.exists() and meta.exists():
        rec = json.loads(meta.read_text())
        rec["cached"] = True
        return path, rec
    env = {**env, "PYTHONPATH": str(ROOT)}
    rec = _run_child(_TRACE_CHILD, [str(layers), str(width), str(heads), str(path)], env)
    meta.write_text(json.dumps(rec))
    rec["cached"] = False
    return path, rec


def _extract(rev: str, into: Path) -> str:
    sha = subprocess.run(["git", "rev-parse", rev], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.strip()
    tar = subprocess.run(["git", "archive", sha, "roam_core"], capture_output=True, cwd=ROOT,
                         check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return sha


def _slope(rows: list[dict[str, Any]], key: str) -> float | None:
    pts = [(r["ops"], r[key]["plan_cpu_s"]) for r in rows if r.get(key)]
    if len(pts) < 2:
        return None
    xs = [math.log(a) for a, _ in pts]
    ys = [math.log(max(b, 1e-3)) for _, b in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


def _markdown(res: dict[str, Any]) -> str:
    rows = res["rows"]
    lines = [
        "# Scaling: planning cost against depth (HF GPT-2, steady, b1 t128)",
        "",
        f"Measured {res['date']} on {res['machine']} ({res['cpus']} CPUs, 1-minute load "
        f"{res.get('load_start', float('nan')):.1f} at the start, "
        f"{res.get('load_end', float('nan')):.1f} at the end; CPU times are the steadier "
        "figure). "
        + (f"Every depth planned {res['repeat']} times per version, interleaved; the run with "
           "the least CPU time is shown (all runs' CPU s in the JSON). "
           if res.get("repeat", 1) > 1 else "")
        + f"Planner defaults, {res['workers']} sub-task worker(s). `before` is roam_core of "
        f"`{res['before_rev']}` ({res['before_sha'][:10]}), `after` this checkout "
        f"({res['after_sha'][:10]}), both run in the same invocation, depth by depth. "
        "Layout runs to its wall-clock budget, so its CPU time and the arena depend on load.",
        "",
        "| layers | ops | trace s (CPU) | plan CPU s before | plan CPU s after | speed-up | "
        "plan wall s before / after | max RSS MiB before / after | peak / bound before | "
        "peak / bound after | arena MiB before / after |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b, a, t = r.get("before"), r.get("after"), r["trace"]

        def f(x: dict[str, Any] | None, k: str, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
            return fmt.format(x[k] / scale) if x and x.get(k) is not None else "-"

        speed = (f"{b['plan_cpu_s'] / a['plan_cpu_s']:.2f}x" if a and b else "-")
        rev = f" (after = {r['after_rev']})" if r.get("after_rev") else ""
        lines.append(
            f"| {r['layers']}{rev} | {r['ops']:,} | {t['trace_s']:.1f} ({t['trace_cpu_s']:.1f}) | "
            f"{f(b, 'plan_cpu_s')} | {f(a, 'plan_cpu_s')} | {speed} | "
            f"{f(b, 'plan_wall_s')} / {f(a, 'plan_wall_s')} | "
            f"{f(b, 'max_rss_bytes', '{:.0f}', MIB)} / {f(a, 'max_rss_bytes', '{:.0f}', MIB)} | "
            f"{f(b, 'peak_over_bound', '{:.4f}')} | {f(a, 'peak_over_bound', '{:.4f}')} | "
            f"{f(b, 'arena_bytes', '{:.1f}', MIB)} / {f(a, 'arena_bytes', '{:.1f}', MIB)} |")
    lines += ["", "CPU seconds per stage (before -> after):", "",
              "| layers | baselines + rewrites | decompose | sub-task problems | "
              "sub-task solves + polish | layout + validation |",
              "|---:|---:|---:|---:|---:|---:|"]
    keys = ("baselines_rewrites", "decompose", "subtask_problems", "subtask_solves",
            "layout_validate")
    for r in rows:
        rev = f" (after = {r['after_rev']})" if r.get("after_rev") else ""
        b = (r.get("before") or {}).get("stage_cpu_s", {})
        a = (r.get("after") or {}).get("stage_cpu_s", {})
        def cell(d: dict[str, float], k: str) -> str:
            return f"{d[k]:.2f}" if k in d else "-"

        cells = [f"{cell(b, k)} -> {cell(a, k)}" for k in keys]
        lines.append(f"| {r['layers']}{rev} | " + " | ".join(cells) + " |")
    prev = res.get("previous")
    if prev:
        lines += ["", f"Beside the previous run ({prev['date']}, `after` = "
                  f"{prev['after_sha'][:10]}; a different load, so compare CPU columns only "
                  "roughly):", "",
                  "| layers | ops | plan CPU s previous / now | max RSS MiB previous / now | "
                  "peak / bound previous / now |", "|---:|---:|---:|---:|---:|"]
        for r in rows:
            p, a = prev["rows"].get(str(r["layers"])), r.get("after")

            def g(x: dict[str, Any] | None, k: str, fmt: str, scale: float = 1.0) -> str:
                return fmt.format(x[k] / scale) if x and x.get(k) is not None else "-"

            rev = f" (after = {r['after_rev']})" if r.get("after_rev") else ""
            lines.append(
                f"| {r['layers']}{rev} | {r['ops']:,} | {g(p, 'plan_cpu_s', '{:.1f}')} / "
                f"{g(a, 'plan_cpu_s', '{:.1f}')} | {g(p, 'max_rss_bytes', '{:.0f}', MIB)} / "
                f"{g(a, 'max_rss_bytes', '{:.0f}', MIB)} | "
                f"{g(p, 'peak_over_bound', '{:.4f}')} / {g(a, 'peak_over_bound', '{:.4f}')} |")
    sb, sa = res.get("growth_before"), res.get("growth_after")
    lines += ["", "Growth exponent (least-squares slope of log plan CPU s against log ops over "
              "the depths above): " + ", ".join(
                  f"{k} {v:.2f}" for k, v in (("before", sb), ("after", sa)) if v) + "."
              if sb or sa else "",
              "", "Planned peaks identical before/after at every depth: "
              f"{res['peaks_identical']}.", "", res.get("note", "")]
    return "\n".join(lines) + "\n"


def _combine(args: argparse.Namespace) -> int:
    runs = [json.loads(Path(p).read_text()) for p in args.combine]
    res = dict(runs[0])
    # rows of a run whose 'after' is not the first run's are marked with their revision
    res["rows"] = sorted(({**r, "after_rev": run["after_sha"][:7]}
                          if run["after_sha"] != runs[0]["after_sha"] else r
                          for run in runs for r in run["rows"]),
                         key=lambda r: (r["layers"], r.get("after_rev", "")))
    res["combined_from"] = [{k: run[k] for k in ("date", "before_sha", "after_sha")}
                            for run in runs]
    res["growth_before"] = _slope(res["rows"], "before")
    res["growth_after"] = _slope([r for r in res["rows"] if not r.get("after_rev")], "after")
    res["peaks_identical"] = all(
        r["before"]["planned_peak_bytes"] == r["after"]["planned_peak_bytes"]
        for r in res["rows"] if r.get("before"))
    res["note"] = args.note
    if args.previous:
        prev = json.loads(Path(args.previous).read_text())
        res["previous"] = {"after_sha": prev["after_sha"], "date": prev["date"],
                           "rows": {str(r["layers"]): r.get("after") for r in prev["rows"]}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
    (out / f"{args.name}.md").write_text(_markdown(res))
    return 0


def _families(args: argparse.Namespace) -> int:
    """The families mode (:mod:`scale_families`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scale_families

    args.family_list = args.families or sorted(scale_families.FAMILY_OPS)
    if args.name == "scale":
        args.name = "scale_families"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    after_sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                               cwd=ROOT, check=True).stdout.strip()
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "workers": args.workers, "before_rev": args.before, "before_sha": "",
        "after_sha": after_sha, "note": args.note, "repeat": max(1, args.repeat),
        "load_start": os.getloadavg()[0], "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        srcs: dict[str, str] = {}
        if args.before:
            (Path(tmp) / "before").mkdir()
            res["before_sha"] = _extract(args.before, Path(tmp) / "before")
            srcs["before"] = str(Path(tmp) / "before")
        (Path(tmp) / "after").mkdir()
        _extract(after_sha, Path(tmp) / "after")
        srcs["after"] = str(Path(tmp) / "after")
        scale_families.run_families(args, res, srcs, env, ROOT, _run_child, _PLAN_CHILD,
                                    _FAMILY_TRACE_CHILD)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[24, 48, 96, 192])
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--before", default=None, metavar="REV",
                   help="git revision whose roam_core is the baseline (default: none)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "roam-scale"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="plan every depth this many times per version (interleaved) and keep "
                         "the run with the least CPU time; all CPU times are recorded")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--name", default="scale")
    ap.add_argument("--note", default="", help="a line added under the table")
    ap.add_argument("--previous", default=None, metavar="JSON",
                    help="an earlier run's scale.json: its 'after' numbers go in a column")
    ap.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                    help="write --name.{json,md} from the rows of these runs (run separately, "
                         "e.g. the deepest depth after-only, at the same time) and plan nothing")
    ap.add_argument("--families", nargs="*", default=None, metavar="FAMILY",
                    help="plan the scale-suite families instead of HF GPT-2 (no names: all "
                         "six); writes scale_families.{json,md} (scale_families.py)")
    ap.add_argument("--quick", action="store_true",
                    help="with --families: depths of about 1k-8k ops (a few minutes)")
    ap.add_argument("--ops", type=int, nargs="+", default=None,
                    help="with --families: the ops targets (default 10k 25k 50k 100k)")
    args = ap.parse_args(argv)
    if args.combine:
        return _combine(args)
    if args.families is not None:
        return _families(args)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    after_sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                               cwd=ROOT, check=True).stdout.strip()
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "workers": args.workers, "before_rev": args.before, "before_sha": "",
        "after_sha": after_sha, "note": args.note, "repeat": max(1, args.repeat),
        "load_start": os.getloadavg()[0], "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        # both versions are snapshots (git archive), so editing the checkout while this runs
        # changes nothing; "after" is HEAD (commit first)
        srcs: dict[str, str] = {}
        if args.before:
            (Path(tmp) / "before").mkdir()
            res["before_sha"] = _extract(args.before, Path(tmp) / "before")
            srcs["before"] = str(Path(tmp) / "before")
        (Path(tmp) / "after").mkdir()
        _extract(after_sha, Path(tmp) / "after")
        srcs["after"] = str(Path(tmp) / "after")
        for layers in args.layers:
            path, trace = _trace(layers, args.width, args.heads, cache, env)
            row: dict[str, Any] = {"layers": layers, "ops": trace["ops"], "trace": trace}
            for rep in range(max(1, args.repeat)):
                for key, src in srcs.items():
                    print(f"[{time.strftime('%H:%M:%S')}] {layers} layers ({trace['ops']} ops): "
                          f"planning with {key} ({rep + 1}/{args.repeat}) ...", file=sys.stderr,
                          flush=True)
                    run = _run_child(_PLAN_CHILD, [src, str(path), str(args.workers)], env)
                    print(f"    {run['plan_cpu_s']:.1f} s CPU, {run['plan_wall_s']:.1f} s "
                          f"wall, peak/bound {run['peak_over_bound']}", file=sys.stderr,
                          flush=True)
                    cpus = [*row.get(key, {}).get("plan_cpu_s_runs", []), run["plan_cpu_s"]]
                    if key in row and row[key]["order_sha256"] != run["order_sha256"]:
                        raise RuntimeError(f"{key}: the planned order differs between runs")
                    if key not in row or run["plan_cpu_s"] < row[key]["plan_cpu_s"]:
                        row[key] = run
                    row[key]["plan_cpu_s_runs"] = cpus
            res["rows"].append(row)
            res["load_end"] = os.getloadavg()[0]
            res["growth_before"] = _slope(res["rows"], "before")
            res["growth_after"] = _slope(res["rows"], "after")
            res["peaks_identical"] = all(
                r["before"]["planned_peak_bytes"] == r["after"]["planned_peak_bytes"]
                for r in res["rows"] if r.get("before"))
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
            (out / f"{args.name}.md").write_text(_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
