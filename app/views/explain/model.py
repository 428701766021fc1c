"""Why an op runs where it does, why a storage sits where it does, what a module holds at the
peak, and why an op is recomputed: the Explain panel's sections, in words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.analysis.modules import module_label, module_members, tensor_module_label
from app.core.formatting import fmt_bytes, kind_label
from roam_core.formats.device_profile_io import resolve_profile
from roam_core.model.cost_model import op_seconds, step_seconds
from roam_core.model.device_profiles import DEFAULT_PROFILE
from roam_core.model.graph import EdgeReason, Graph, OpId, TensorId, TensorKind, round_size
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import RecomputeOp, expand_graph, op_flops
from roam_core.oracle.attribution import PeakAttribution, in_module
from roam_core.oracle.simulate import lifetimes

__all__ = ["Section", "explain_module", "explain_op", "explain_recompute", "explain_tensor",
           "lifetime_change"]


@dataclass(frozen=True, slots=True)
class Section:
    """One titled block of the Explain panel."""

    title: str
    lines: tuple[str, ...]


def _pred_reasons(graph: Graph, plan: Plan, op_id: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    op = graph.op(op_id)
    for v in op.inputs:
        p = graph.value_producer(v)
        if p is not None and p != op_id:
            out.setdefault(p, []).append(f"data: reads {v}")
    for e in (*graph.control_edges, *plan.extra_edges):
        if e.dst == op_id:
            why = {EdgeReason.MUTATION: "mutation: in-place write ordered against a read",
                   EdgeReason.RNG: "RNG order: random ops keep their relative order",
                   EdgeReason.WEIGHT_UPDATE: "weight-update rule (planner rewrite)",
                   EdgeReason.DATA: "data"}[e.reason]
            out.setdefault(e.src, []).append(why)
    return out


def explain_op(graph: Graph, plan: Plan, before_order: Sequence[OpId], op_id: str,
               limit: int = 8) -> list[Section]:
    """Why op ``op_id`` runs where it does in ``plan`` (``graph``: the graph the plan's
    order runs, with its re-runs when it has any)."""
    op = graph.op(op_id)
    pos: dict[str, int] = {o: i for i, o in enumerate(plan.order)}
    bpos: dict[str, int] = {o: i for i, o in enumerate(before_order)}
    s = pos[op_id]
    a = plan.alignment_bytes
    before = (f"step {bpos[op_id]} before planning, {s} after" if op_id in bpos else
              f"step {s}: a re-run the plan adds (not in the order before planning)")
    head = [f"target {op.target}, phase {op.phase.value}",
            f"module {module_label(op.module)}",
            f"source {op.source or '(not recorded)'}",
            before,
            f"sub-task: {plan.task_of_op.get(op.id, '(none: baseline plan)')}"]
    made = graph.storages_created(op_id)
    if made:
        head.append("allocates " + ", ".join(
            f"{t} ({fmt_bytes(round_size(graph.tensors[t].size_bytes, a))})" for t in made))
    reasons = _pred_reasons(graph, plan, op_id)
    preds = sorted(reasons, key=lambda p: -pos[p])
    pins = [f"{p} (step {pos[p]}): " + "; ".join(reasons[p]) for p in preds[:limit]]
    if not pins:
        pins = ["none: it may run first (no predecessor)"]
    prev = plan.order[s - 1] if s else None
    if prev is not None and prev not in reasons:
        pins.append(f"the op just before it ({prev}) is not a constraint: the planner chose "
                    "this position")
    return [Section(f"op {op_id}", tuple(head)),
            Section("pinned by (immediate predecessors, latest first)", tuple(pins))]


def explain_tensor(graph: Graph, plan: Plan, before_order: Sequence[OpId], tensor_id: str,
                   limit: int = 8, input_graph: Graph | None = None) -> list[Section]:
    """Why storage ``tensor_id`` (or the storage of an alias) sits where it does.

    ``graph`` is the graph the plan's order runs (with its re-runs, if any); ``input_graph``
    the one ``before_order`` orders (default: ``graph``).
    """
    input_graph = input_graph or graph
    tensor_id = graph.storage_of(tensor_id)
    t = graph.tensors[tensor_id]
    a = plan.alignment_bytes
    size = round_size(t.size_bytes, a)
    off = plan.offsets.get(tensor_id)
    lines = [*([f"name {t.name}"] if t.name else []),
             f"{kind_label(t.kind)}, {t.dtype} {list(t.shape)}, {fmt_bytes(size)}, "
             f"module {tensor_module_label(graph, t)}",
             f"offset {fmt_bytes(off)} .. {fmt_bytes((off or 0) + size)}",
             f"producer: {t.producer or '(resident: lives the whole step)'}",
             "consumers: " + (", ".join(t.consumers[:limit]) or "(none)")
             + (" …" if len(t.consumers) > limit else "")]
    out = [Section(f"tensor {tensor_id}", tuple(lines))]
    if t.producer is None:
        return out
    after = lifetimes(graph, plan.order)
    before = lifetimes(input_graph, before_order)
    la, lb = after[tensor_id], before.get(tensor_id)
    was = (f"before planning: steps [{lb.start}, {lb.end}) ({lb.end - lb.start} steps)"
           if lb is not None else
           "before planning: did not exist (a copy made by a re-run the plan adds)")
    out.append(Section("lifetime", (
        was, f"after planning: steps [{la.start}, {la.end}) ({la.end - la.start} steps)",
        *([lifetime_change(size, lb.end - lb.start, la.end - la.start)]
          if lb is not None else []),
        f"sub-task of its producer: {plan.task_of_op.get(t.producer, '(none)')}")))
    peak = int(np.argmax(plan.live_bytes)) if plan.live_bytes else 0
    if la.start <= peak < la.end:
        co = sorted((x for x, lt in after.items() if lt.start <= peak < lt.end and x != tensor_id),
                    key=lambda x: -graph.tensors[x].size_bytes)
        out.append(Section(f"live with it at the planned peak (step {peak})", tuple(
            _tensor_line(graph, x) for x in co[:limit])))
    else:
        out.append(Section("at the planned peak", (f"not live at the peak (step {peak})",)))
    out.extend(explain_op(graph, plan, before_order, t.producer, limit)[1:])
    return out


def lifetime_change(size_bytes: int, steps_before: int, steps_after: int) -> str:
    """A lifetime change in steps and in bytes × steps (the memory it holds over time).

    >>> lifetime_change(2**20, 6, 2)
    'change: 4 steps shorter; bytes × steps 6.00 MiB·steps → 2.00 MiB·steps (-4.00 MiB·steps)'
    >>> lifetime_change(512, 3, 3)
    'change: none (3 steps either way; 1.50 KiB·steps)'
    """
    d = steps_after - steps_before
    b0, b1 = size_bytes * steps_before, size_bytes * steps_after
    if d == 0:
        return f"change: none ({steps_after} steps either way; {fmt_bytes(b0)}·steps)"
    word = "shorter" if d < 0 else "longer"
    sign = "-" if d < 0 else "+"
    return (f"change: {abs(d)} steps {word}; bytes × steps {fmt_bytes(b0)}·steps → "
            f"{fmt_bytes(b1)}·steps ({sign}{fmt_bytes(abs(b1 - b0))}·steps)")


def explain_module(graph: Graph, path: str, after: PeakAttribution,
                   before: PeakAttribution | None, after_label: str = "planned",
                   before_label: str = "before", limit: int = 8) -> list[Section]:
    """What module ``path`` holds at the peak (before and after) and its largest storages."""
    ops, tensors = module_members(graph, path)
    by_phase: dict[str, int] = {}
    for op in graph.ops:
        if op.id in ops:
            by_phase[op.phase.value] = by_phase.get(op.phase.value, 0) + 1
    params = sum(graph.tensors[t].size_bytes for t in tensors
                 if graph.tensors[t].kind is TensorKind.PARAMETER)
    head = [f"{len(ops)} ops (" + ", ".join(f"{k} {v}" for k, v in by_phase.items()) + ")",
            f"{len(tensors)} storages, parameters {fmt_bytes(params)}"]
    out = [Section(f"module {module_label(path)}", tuple(head))]
    for label, attr in ((after_label, after), (before_label, before)):
        if attr is None:
            continue
        mine = [m for m in attr.modules if in_module(m.module, path)]
        total = sum(m.total_bytes for m in mine)
        kinds: dict[str, int] = {}
        for m in mine:
            for k, b in m.bytes_by_kind.items():
                kinds[k] = kinds.get(k, 0) + b
        lines = [f"{fmt_bytes(total)} of {fmt_bytes(attr.total_bytes)} "
                 f"({100 * total / (attr.total_bytes or 1):.1f} %)"]
        lines += [f"{k}: {fmt_bytes(b)}" for k, b in sorted(kinds.items(), key=lambda kv: -kv[1])]
        big = sorted((t for m in mine for t in m.tensors),
                     key=lambda t: -graph.tensors[t].size_bytes)[:limit]
        lines += [_tensor_line(graph, t) for t in big]
        out.append(Section(f"live at the {label} peak (step {attr.step})", tuple(lines)))
    return out


def _tensor_line(graph: Graph, tid: TensorId) -> str:
    """``"h.0.c_fc.weight (params__11, parameter, 64.00 KiB)"`` (the id alone if unnamed)."""
    t = graph.tensors[tid]
    head = f"{t.name} ({tid}, " if t.name else f"{tid} ("
    return f"{head}{kind_label(t.kind)}, {fmt_bytes(t.size_bytes)})"


def explain_recompute(graph: Graph, plan: Plan, kind: str, ident: str) -> list[Section]:
    """Why an op or storage is recomputed, what it costs (estimated time on the plan's device
    profile, then FLOPs) and what it frees.

    Empty for a plan without recomputation or an op/tensor it does not touch.
    """
    if not plan.recompute:
        return []
    g2 = expand_graph(graph, plan.recompute, order=plan.order)
    by_id: dict[str, RecomputeOp] = {r.id: r for r in plan.recompute}
    by_source: dict[str, RecomputeOp] = {r.source: r for r in plan.recompute}
    copy_of = {v: (r, i) for r in plan.recompute for i, v in enumerate(r.outputs)}
    rop = None
    if kind == "op":
        rop = by_id.get(ident) or by_source.get(ident)
    elif ident in copy_of:
        rop = copy_of[ident][0]
    elif ident in graph.tensors:
        p = graph.tensors[TensorId(ident)].producer
        if p is not None and p in by_source:
            rop = by_source[p]
    if rop is None:
        return []
    src = graph.op(rop.source)
    flops = op_flops(graph, src)
    sf = max(plan.step_flops, 1)
    prof = resolve_profile(plan.device_profile or DEFAULT_PROFILE)
    secs = op_seconds(graph, src, prof)
    ss = plan.step_seconds or step_seconds(graph, prof)
    total = plan.extra_seconds or sum(op_seconds(graph, graph.op(r.source), prof)
                                      for r in plan.recompute)
    made = [v for v in src.outputs if v in graph.tensors and graph.storage_of(v) == v]
    # every reader of the re-run's copies in the plan: backward ops and other re-runs
    outs = set(rop.outputs)
    pos = {o: i for i, o in enumerate(plan.order)}
    readers = sorted({o.id for o in g2.ops if outs.intersection(o.inputs)} | set(rop.readers)
                     | {c for v in map(TensorId, outs) if v in g2.tensors
                        for c in g2.tensors[v].consumers},
                     key=lambda o: pos.get(o, len(pos)))
    lines = [f"{rop.id} re-runs {src.id} ({src.target}"
             + (f", module {src.module}" if src.module else "") + ") in the backward",
             f"why: the plan's budget drops its output{'s' if len(made) > 1 else ''} after the "
             "last forward use, instead of keeping "
             f"{'them' if len(made) > 1 else 'it'} live until the backward reads "
             f"{'them' if len(made) > 1 else 'it'}",
             f"cost: +{1e6 * secs:,.2f} us ({100 * secs / max(ss, 1e-12):.3f}% of the step, "
             f"estimated on {prof.name}); the whole plan adds +{1e3 * total:,.3f} ms "
             f"({100 * total / max(ss, 1e-12):.2f}%) for {len(plan.recompute)} re-runs",
             f"FLOPs: {flops / 1e6:,.2f} MFLOP ({100 * flops / sf:.3f}% of the step); the "
             f"plan adds {plan.extra_flops / 1e6:,.2f} MFLOP "
             f"({100 * plan.extra_flops / sf:.2f}%)",
             "read by: " + (", ".join(readers[:6]) or "(none)")
             + (f" … ({len(readers)} in all)" if len(readers) > 6 else "")]
    for v in made:
        steps, size, bs = _steps_freed(g2, plan, graph, v)
        lines.append(f"frees {v}: {fmt_bytes(size)} for {steps} steps "
                     f"({bs / 2**20:,.2f} MiB × steps) between its last forward use and the re-run")
    return [Section("recomputed", tuple(lines))]


def _steps_freed(g2: Graph, plan: Plan, graph: Graph, tid: str) -> tuple[int, int, int]:
    """(steps the original is not live, bytes, bytes x steps) gained by dropping ``tid``:
    the planned lifetime of the original against the span to its last late reader."""
    lt = lifetimes(g2, plan.order)
    pos = {o: i for i, o in enumerate(plan.order)}
    tid = TensorId(tid)  # an output storage: its value id is its storage id
    t = graph.tensors[tid]
    readers = [pos[c] for c in t.consumers if c in pos]
    kept_end = max(readers, default=lt[tid].end - 1) + 1
    steps = max(kept_end - lt[tid].end, 0)
    size = t.size_bytes
    return steps, size, steps * size
