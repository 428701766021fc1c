"""Greedy layout passes: this version against ``--before`` on the scale families, same process.

Usage::

    nice python benchmarks/greedy_pass_bench.py [--before e53ba78] [--repeat 3]
        [--time moe:20] [--same moe:10 moe:20 llama:26 t5:11 resnet:67]

The ``--before`` revision's ``roam_core/layout/dsa_heuristics.py`` is loaded beside this one
(``git show``) and the layout's greedy steps (``layout.greedy``, ``promote``, ``restart``)
are pointed at one or the other, alternately, while the same graph is planned ``--repeat``
times each: the CPU seconds of those stages, before and after, come from the plans' own
stage records (``Plan.stages``).  Every plan's offsets must equal the before plan's.  For
each ``--same`` graph the captured layout problem is also placed with every named order and
both fits by both versions, and the offsets compared.  Prints a Markdown report (with
``uptime``); ``--out FILE`` writes it too.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import roam_core.layout.arena_stages as stages  # noqa: E402
from roam_core.layout import dsa_heuristics as new  # noqa: E402
from roam_core.model.dsa import Problem  # noqa: E402
from roam_core.planner import make_plan  # noqa: E402
from roam_core.planner.config import PlannerConfig  # noqa: E402
from roam_core.zoo.families import trace_family  # noqa: E402

_STAGES = ("layout.greedy", "layout.promote", "layout.restart")


def _old_module(rev: str) -> ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:roam_core/layout/dsa_heuristics.py"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "dsa_heuristics_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("dsa_heuristics_before", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _use(mod: ModuleType) -> None:
    stages.place_in_order = mod.place_in_order  # type: ignore[attr-defined]
    stages.promote_high = mod.promote_high  # type: ignore[attr-defined]


def _plan(graph: Any, mod: ModuleType) -> tuple[dict[str, float], dict[str, int], list[Problem]]:
    _use(mod)
    seen: list[Problem] = []
    init = stages.ArenaStages.__init__

    def capture(self: Any, problem: Problem, *a: Any, **k: Any) -> None:
        seen.append(problem)
        init(self, problem, *a, **k)

    stages.ArenaStages.__init__ = capture  # type: ignore[method-assign]
    try:
        plan = make_plan(graph, PlannerConfig(workers=1))
    finally:
        stages.ArenaStages.__init__ = init  # type: ignore[method-assign]
        _use(new)
    cpu = {s.stage: s.cpu_s for s in plan.stages if s.stage in _STAGES}
    return cpu, dict(plan.offsets), seen


def _passes_equal(old: ModuleType, problem: Problem) -> int:
    n = 0
    for name in sorted(new.ORDERS):
        order = new.named_order(problem, name)
        for fit in ("best", "first"):
            a, b = old.place_in_order(problem, order, fit), new.place_in_order(problem, order, fit)
            if a is None or b is None or a.offsets != b.offsets:
                raise SystemExit(f"different offsets: order {name}, fit {fit}")
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the last commit before the vectorised pass (``main`` would compare the code with itself)
    ap.add_argument("--before", default="e53ba78")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--time", default="moe:20")
    ap.add_argument("--same", nargs="*",
                    default=["moe:10", "moe:20", "llama:26", "t5:11", "resnet:67"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    old = _old_module(args.before)
    lines = [f"# Greedy layout passes: this version against `{args.before}`", ""]
    lines.append("| graph | ops | buffers | plans | passes compared | offsets |")
    lines.append("|---|---:|---:|---:|---:|---|")
    timed: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for case in args.same:
        fam, depth = case.split(":")
        graph = trace_family(fam, int(depth))
        reps = args.repeat if case == args.time else 1
        ref: dict[str, int] | None = None
        probs: list[Problem] = []
        for _ in range(reps):
            for tag, mod in (("before", old), ("after", new)):
                cpu, offsets, probs = _plan(graph, mod)
                ref = offsets if ref is None else ref
                if offsets != ref:
                    raise SystemExit(f"{case}: the plans' offsets differ")
                if case == args.time:
                    timed[tag].append(cpu)
        compared = sum(_passes_equal(old, p) for p in probs)
        lines.append(f"| {fam}-{depth} | {len(graph.ops):,} | {sum(map(len, probs)):,} | "
                     f"{2 * reps} | {compared} | equal |")
    lines += ["", f"CPU s of the layout's greedy stages on {args.time} (median of "
              f"{args.repeat} plans each, interleaved, one process):", "",
              "| stage | before | after | after / before |", "|---|---:|---:|---:|"]
    for st in _STAGES:
        b = statistics.median(r.get(st, 0.0) for r in timed["before"])
        a = statistics.median(r.get(st, 0.0) for r in timed["after"])
        lines.append(f"| {st} | {b:.3f} | {a:.3f} | {a / b:.2f} |" if b else
                     f"| {st} | {b:.3f} | {a:.3f} | - |")
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines += ["", f"Load (`uptime` at the end): {up}"]
    report = "\n".join(lines) + "\n"
    sys.stdout.write(report)
    if args.out:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
