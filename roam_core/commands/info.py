"""``roam info FILE [--json]``: what a graph holds and what eager PyTorch would use for it.

Prints the graph's size (ops by phase, storages, aliases, control edges by reason), bytes by
tensor kind and by phase, the eager baseline peaks (program order and the moved-state
variant; live-bytes oracle and caching-allocator model), the lower bound and the resident
bytes, and the bytes live at the eager peak by module (``bytes_at_peak_by_module``:
``top_level`` and full ``modules`` paths, ``""`` for the top level, with ``modules_by_kind``;
each adds up to the eager simulated peak).  ``--json`` prints one JSON object instead.
Progress goes to stderr for big graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from roam_core.base.units import format_bytes
from roam_core.commands.arg_types import positive_int

if TYPE_CHECKING:  # commands import quickly: the planner and torch only when run
    from collections.abc import Callable

    from roam_core.model.graph import Graph

__all__ = ["info_dict", "register"]

#: Graphs with at least this many ops (or files this large) get progress lines on stderr.
_PROGRESS_OPS = 1000
_PROGRESS_FILE_BYTES = 1 << 20
#: Top-level modules listed by the human-readable output.
_TOP_MODULES = 8






def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``info`` sub-command."""
    p = subparsers.add_parser(
        "info", help="summarise a graph file: sizes, bytes, eager peaks, lower bound",
        description="Summarise a graph: ops, storages, aliases, control edges, bytes by kind "
                    "and phase, the eager baseline (program order and optimizer state moved "
                    "to first use) as the live-bytes simulation and the caching-allocator "
                    "model see it, the lower bound on any order's peak, and resident bytes.")
    p.add_argument("file", help="graph file (.json or .json.gz)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--alignment-bytes", type=positive_int, default=512,
                   help="round every storage up to this (default 512, like CUDA)")
    p.set_defaults(func=_run)


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            dt = time.perf_counter() - self.t0
            tail = "" if msg == "finished" else " ..."
            print(f"roam info: [{dt:5.1f} s] {msg}{tail}", file=sys.stderr, flush=True)


def info_dict(graph: Graph, alignment_bytes: int = 512,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The JSON object ``roam info --json`` prints for ``graph``."""
    from roam_core.model.graph import Phase
    from roam_core.model.parallel import parallel_of
    from roam_core.oracle.attribution import bytes_at_peak_by_module
    from roam_core.oracle.baseline import eager_report

    r = eager_report(graph, alignment_bytes, progress=progress)
    if progress is not None:
        progress("bytes at the eager peak by module")
    by_module = bytes_at_peak_by_module(graph, alignment_bytes=alignment_bytes)
    ops_by_phase = {p.value: 0 for p in Phase}
    for op in graph.ops:
        ops_by_phase[op.phase.value] += 1
    par = parallel_of(graph)
    return {
        "name": graph.name,
        "origin": dict(graph.origin),
        "fingerprint": graph.fingerprint(),
        "parallel": par.kind,
        "world_size": par.world_size,
        "parallel_setting": par.to_dict(),
        # the graph is the step of one rank: every byte figure is per rank
        "bytes_by_kind_per_rank": dict(r.bytes_by_kind),
        "ops": r.n_ops,
        "ops_by_phase": ops_by_phase,
        "storages": r.n_storages,
        "resident_storages": len(graph.resident_ids),
        "aliases": r.n_aliases,
        "control_edges": len(graph.control_edges),
        "control_edges_by_reason": dict(r.control_edges_by_reason),
        "outputs": len(graph.outputs),
        "alignment_bytes": r.alignment_bytes,
        "bytes_by_kind": dict(r.bytes_by_kind),
        "bytes_by_phase": dict(r.bytes_by_phase),
        "resident_bytes": r.resident_bytes,
        "eager_simulated_peak_bytes": r.simulated_peak_bytes,
        "eager_peak_allocated_bytes": r.peak_allocated_bytes,
        "eager_peak_reserved_bytes": r.peak_reserved_bytes,
        "eager_peak_step": r.peak_step,
        "eager_peak_op": r.peak_op,
        "eager_peak_bytes_by_kind": dict(r.peak_bytes_by_kind),
        "moved_state_ops": r.moved_state_ops,
        "moved_state_simulated_peak_bytes": r.moved_state_simulated_peak_bytes,
        "moved_state_peak_allocated_bytes": r.moved_state_peak_allocated_bytes,
        "moved_state_peak_reserved_bytes": r.moved_state_peak_reserved_bytes,
        "lower_bound_bytes": r.lower_bound_bytes,
        "lower_bound_method": r.lower_bound_method,
        "live_set_lower_bound_bytes": r.live_set_lower_bound_bytes,
        "lower_bound_op": r.lower_bound_op,
        "bytes_at_peak_by_module": {
            "order": "program",
            "step": by_module.step,
            "peak_bytes": by_module.total_bytes,
            "top_level": by_module.top_level_bytes(),
            "modules": by_module.own_bytes(),
            "modules_by_kind": by_module.kind_bytes(),
        },
    }


def _table(rows: dict[str, int], indent: str = "  ") -> list[str]:
    width = max((len(k) for k in rows), default=0)
    return [f"{indent}{k:<{width}}  {format_bytes(v):>12}" for k, v in rows.items()]


def _human(d: dict[str, Any]) -> str:
    fb = format_bytes
    origin = ", ".join(f"{k}={v}" for k, v in d["origin"].items())
    phases = ", ".join(f"{k} {v}" for k, v in d["ops_by_phase"].items() if v)
    edges = ", ".join(f"{k} {v}" for k, v in d["control_edges_by_reason"].items() if v)
    lines = [
        f"graph          {d['name']}  ({origin})",
        f"fingerprint    {d['fingerprint'][:16]}",
        f"parallel       {_parallel_line(d)}",
        f"ops            {d['ops']}" + (f"  ({phases})" if phases else ""),
        f"storages       {d['storages']}  ({d['resident_storages']} resident), "
        f"{d['aliases']} aliases, {d['outputs']} outputs",
        f"control edges  {d['control_edges']}" + (f"  ({edges})" if edges else ""),
        f"bytes by kind (rounded to {d['alignment_bytes']} B):",
        *_table(d["bytes_by_kind"]),
        "bytes by phase (allocated by the phase's ops):",
        *_table(d["bytes_by_phase"]),
        f"resident       {fb(d['resident_bytes'])}",
        "eager, program order:",
        f"  simulated peak    {fb(d['eager_simulated_peak_bytes'])}  "
        f"(step {d['eager_peak_step']}, op {d['eager_peak_op']})",
        f"  allocator model   {fb(d['eager_peak_allocated_bytes'])} allocated, "
        f"{fb(d['eager_peak_reserved_bytes'])} reserved",
        f"eager, optimizer state created at first use ({d['moved_state_ops']} ops moved):",
        f"  simulated peak    {fb(d['moved_state_simulated_peak_bytes'])}",
        f"  allocator model   {fb(d['moved_state_peak_allocated_bytes'])} allocated, "
        f"{fb(d['moved_state_peak_reserved_bytes'])} reserved",
        f"lower bound    {fb(d['lower_bound_bytes'])} ({d['lower_bound_method']}; live-set "
        f"{fb(d['live_set_lower_bound_bytes'])} at op {d['lower_bound_op']})",
    ]
    bm = d["bytes_at_peak_by_module"]
    top = sorted(bm["top_level"].items(), key=lambda kv: -kv[1])
    lines.append(f"at the eager peak (step {bm['step']}), by top-level module:")
    lines += _table({(k or "(top level)"): v for k, v in top[:_TOP_MODULES]})
    if len(top) > _TOP_MODULES:
        rest = sum(v for _, v in top[_TOP_MODULES:])
        lines.append(f"  ... {len(top) - _TOP_MODULES} more, {fb(rest)}")
    return "\n".join(lines)


def _parallel_line(d: dict[str, Any]) -> str:
    from roam_core.model.parallel import ParallelSetting

    par = ParallelSetting.from_mapping(d["parallel_setting"])
    if not par.active:
        return "none (one device)"
    return f"{par.describe()}: the step of one rank, every byte below is per rank"


def _run(args: argparse.Namespace) -> int:
    from roam_core.formats.graph_io import load_graph

    try:
        big_file = os.path.getsize(args.file) >= _PROGRESS_FILE_BYTES
    except OSError:
        big_file = False  # load_graph reports the problem
    progress = _Progress(big_file)
    progress(f"loading {args.file}")
    graph = load_graph(args.file)
    progress.enabled = progress.enabled or len(graph.ops) >= _PROGRESS_OPS
    d = info_dict(graph, args.alignment_bytes, progress)
    progress("finished")
    if args.json:
        print(json.dumps(d, separators=(",", ":")))
    else:
        print(_human(d))
    return 0
