"""Work-bounded ordering: plan time, peak and reproducibility, quiet and under load.

Usage::

    nice python benchmarks/work_bound_bench.py [--before REV] [--spinners 3] [--render]

Plans a few graphs whose ordering polish ran into CP-SAT's wall safety limit (tiny_gpt
FSDP and DDP ranks at world size 2, the HF ``mamba`` family at batch 1) with ``--before``'s
roam_core and this checkout's ``HEAD`` (both extracted with ``git archive``), each in a
fresh subprocess (default ``PlannerConfig``, one worker), first as the machine is, then
with ``--spinners`` child processes spinning on the CPU.  Records wall and CPU seconds, the
planned peak, the arena, the polish stage's seconds and why every stage stopped, and
whether the plan under load equals the plan without.  Writes
``benchmarks/results/work_bound.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_TRACE = r"""
import sys
from roam_core.formats.graph_io import save_graph
kind, out = sys.argv[1], sys.argv[2]
if kind == "mamba":
    from roam_core.trace.tracer import trace_fx
    from roam_core.zoo.hf import build_hf_step
    from tests.roam_core.zoo.hf_families import FAMILIES
    task, settings = FAMILIES["mamba"]
    step = build_hf_step("mamba", 1, 12, task=task, **settings)
    g = trace_fx(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory).graph
else:
    from roam_core.model.parallel import ParallelSetting
    from roam_core.zoo.steps import trace_zoo
    par, b, t = kind.split("-")
    g = trace_zoo("tiny_gpt", int(b), int(t), parallel=ParallelSetting(par, 2)).graph
save_graph(g, out)
print(len(g.ops))
"""

_PLAN = r"""
import hashlib, json, resource, sys, time
from roam_core.formats.graph_io import load_graph
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
g = load_graph(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
p = make_plan(g, PlannerConfig(workers=1))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
stages = getattr(p, "stages", ())
print(json.dumps({
    "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
    "planned_peak_bytes": p.planned_peak_bytes, "arena_bytes": p.arena_bytes,
    "order_sha": hashlib.sha1("\n".join(map(str, p.order)).encode()).hexdigest()[:12],
    "stages": [[s.stage, round(s.wall_s, 2), round(s.cpu_s, 2), s.gained_bytes, s.stopped]
               for s in stages],
    "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""

CASES = ("fsdp-1-64", "fsdp-2-16", "ddp-1-64", "ddp-2-16", "mamba")


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _child(code: str, args: list[str], src: str) -> str:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True,
                         capture_output=True, text=True, cwd=src)
    return out.stdout.strip().splitlines()[-1]


def _extract(rev: str, into: Path) -> str:
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    tar = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar.stdout, check=True)
    return sha


def _polish(run: dict[str, Any]) -> str:
    rows = [s for s in run["stages"] if s[0] == "polish"]
    return f"{rows[0][1]:.1f} ({rows[0][4]})" if rows else "-"


def _markdown(res: dict[str, Any]) -> str:
    lines = [
        "# Work-bounded ordering: plan time and reproducibility under load", "",
        f"`python benchmarks/work_bound_bench.py --before {res['before_rev']} --spinners "
        f"{res['spinners']}` on {res['date']}; `before` is roam_core of "
        f"`{res['before_rev']}` ({res['before_sha'][:10]}), `after` this checkout "
        f"({res['after_sha'][:10]}). Load average at the start {res['load_start']}, at the "
        f"end {res['load_end']}, {res['nproc']} CPUs, shared by other developers (loaded: "
        "the coordinator may re-run it on a quiet machine). Default `PlannerConfig`, one "
        "worker, one fresh process per plan; `as is` runs on the machine as it is (its "
        "load in the column), `loaded` with the extra processes spinning beside it. "
        "`before` records no stop reasons (its polish windows that the wall clock cut "
        "say `done`).", "",
        "| graph | ops | version | load | wall s | CPU s | polish wall s (stopped) | "
        "planned peak | arena | same plan as without the spinners |",
        "|---|---:|---|---|---:|---:|---|---:|---:|---|"]
    for r in res["rows"]:
        for ver in ("before", "after"):
            for cond in ("quiet", "loaded"):
                run = r.get(f"{ver}_{cond}")
                if run is None:
                    continue
                same = "" if cond == "quiet" else (
                    "yes" if run["order_sha"] == r[f"{ver}_quiet"]["order_sha"] else "**no**")
                lines.append(
                    f"| {r['graph']} | {r['ops']} | {ver} | "
                    f"{'as is' if cond == 'quiet' else cond} ({run['load']:.1f}) | "
                    f"{run['wall_s']:.1f} | {run['cpu_s']:.1f} | {_polish(run)} | "
                    f"{run['planned_peak_bytes']:,} | {run['arena_bytes']:,} | {same} |")
    lines += ["", "Stages that stopped for `time` (a wall-clock limit): "
              + (", ".join(res["time_stops"]) or "none") + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="main")
    ap.add_argument("--spinners", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--render", action="store_true",
                    help="only write work_bound.md again from --out's work_bound.json")
    args = ap.parse_args(argv)
    if args.render:
        out = Path(args.out)
        (out / "work_bound.md").write_text(
            _markdown(json.loads((out / "work_bound.json").read_text())))
        return 0
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "nproc": os.cpu_count(),
        "load_start": [round(x, 2) for x in os.getloadavg()], "before_rev": args.before,
        "spinners": args.spinners, "rows": [], "time_stops": []}
    with tempfile.TemporaryDirectory() as tmp:
        srcs = {}
        for ver, rev in (("before", args.before), ("after", "HEAD")):
            (Path(tmp) / ver).mkdir()
            res[f"{ver}_sha"] = _extract(rev, Path(tmp) / ver)
            srcs[ver] = str(Path(tmp) / ver)
        for case in args.cases:
            gpath = str(Path(tmp) / f"{case}.json")
            ops = int(_child(_TRACE, [case, gpath], str(ROOT)))
            row: dict[str, Any] = {"graph": case, "ops": ops}
            for cond in ("quiet", "loaded"):
                spinners = [multiprocessing.Process(target=_spin, args=(600.0,))
                            for _ in range(args.spinners if cond == "loaded" else 0)]
                for p in spinners:
                    p.start()
                try:
                    for ver in ("before", "after"):
                        run = json.loads(_child(_PLAN, [gpath], srcs[ver]))
                        run["load"] = os.getloadavg()[0]
                        row[f"{ver}_{cond}"] = run
                        res["time_stops"] += [f"{case} {ver} {cond} {s[0]}"
                                              for s in run["stages"] if s[4] == "time"]
                        print(case, ver, cond, run["wall_s"], run["cpu_s"],
                              run["planned_peak_bytes"], _polish(run), flush=True)
                finally:
                    for p in spinners:
                        p.terminate()
                        p.join()
            res["rows"].append(row)
    res["load_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    (out / "work_bound.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "work_bound.md").write_text(_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
