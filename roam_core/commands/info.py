"""``roam info FILE [--json]``: what a graph holds and what eager PyTorch would use for it.

Prints the graph's size (ops by phase, storages, aliases, control edges by reason), bytes by
tensor kind and by phase, the eager baseline peaks (program order and the moved-state
variant; live-bytes oracle and caching-allocator model), the lower bound and the resident
bytes, and the bytes live at the eager peak by module (``bytes_at_peak_by_module``:
``top_level`` and full ``modules`` paths, ``""`` for the top level, with ``modules_by_kind``;
each adds up to the eager simulated peak).  ``--json`` prints one JSON object instead.
Progress goes to stderr for big graphs.

Precision (:mod:`roam_core.oracle.precision_bytes`): the graph's ``precision`` (old files:
``fp32``), ``bytes_by_dtype`` and ``bytes_by_kind_and_dtype``, and ``precision_by_module``:
each module group's activations split into weight copies, fp32 islands and bf16/fp16
activations.  ``--vs-fp32`` re-traces a zoo or Hugging Face graph in fp32 from its origin
and adds that graph's activations per module group (``fp32_reference_bytes``) beside them.
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
    p.add_argument("--vs-fp32", action="store_true",
                   help="re-trace the graph's zoo or Hugging Face model in fp32 and show, by "
                        "module, how the activations differ (weight copies, fp32 islands)")
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
              progress: Callable[[str], None] | None = None,
              fp32_reference: Graph | None = None) -> dict[str, Any]:
    """The JSON object ``roam info --json`` prints for ``graph`` (``fp32_reference``: the
    same step traced in fp32, for ``precision_by_module``)."""
    from roam_core.formats.device_profile_io import resolve_profile
    from roam_core.model.cost_model import step_seconds
    from roam_core.model.device_profiles import DEFAULT_PROFILE
    from roam_core.model.graph import Phase
    from roam_core.model.parallel import parallel_of
    from roam_core.oracle.attribution import bytes_at_peak_by_module
    from roam_core.oracle.baseline import eager_report
    from roam_core.oracle.precision_bytes import bytes_by_dtype, precision_by_module
    from roam_core.planner.headline import setting_text

    r = eager_report(graph, alignment_bytes, progress=progress)
    if progress is not None:
        progress("bytes at the eager peak by module")
    by_module = bytes_at_peak_by_module(graph, alignment_bytes=alignment_bytes)
    ops_by_phase = {p.value: 0 for p in Phase}
    for op in graph.ops:
        ops_by_phase[op.phase.value] += 1
    by_kind_dtype = bytes_by_dtype(graph, alignment_bytes)
    by_dtype: dict[str, int] = {}
    for row in by_kind_dtype.values():
        for dtype, b in row.items():
            by_dtype[dtype] = by_dtype.get(dtype, 0) + b
    modules = precision_by_module(graph, alignment_bytes, fp32_reference)
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
        "precision": str(graph.origin.get("precision", "fp32")),
        "bytes_by_kind": dict(r.bytes_by_kind),
        "bytes_by_dtype": by_dtype,
        "bytes_by_kind_and_dtype": by_kind_dtype,
        "precision_by_module": [
            {"module": m.module, "activation_bytes": m.activation_bytes,
             "weight_copy_bytes": m.weight_copy_bytes,
             "fp32_island_bytes": m.fp32_island_bytes, "reduced_bytes": m.reduced_bytes,
             "fp32_reference_bytes": m.fp32_reference_bytes} for m in modules],
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
        "setting": graph.origin.get("setting"),
        "setting_text": setting_text(graph),
        # what an order (no recomputation) can save at most: down to the lower bound
        "max_order_saving_vs_eager_allocated_bytes": r.peak_allocated_bytes
        - r.lower_bound_bytes,
        "max_order_saving_vs_eager_reserved_bytes": r.peak_reserved_bytes
        - r.lower_bound_bytes,
        "step_seconds": step_seconds(graph, resolve_profile(DEFAULT_PROFILE)),
        "device_profile": DEFAULT_PROFILE,
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
        f"precision      {d['precision']}",
        f"bytes by kind (rounded to {d['alignment_bytes']} B):",
        *_table(d["bytes_by_kind"]),
        "bytes by dtype:",
        *_table(d["bytes_by_dtype"]),
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
        f"setting        {d['setting_text']}",
        "an order saves at most (down to the lower bound, no recomputation): "
        f"{fb(d['max_order_saving_vs_eager_allocated_bytes'])} vs eager allocated, "
        f"{fb(d['max_order_saving_vs_eager_reserved_bytes'])} vs eager reserved",
        f"step time      {1e3 * d['step_seconds']:.3f} ms estimated on {d['device_profile']} "
        "(cost model: roofline of FLOPs and bytes, ops one after another)",
    ]
    bm = d["bytes_at_peak_by_module"]
    top = sorted(bm["top_level"].items(), key=lambda kv: -kv[1])
    lines += _precision_lines(d["precision_by_module"])
    lines.append(f"at the eager peak (step {bm['step']}), by top-level module:")
    lines += _table({(k or "(top level)"): v for k, v in top[:_TOP_MODULES]})
    if len(top) > _TOP_MODULES:
        rest = sum(v for _, v in top[_TOP_MODULES:])
        lines.append(f"  ... {len(top) - _TOP_MODULES} more, {fb(rest)}")
    return "\n".join(lines)


def _precision_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Activations by module group: weight copies, fp32 islands, and the fp32 graph's."""
    if not any(r["weight_copy_bytes"] or r["fp32_island_bytes"] or r["reduced_bytes"]
               or r["fp32_reference_bytes"] is not None for r in rows):
        return []
    ref = any(r["fp32_reference_bytes"] is not None for r in rows)
    fb = format_bytes
    width = max(len(r["module"] or "(top level)") for r in rows[:_TOP_MODULES])
    head = (f"  {'module':<{width}}  {'saved':>10}  {'weight copies':>13}  "
            f"{'fp32 islands':>12}  {'bf16/fp16':>10}" + (f"  {'fp32 step':>10}  {'diff':>10}"
                                                          if ref else ""))
    out = ["activations saved for the backward, by module (blocks summed):", head]
    for r in rows[:_TOP_MODULES]:
        line = (f"  {r['module'] or '(top level)':<{width}}  {fb(r['activation_bytes']):>10}  "
                f"{fb(r['weight_copy_bytes']):>13}  {fb(r['fp32_island_bytes']):>12}  "
                f"{fb(r['reduced_bytes']):>10}")
        if ref:
            rb = r["fp32_reference_bytes"] or 0
            diff = r["activation_bytes"] - rb
            signed = ("+" if diff >= 0 else "-") + fb(abs(diff))
            line += f"  {fb(rb):>10}  {signed:>10}"
        out.append(line)
    if len(rows) > _TOP_MODULES:
        out.append(f"  ... {len(rows) - _TOP_MODULES} more groups (--json lists all)")
    return out


def fp32_reference(graph: Graph) -> Graph:
    """The graph's zoo or Hugging Face step traced again in fp32 (from its origin)."""
    from roam_core.model.parallel import parallel_of
    from roam_core.runtime.origin import zoo_recipe
    from roam_core.trace.tracer import trace_fx

    origin = {**graph.origin, "precision": "fp32"}
    par = parallel_of(graph)
    if par.active:  # the step of one rank, traced again for the same rank in fp32
        from roam_core.zoo.steps import trace_zoo

        return trace_zoo(origin["model"], int(origin["batch_size"]), origin.get("seq_len"),
                         origin.get("setting", "steady"), origin.get("optimizer"),
                         attention=origin.get("attention"), parallel=par).graph
    model, inputs, loss_fn, factory, setting, _, _ = zoo_recipe(origin)
    return trace_fx(model, inputs, loss_fn, factory, setting=setting, origin=origin).graph
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
    ref = None
    if args.vs_fp32:
        progress("tracing the fp32 step")
        ref = fp32_reference(graph)
    d = info_dict(graph, args.alignment_bytes, progress, ref)
    progress("finished")
    if args.json:
        print(json.dumps(d, separators=(",", ":")))
    else:
        print(_human(d))
    return 0
