"""Trace benchmark: every zoo config, one fresh subprocess each (so max RSS is the trace's).

Usage::

    nice python benchmarks/trace_bench.py [--steady] [--only SUBSTRING] [--batch B]
        [--out benchmarks/results] [--baseline-tree DIR] [--dump DIR] [--repeat N] [--merge]

For each config the child process builds the model on the meta device, traces it with
:func:`roam_core.zoo.trace_zoo` (timed; max RSS read right after the trace), then computes
the program-order ("eager") peak with :func:`roam_core.oracle.simulate.simulate` and, when those
modules are available, the caching-allocator model's peak reserved
(:mod:`roam_core.oracle.allocator_sim`), the moved-state eager peak
(:mod:`roam_core.oracle.baseline`) and
the live-set lower bound (:mod:`roam_core.oracle.bounds`).  Results go to ``trace.md`` and
``trace.json`` in ``--out``.  Children run with ``OMP_NUM_THREADS=2``.

Every row records ``trace_cpu_s`` (the child's CPU seconds of the trace,
``time.process_time()``, beside the wall ``trace_s``), the 1-minute load average at the end
of the trace and ``digest``: the SHA-256 of a canonical JSON of the whole traced
step (:func:`step_record`: the graph -- ops, storages, sizes, aliases, edges, module paths,
FLOPs, bytes --, the value map, the placeholders, the RNG timeline and the FX graph).  With
``--baseline-tree DIR`` (a checkout of another commit, e.g. ``git archive 90d86dd roam_core
| tar -x -C DIR``) every config is also traced, in its own fresh process, with that
checkout's ``roam_core`` just before the current one, and the table shows both times and
whether the digests agree.  ``--dump DIR`` writes each step's canonical JSON there.
``--repeat N`` runs every config (and its baseline) N times, alternating, and reports the
medians beside every run; ``--merge`` keeps the rows of the existing ``trace.json`` that are
not re-run and records, in each re-run row, the row it replaces (``previous``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MIB = 2**20

ROAM = [(m, b, None, "roam") for m in ("alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2",
                                        "efficientnet_b0", "vit_b_16", "roberta-base")
        for b in (1, 32)]
GPT2XL = [("gpt2-xl", b, 1024, "roam") for b in (1, 2, 4)]
STEADY = [("gpt2", 8, 1024, "steady"), ("gpt2-xl", 1, 1024, "steady"),
          ("resnet50", 32, None, "steady"), ("mobilenet_v2", 32, None, "steady"),
          ("roberta-base", 8, 512, "steady")]


def step_record(step: Any) -> dict[str, Any]:
    """Canonical plain-JSON record of a ``TracedStep``: everything a trace produces.

    The graph (``graph_io.graph_to_dict``: ops with inputs, outputs, mutated storages, module
    paths, FLOPs and bytes; storages with sizes, dtypes, shapes, kinds, names; aliases;
    control edges), the value map, the placeholders and constants, the loss value, the RNG
    timeline and the FX graph's text.  Two traces are identical when these are equal.
    Control edges are sorted: they are a set (``Graph.fingerprint`` sorts them too), and
    before this commit the tracer emitted them in a per-process (string-hash) order.
    """
    from roam_core.formats.graph_io import graph_to_dict

    rng = step.rng
    graph = graph_to_dict(step.graph)
    graph["control_edges"].sort(key=lambda e: (e["src"], e["dst"], e["reason"]))
    for op in graph["ops"]:  # source lines move with any edit of the model's file
        op.pop("source", None)
    return {
        "graph": graph,
        "values": {k: [v.op, v.index, v.fx_node] for k, v in step.values.items()},
        "placeholders": [[r.node, r.kind.value, r.name] for r in step.placeholders],
        "constants": [[r.node, r.kind.value, r.name] for r in step.constants],
        "loss_value": step.loss_value, "setting": step.setting, "optimizer": step.optimizer,
        "rng": {"draws": [[d.op, d.device, d.state_in, d.state_out, d.signature]
                          for d in rng.draws], "final": dict(rng.final)},
        "fx_graph": str(step.gm.graph),
    }


def step_digest(record: dict[str, Any]) -> str:
    """SHA-256 of a :func:`step_record` (sorted keys, compact separators)."""
    raw = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()


def _child(model: str, batch: int, seq: int | None, setting: str,
           dump: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    from roam_core.zoo import trace_zoo

    t1, c1 = time.perf_counter(), time.process_time()
    step = trace_zoo(model, batch, seq, setting)
    trace_s, trace_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    g = step.graph
    record = step_record(step)
    digest = step_digest(record)
    if dump:
        name = f"{model}-b{batch}-t{seq or 0}-{setting}.json"
        (Path(dump) / name).write_text(json.dumps(record, sort_keys=True, indent=0))
    from roam_core.oracle.simulate import simulate

    row: dict[str, Any] = {
        "model": model, "batch": batch, "seq_len": g.origin.get("seq_len"), "setting": setting,
        "optimizer": g.origin.get("optimizer"), "ops": len(g), "storages": len(g.tensors),
        "aliases": len(g.aliases), "control_edges": len(g.control_edges),
        "trace_s": round(trace_s, 2), "trace_cpu_s": round(trace_cpu_s, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2), "digest": digest,
        "process_s": None, "max_rss_bytes": rss,
        "resident_bytes": g.resident_bytes(),
        "eager_peak_bytes": simulate(g, g.op_ids).peak_bytes,
        "eager_reserved_bytes": None, "moved_state_peak_bytes": None, "lower_bound_bytes": None,
    }
    try:
        from roam_core.oracle.allocator_sim import simulate_allocator

        row["eager_reserved_bytes"] = simulate_allocator(g, g.op_ids).peak_reserved_bytes
    except ImportError:
        pass
    try:
        from roam_core.oracle.baseline import moved_state_order

        row["moved_state_peak_bytes"] = simulate(g, moved_state_order(g)).peak_bytes
    except ImportError:
        pass
    try:
        from roam_core.oracle.bounds import live_set_lower_bound

        row["lower_bound_bytes"] = live_set_lower_bound(g).bound_bytes
    except ImportError:
        pass
    row["process_s"] = round(time.perf_counter() - t0, 2)
    import roam_core

    row["roam_core"] = str(Path(roam_core.__file__).resolve().parent)
    return row


def _run_child(cfg: tuple[str, int, int | None, str], tree: str | None = None,
               dump: str | None = None) -> dict[str, Any]:
    model, batch, seq, setting = cfg
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
           "PYTHONPATH": os.pathsep.join(
               [tree or str(Path(__file__).resolve().parent.parent),
                os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = [sys.executable, __file__, "--child", model, str(batch), str(seq or 0), setting]
    if dump:
        cmd += ["--dump", dump]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"model": model, "batch": batch, "seq_len": seq, "setting": setting,
                "error": tail[0]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    row["tree"] = tree
    return row


def _mib(v: Any) -> str:
    return "" if v is None else f"{v / MIB:,.1f}"


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["model"], r["batch"], r["seq_len"], r["setting"])


def _cpu(r: dict[str, Any]) -> str:
    v = r.get("trace_cpu_s")
    return "" if v is None else f"{v:.1f}"


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else round((xs[n // 2 - 1] + xs[n // 2]) / 2, 2)


def _aggregate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for the repeated runs of a config: the medians of trace s, CPU s and load,
    every run's numbers under ``runs``, and ``digest`` (``"DIFFERENT"`` if runs disagree)."""
    ok = [r for r in samples if "error" not in r]
    if not ok:
        return samples[-1]
    row = dict(sorted(ok, key=lambda r: r["trace_cpu_s"])[(len(ok) - 1) // 2])
    if len(ok) > 1:
        for k in ("trace_s", "trace_cpu_s", "load_avg_1m"):
            row[k] = _median([r[k] for r in ok])
        row["max_rss_bytes"] = max(r["max_rss_bytes"] for r in ok)
        digests = {r["digest"] for r in ok}
        row["digest"] = digests.pop() if len(digests) == 1 else "DIFFERENT"
    row["runs"] = [{k: r[k] for k in ("trace_s", "trace_cpu_s", "load_avg_1m", "digest")}
                   for r in ok]
    return row


def _num(v: Any) -> str:
    return "" if v is None else f"{v:.1f}"


def _runs(r: dict[str, Any], key: str = "trace_cpu_s") -> str:
    runs = r.get("runs") or []
    return " / ".join(f"{x[key]:.1f}" for x in runs) if len(runs) > 1 else ""


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Trace benchmark",
        "",
        f"`python benchmarks/trace_bench.py` on {meta['machine']} ({meta['cpus']} CPUs), "
        f"torch {meta['torch']}, {meta['date']}. One fresh process per config "
        "(`OMP_NUM_THREADS=2`); trace s = building the meta model + make_fx + graph build; "
        "max RSS = the child process right after the trace. Memory in MiB, resident bytes "
        "(parameters, buffers, batch, resident optimizer state) included; eager = program "
        "order through `simulate` (512 B rounding); reserved = `allocator_sim` "
        "(caching-allocator model) in program order; moved = eager with optimizer-state "
        "creation moved to first use (`baseline.moved_state_order`); bound = live-set lower "
        "bound (`bounds`).",
        "",
    ]
    if meta.get("older_rows_date"):
        lines[2] += (f" Rows without CPU s were measured {meta['older_rows_date']} (main before "
                     "issue 14) and not re-run; their trace s had the load of that day.")
    if meta.get("kept_rows_date"):
        lines[2] += (" Rows with CPU s that are not in the before/after table were measured "
                     f"{meta['kept_rows_date']} (`--merge`) and not re-run.")
    before = {_key(r): r for r in rows if r.get("tree")}
    rows = [r for r in rows if not r.get("tree")]
    if before:
        lines += [
            f"Before = `{meta.get('baseline_tree')}` (`--baseline-tree`), traced in its own "
            "fresh process just before each after-row; CPU s = `time.process_time()` of the "
            "trace; load = 1-minute load average at the end of the trace (the machine is "
            "shared: wall seconds are noisy, CPU seconds less so); same = the SHA-256 of the "
            "whole traced step (graph with module paths and FLOPs, value map, placeholders, "
            "RNG timeline, FX graph) equals the before-trace's.",
            "",
            "| model | batch | seq | setting | ops | before s | before CPU s | before load | "
            "trace s | CPU s | load | before max RSS MiB | max RSS MiB | same |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        repeated = []
        for r in rows:
            b = before.get(_key(r))
            if "error" in r or b is None or "error" in b:
                continue
            if _runs(r):
                repeated.append((r, b))
            same = r["digest"] == b["digest"] and r["digest"] != "DIFFERENT"
            lines.append(
                f"| {r['model']} | {r['batch']} | {r['seq_len'] or ''} | {r['setting']} | "
                f"{r['ops']:,} | {b['trace_s']:.1f} | {b['trace_cpu_s']:.1f} | "
                f"{b['load_avg_1m']:.1f} | {r['trace_s']:.1f} | {r['trace_cpu_s']:.1f} | "
                f"{r['load_avg_1m']:.1f} | {b['max_rss_bytes'] / MIB:,.0f} | "
                f"{r['max_rss_bytes'] / MIB:,.0f} | {'yes' if same else 'NO'} |")
        lines.append("")
        if repeated:
            lines += [
                f"Repeated configs (`--repeat {meta.get('repeat')}`: before and after "
                "alternate, one fresh process each): the table shows medians; every run's "
                "CPU s, in order:",
                "",
                "| model | batch | setting | before CPU s runs | after CPU s runs | "
                "before wall s runs | after wall s runs | loads (after) |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for r, b in repeated:
                lines.append(
                    f"| {r['model']} | {r['batch']} | {r['setting']} | {_runs(b)} | {_runs(r)} "
                    f"| {_runs(b, 'trace_s')} | {_runs(r, 'trace_s')} | "
                    f"{_runs(r, 'load_avg_1m')} |")
            lines.append("")
    prev = [r for r in rows if r.get("previous")]
    if prev:
        pm = prev[0]["previous"]
        lines += [
            f"Previous committed numbers (`trace.json` of {pm.get('date')}, the row "
            "replaced by this run):",
            "",
            "| model | batch | setting | previous trace s | previous CPU s | previous load | "
            "this run trace s | this run CPU s | this run load |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prev:
            p = r["previous"]
            lines.append(
                f"| {r['model']} | {r['batch']} | {r['setting']} | {p['trace_s']:.1f} | "
                f"{_num(p.get('trace_cpu_s'))} | {_num(p.get('load_avg_1m'))} | "
                f"{r['trace_s']:.1f} | {r['trace_cpu_s']:.1f} | {r['load_avg_1m']:.1f} |")
        lines.append("")
    lines += [
        "| model | batch | seq | setting | ops | storages | trace s | CPU s | max RSS MiB "
        "| resident | eager | reserved | moved | bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['seq_len'] or ''} | "
                         f"{r['setting']} | error: {r['error']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['seq_len'] or ''} | {r['setting']} | "
            f"{r['ops']:,} | {r['storages']:,} | {r['trace_s']:.1f} | "
            f"{_cpu(r)} | {r['max_rss_bytes'] / MIB:,.0f} | {_mib(r['resident_bytes'])} | "
            f"{_mib(r['eager_peak_bytes'])} | {_mib(r['eager_reserved_bytes'])} | "
            f"{_mib(r['moved_state_peak_bytes'])} | {_mib(r['lower_bound_bytes'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one config) and write the results."""
    ap = argparse.ArgumentParser(description="trace every zoo config and record its size")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "B", "T", "SETTING"))
    ap.add_argument("--steady", action="store_true", help="also the steady-setting configs")
    ap.add_argument("--only", default=None, help="only models whose name contains this")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--baseline-tree", default=None,
                    help="a checkout holding another roam_core: trace each config with it too")
    ap.add_argument("--baseline-label", default=None,
                    help="how the table names the baseline (default: its path)")
    ap.add_argument("--dump", default=None, help="write each step's canonical JSON here")
    ap.add_argument("--batch", type=int, default=None, help="only configs of this batch size")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each config (and its baseline) this many times, alternating; "
                         "the tables show medians and every run")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of the existing trace.json that this run does not "
                         "re-measure; re-measured rows record the replaced row as previous")
    args = ap.parse_args(argv)
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
    if args.child:
        m, b, t, s = args.child
        print(json.dumps(_child(m, int(b), int(t) or None, s, args.dump)))
        return 0
    import torch

    configs = ROAM + GPT2XL + (STEADY if args.steady else [])
    if args.only:
        configs = [c for c in configs if args.only in c[0]]
    if args.batch is not None:
        configs = [c for c in configs if c[1] == args.batch]
    rows = []
    base = str(Path(args.baseline_tree).resolve()) if args.baseline_tree else None
    for cfg in configs:
        samples: dict[str | None, list[dict[str, Any]]] = {}
        for _ in range(max(1, args.repeat)):
            for tree in ([base] if base else []) + [None]:
                dump = None if not args.dump else str(Path(args.dump) / ("before" if tree
                                                                          else "after"))
                if dump:
                    Path(dump).mkdir(parents=True, exist_ok=True)
                row = _run_child(cfg, tree, dump)
                samples.setdefault(tree, []).append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        rows += [_aggregate(v) for v in samples.values()]
    meta = {"machine": platform.machine() + " " + platform.processor(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(),
            "baseline_tree": args.baseline_label or args.baseline_tree,
            "repeat": args.repeat,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge and (out / "trace.json").exists():
        old = json.loads((out / "trace.json").read_text())
        done = {(_key(r), bool(r.get("tree"))) for r in rows}
        old_after = {_key(r): r for r in old["rows"] if not r.get("tree")}
        for r in rows:
            p = old_after.get(_key(r))
            if not r.get("tree") and p is not None and "error" not in p:
                r["previous"] = {k: p.get(k) for k in ("trace_s", "trace_cpu_s",
                                                        "load_avg_1m", "digest")}
                r["previous"]["date"] = old["meta"].get("date")
        kept = [r for r in old["rows"] if (_key(r), bool(r.get("tree"))) not in done
                and not r.get("tree")]
        order = {_key(r): i for i, r in enumerate(old["rows"])}
        rows = sorted(rows + kept, key=lambda r: order.get(_key(r), len(order)))
        meta["older_rows_date"] = old["meta"].get("older_rows_date") or old["meta"].get("date")
        if any(r.get("trace_cpu_s") is not None for r in kept):
            meta["kept_rows_date"] = old["meta"].get("date")
    (out / "trace.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "trace.md").write_text(_markdown(rows, meta))
    print(_markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
