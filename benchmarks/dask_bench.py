"""Executor benchmark: one plan's sub-tasks in-process, on the local pool and on a Dask cluster.

Usage::

    nice python benchmarks/dask_bench.py [--graph FILE] [--dask-workers 2] [--out DIR]

Plans one graph with the same :class:`~roam_core.planner.config.PlannerConfig` (fixed seed,
deterministic CP-SAT time limits) four ways: in-process (``workers=1``), the planner's local
process pool (``workers=2``), ``--executor dask-local:N`` (a ``LocalCluster`` that roam starts
and stops) and ``--executor dask://HOST:PORT`` against a ``LocalCluster`` started here (the
path of a cluster that already exists).  Reports the wall time of the sub-task solve stage,
the whole plan's wall time, the planned peak and whether the order is identical to the
in-process one.  Results: ``dask_executor.md`` / ``.json`` in ``--out``.

The machine this ran on may be shared: the point is the identical answer and the overhead of
the cluster, not a speed-up on two cores (sub-tasks scale out across machines; a single
CP-SAT model does not).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _plan(graph: Any, cfg: Any, executor: Any = None) -> dict[str, Any]:
    from roam_core.planner import make_plan

    marks: dict[str, float] = {}

    def progress(p: Any) -> None:
        marks.setdefault(p.stage, time.perf_counter())

    t0 = time.perf_counter()
    plan = make_plan(graph, cfg, progress=progress, executor=executor)
    return {"plan_wall_s": time.perf_counter() - t0,
            "solve_wall_s": marks.get("layout", 0.0) - marks.get("order", 0.0),
            "planned_peak_bytes": plan.planned_peak_bytes, "order": plan.order,
            "subtasks": sum(r.stage == "order" for r in plan.provenance),
            "solved": sum(r.stage == "order" and str(r.status) in ("optimal", "feasible")
                          for r in plan.provenance)}


def main(argv: list[str] | None = None) -> int:
    import distributed

    from roam_core.base.executors import open_executor
    from roam_core.formats.graph_io import load_graph
    from roam_core.ordering.config import OrderSolverConfig
    from roam_core.planner.config import PlannerConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default=str(ROOT / "sample_graphs"
                                           / "gpt2-b1-t128-steady.json.gz"))
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--node-limit", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    graph = load_graph(args.graph)
    cfg = PlannerConfig(node_limit=args.node_limit, workers=1, polish_rounds=0,
                        solve_layout=False,
                        order=OrderSolverConfig(time_limit_s=2.0, stop_at_lower_bound=False,
                                                random_seed=0))
    runs: dict[str, dict[str, Any]] = {}
    runs["in-process (workers=1)"] = _plan(graph, cfg)
    runs["local pool (workers=2)"] = _plan(graph, replace(cfg, workers=2))
    t0 = time.perf_counter()
    with open_executor(f"dask-local:{args.dask_workers}") as ex:
        start = time.perf_counter() - t0
        runs[f"dask-local:{args.dask_workers}"] = _plan(graph, cfg, ex)
    runs[f"dask-local:{args.dask_workers}"]["cluster_start_s"] = start
    cluster = distributed.LocalCluster(n_workers=args.dask_workers, threads_per_worker=1,
                                       processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0")
    try:
        addr = cluster.scheduler_address.removeprefix("tcp://")
        with open_executor(f"dask://{addr}") as ex:
            runs["dask://127.0.0.1:PORT"] = _plan(graph, cfg, ex)
    finally:
        cluster.close()
    ref = runs["in-process (workers=1)"]["order"]
    for r in runs.values():
        r["identical_order"] = r.pop("order") == ref
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "graph": graph.name, "ops": len(graph.ops), "node_limit": args.node_limit,
           "dask": distributed.__version__, "runs": runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dask_executor.json").write_text(json.dumps(res, indent=1))
    lines = [f"# Sub-task executors: {graph.name} ({len(graph.ops):,} ops, node limit "
             f"{args.node_limit}, CP-SAT 2 s deterministic per sub-task, seed 0)", "",
             f"Measured {res['date']} on {res['cpus']} shared CPUs (other jobs were running: "
             "wall times are noisy), Dask distributed "
             f"{distributed.__version__}, LocalCluster of {args.dask_workers} worker "
             "processes on 127.0.0.1.", "",
             "| executor | sub-tasks (solved by CP-SAT) | solve stage wall s | plan wall s | "
             "planned peak bytes | order identical to in-process |",
             "|---|---:|---:|---:|---:|---|"]
    for name, r in runs.items():
        extra = (f" (+{r['cluster_start_s']:.1f} s cluster start)"
                 if "cluster_start_s" in r else "")
        lines.append(f"| {name} | {r['subtasks']} ({r['solved']}) | {r['solve_wall_s']:.1f} | "
                     f"{r['plan_wall_s']:.1f}{extra} | {r['planned_peak_bytes']:,} | "
                     f"{'yes' if r['identical_order'] else 'NO'} |")
    (out / "dask_executor.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
