"""View models: the numbers every view shows, computed from roam_core objects (no plotting).

Arrays are NumPy so that the views stay fast for GPT-2-XL-sized plans (tens of thousands of
storages).  Everything here is pure and unit-tested without Dash.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from roam_core.base.units import format_bytes
from roam_core.model.graph import EdgeReason, Graph, OpId, TensorKind, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.attribution import (
    PeakAttribution,
    in_module,
    module_ancestors,
    tensor_module,
)
from roam_core.oracle.simulate import Lifetime, lifetimes, simulate

__all__ = [
    "KINDS",
    "MODULE_KINDS",
    "TOP_LEVEL",
    "TREE_PAGE",
    "LayoutView",
    "Section",
    "expand_node",
    "explain_module",
    "explain_op",
    "explain_tensor",
    "fmt_bytes",
    "iter_tree",
    "layout_from_blocks",
    "layout_from_plan",
    "live_rows",
    "module_depth",
    "module_label",
    "module_members",
    "module_path",
    "module_rows",
    "natural_key",
    "node_range",
    "search",
    "shown_children",
    "step_bytes",
    "summary_rows",
    "tensor_hover_label",
    "total_curve",
]

_logger = logging.getLogger(__name__)

#: Kind codes used in the layout arrays (index into this tuple).
KINDS: tuple[TensorKind, ...] = tuple(TensorKind)
_KIND_CODE = {k: i for i, k in enumerate(KINDS)}


#: Binary units for people (``fmt_bytes(1536) == '1.50 KiB'``; ``'n/a'`` for ``None``).
fmt_bytes = format_bytes


@dataclass(frozen=True)
class LayoutView:
    """Rectangles of one layout: storage ``ids[i]`` occupies ``[offset, offset+size)`` bytes
    during steps ``[start, end)``; ``kind`` holds codes into :data:`KINDS`."""

    ids: np.ndarray  # object array of str
    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    kind: np.ndarray
    n_steps: int
    height_bytes: int
    label: str = "layout"
    #: hover text per rectangle: the storage's name and module (object array of str)
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def visible(self, x0: float, x1: float) -> np.ndarray:
        """Boolean mask of rectangles that intersect steps ``[x0, x1)``."""
        return (self.start < x1) & (self.end > x0)


def _arrays(rows: list[tuple[str, int, int, int, int, int]], n: int, height: int,
            label: str, graph: Graph | None = None) -> LayoutView:
    if rows:
        ids, s, e, o, z, k = zip(*rows)
    else:
        ids, s, e, o, z, k = (), (), (), (), (), ()
    i64 = np.int64
    labels = None
    if graph is not None:
        mods = any(op.module for op in graph.ops)  # graphs traced before modules: no line
        labels = np.array([tensor_hover_label(graph, graph.tensors[i], mods) for i in ids],
                          dtype=object)
    return LayoutView(np.array(ids, dtype=object), np.array(s, i64), np.array(e, i64),
                      np.array(o, i64), np.array(z, i64), np.array(k, np.int8), n, height,
                      label, labels)


def tensor_hover_label(graph: Graph, t: Any, with_module: bool = True) -> str:
    """``"<br>h.0.attn.c_attn.weight<br>module h.0.attn.c_attn"`` (hover lines after the id).

    >>> from roam_core.model.samples import tiny_train_step
    >>> tensor_hover_label(tiny_train_step(), tiny_train_step().tensors["mm"])
    '<br>module (top level)'
    """
    return ((f"<br>{t.name}" if t.name else "")
            + (f"<br>module {_module_label(graph, t)}" if with_module else ""))


def layout_from_plan(graph: Graph, plan: Plan, *, label: str = "planned layout") -> LayoutView:
    """Every storage of ``plan`` (resident ones span the whole step)."""
    n = len(plan.order)
    lts = lifetimes(graph, plan.order)
    a = plan.alignment_bytes
    rows = []
    for tid, t in graph.tensors.items():
        lt = lts.get(tid, Lifetime(0, max(n, 1)))
        rows.append((tid, lt.start, lt.end, int(plan.offsets.get(tid, 0)),
                     round_size(t.size_bytes, a), _KIND_CODE[t.kind]))
    return _arrays(rows, n, int(plan.arena_bytes), label, graph)


def layout_from_blocks(graph: Graph, blocks: Sequence[Any], n_steps: int, *,
                       label: str = "baseline layout") -> LayoutView:
    """Blocks with ``tensor_id, address, size_bytes, start_step, end_step`` attributes."""
    rows = [(b.tensor_id, b.start_step, b.end_step, b.address, b.size_bytes,
             _KIND_CODE[graph.tensors[b.tensor_id].kind]) for b in blocks
            if b.tensor_id in graph.tensors]
    height = max((r[3] + r[4] for r in rows), default=0)
    return _arrays(rows, n_steps, height, label, graph)


def total_curve(graph: Graph, order: Sequence[OpId], alignment_bytes: int = 512) -> np.ndarray:
    """Bytes live while each step runs, resident bytes included."""
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    return np.asarray(prof.live_bytes, dtype=np.int64) + prof.resident_bytes


def step_bytes(graph: Graph, order: Sequence[OpId], alignment_bytes: int = 512
               ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes allocated at and freed after each step of ``order``."""
    n = len(order)
    alloc = np.zeros(n + 1, np.int64)
    freed = np.zeros(n + 1, np.int64)
    for tid, lt in lifetimes(graph, order).items():
        size = round_size(graph.tensors[tid].size_bytes, alignment_bytes)
        alloc[lt.start] += size
        freed[lt.end - 1] += size if lt.end < n else 0
    return alloc[:n], freed[:n]


def live_rows(graph: Graph, view: LayoutView, step: int, limit: int = 200
              ) -> list[dict[str, Any]]:
    """Storages live at ``step`` (largest first) as table rows."""
    m = np.nonzero((view.start <= step) & (view.end > step))[0]
    m = m[np.argsort(-view.size[m], kind="stable")][:limit]
    rows = []
    for i in m:
        t = graph.tensors[view.ids[i]]
        rows.append({"id": t.id, "name": t.name or "", "module": _module_label(graph, t),
                     "kind": t.kind.value, "size": fmt_bytes(int(view.size[i])),
                     "size_bytes": int(view.size[i]), "offset": int(view.offset[i]),
                     "lifetime": f"[{view.start[i]}, {view.end[i]})",
                     "producer": t.producer or "(resident)"})
    return rows


def search(graph: Graph, query: str, limit: int = 30) -> list[tuple[str, str, str]]:
    """Modules, ops and storages matching ``query`` (regex, case-insensitive; a plain
    substring when it is not a valid regex).

    A module matches by its path; an op by its id, target or module path; a storage by its
    id or name (``h.0.attn.c_attn.weight``, ``...weight.exp_avg``).  Returns
    ``[(kind, id, label)]`` with ``kind`` in ``{"module", "op", "tensor"}``.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> [h[:2] for h in search(tiny_train_step(), "relu_bw")]
    [('op', 'relu_bw'), ('tensor', 'relu_bw')]
    """
    q = query.strip()
    if not q:
        return []
    try:
        pat = re.compile(q, re.IGNORECASE)
        match = pat.search
    except re.error:
        low = q.lower()
        match = lambda s: low in s.lower()  # noqa: E731
    hits: list[tuple[str, str, str]] = []
    n_ops: dict[str, int] = {}
    for op in graph.ops:
        for m in module_ancestors(op.module):
            n_ops[m] = n_ops.get(m, 0) + 1
    for m, n in n_ops.items():
        if match(m):
            hits.append(("module", m, f"module {m} ({n} ops)"))
            if len(hits) >= limit:
                return hits
    for op in graph.ops:
        if match(op.id) or match(op.target) or (op.module and match(op.module)):
            where = f", in {op.module}" if op.module else ""
            hits.append(("op", op.id, f"op {op.id} ({op.target}{where})"))
            if len(hits) >= limit:
                return hits
    for t in graph.tensors.values():
        if match(t.id) or (t.name and match(t.name)):
            ident = f"{t.name} ({t.id}, " if t.name else f"{t.id} ("
            hits.append(("tensor", t.id, f"tensor {ident}{t.kind.value}, "
                                          f"{fmt_bytes(t.size_bytes)})"))
            if len(hits) >= limit:
                break
    return hits


def _module_label(graph: Graph, t: Any) -> str:
    """A storage's module for people (``"(top level)"`` for ``""``)."""
    return tensor_module(graph, t) or "(top level)"


# ------------------------------------------------------------------ task tree
def iter_tree(node: Mapping[str, Any] | None, depth: int = 0
              ) -> Iterator[tuple[Mapping[str, Any], int]]:
    """Depth-first ``(node, depth)`` over a task-tree summary."""
    if not node:
        return
    yield node, depth
    for c in node.get("children") or ():
        yield from iter_tree(c, depth + 1)


def find_node(tree: Mapping[str, Any] | None, node_id: str) -> Mapping[str, Any] | None:
    """The task-tree node with id ``node_id``."""
    return next((n for n, _ in iter_tree(tree) if str(n.get("id")) == node_id), None)


#: Children the lazy tree view mounts per page ("+ N more sub-tasks" adds one page); the root
#: starts with one page open, every other node folded.
TREE_PAGE = 10


def shown_children(node: Mapping[str, Any], depth: int, shown: Mapping[str, int]) -> int:
    """How many children of ``node`` the lazy tree view mounts.

    ``shown`` maps node id -> children mounted (the user's expansions); a node absent from it
    shows one page at the root and none deeper.

    >>> node = {"id": "r", "children": [{"id": "a"}, {"id": "b"}]}
    >>> shown_children(node, 0, {}), shown_children(node, 1, {}), shown_children(node, 1, {"r": 9})
    (2, 0, 2)
    """
    n_kids = len(node.get("children") or ())
    return min(n_kids, int(shown.get(str(node.get("id")), TREE_PAGE if depth == 0 else 0)))


def expand_node(tree: Mapping[str, Any] | None, shown: Mapping[str, int], node_id: str,
                page: int = TREE_PAGE) -> dict[str, int]:
    """``shown`` with one more page of ``node_id``'s children mounted (unchanged if absent).

    >>> tree = {"id": "r", "children": [{"id": "a", "children": [{"id": "b"}]}]}
    >>> expand_node(tree, {}, "a")
    {'a': 1}
    """
    for node, depth in iter_tree(tree):
        if str(node.get("id")) == node_id:
            n_kids = len(node.get("children") or ())
            return {**shown, node_id: min(n_kids, shown_children(node, depth, shown) + page)}
    return dict(shown)


def node_range(node: Mapping[str, Any]) -> tuple[int, int] | None:
    """The step range ``[min start, max end)`` covered by a task-tree node."""
    steps = [s for s in node.get("steps") or () if len(s) == 2]
    if not steps:
        return None
    return int(min(s[0] for s in steps)), int(max(s[1] for s in steps))


# ------------------------------------------------------------------ explain
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
    """Why op ``op_id`` runs where it does in ``plan``."""
    op = graph.op(op_id)
    pos = {o: i for i, o in enumerate(plan.order)}
    bpos = {o: i for i, o in enumerate(before_order)}
    s = pos[op_id]
    a = plan.alignment_bytes
    head = [f"target {op.target}, phase {op.phase.value}",
            f"module {op.module or '(top level)'}",
            f"step {bpos.get(op_id)} before planning, {s} after",
            f"sub-task: {plan.task_of_op.get(op_id, '(none: baseline plan)')}"]
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
                   limit: int = 8) -> list[Section]:
    """Why storage ``tensor_id`` (or the storage of an alias) sits where it does."""
    tensor_id = graph.storage_of(tensor_id)
    t = graph.tensors[tensor_id]
    a = plan.alignment_bytes
    size = round_size(t.size_bytes, a)
    off = plan.offsets.get(tensor_id)
    lines = [*([f"name {t.name}"] if t.name else []),
             f"{t.kind.value}, {t.dtype} {list(t.shape)}, {fmt_bytes(size)}, "
             f"module {_module_label(graph, t)}",
             f"offset {off} ({fmt_bytes(off)}) .. {fmt_bytes((off or 0) + size)}",
             f"producer: {t.producer or '(resident: lives the whole step)'}",
             "consumers: " + (", ".join(t.consumers[:limit]) or "(none)")
             + (" …" if len(t.consumers) > limit else "")]
    out = [Section(f"tensor {tensor_id}", tuple(lines))]
    if t.producer is None:
        return out
    after = lifetimes(graph, plan.order)
    before = lifetimes(graph, before_order)
    la, lb = after[tensor_id], before[tensor_id]
    out.append(Section("lifetime", (
        f"before planning: steps [{lb.start}, {lb.end}) ({lb.end - lb.start} steps)",
        f"after planning: steps [{la.start}, {la.end}) ({la.end - la.start} steps)",
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


# ------------------------------------------------------------------ summary
def summary_rows(plan: Plan, before_peak_bytes: int, before_label: str,
                 reserved_bytes: int | None) -> list[tuple[str, str]]:
    """(label, value) rows of the summary card."""
    saved = before_peak_bytes - plan.planned_peak_bytes
    pct = 100.0 * saved / before_peak_bytes if before_peak_bytes else 0.0
    rows = [
        (f"{before_label} peak (allocated)", fmt_bytes(before_peak_bytes)),
        (f"{before_label} reserved (caching allocator)", fmt_bytes(reserved_bytes)),
        ("eager peak (allocated)", fmt_bytes(plan.baseline_peak_bytes)),
        (f"planned peak ({plan.method})", fmt_bytes(plan.planned_peak_bytes)),
        ("saving", f"{fmt_bytes(saved)} ({pct:.1f} %)"),
        ("arena", fmt_bytes(plan.arena_bytes)),
        ("fragmentation", f"{100 * plan.fragmentation:.2f} %"),
        ("lower bound", fmt_bytes(plan.lower_bound_bytes)),
        ("solve time", f"{plan.solve_seconds:.2f} s"),
    ]
    stages: dict[str, list[Any]] = {}
    for r in plan.provenance:
        stages.setdefault(r.stage, []).append(r)
    for stage, recs in stages.items():
        statuses: dict[str, int] = {}
        for r in recs:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        st = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
        rows.append((f"stage {stage}", f"{len(recs)} calls, "
                     f"{sum(r.wall_time_s for r in recs):.2f} s ({st})"))
    rows.extend(("note", n) for n in plan.notes)
    return rows


# ------------------------------------------------------------------ memory by module
#: Kind columns of the per-module table (the rest are summed into ``other``).
MODULE_KINDS: tuple[str, ...] = ("activation", "gradient", "parameter", "optimizer_state",
                                 "temporary")
TOP_LEVEL = "(top level)"


def natural_key(path: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key ordering ``h.2`` before ``h.10`` (numeric path parts as numbers).

    >>> sorted(["h.10", "h.2", "h.1.attn", "wte"], key=natural_key)
    ['h.1.attn', 'h.2', 'h.10', 'wte']
    """
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in path.split("."))


def module_label(path: str) -> str:
    """A module path for people: ``""`` is ``"(top level)"``."""
    return path or TOP_LEVEL


def module_path(label: str) -> str:
    """The inverse of :func:`module_label`."""
    return "" if label == TOP_LEVEL else label


def _grouped_kinds(attr: PeakAttribution, depth: int | None) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for m in attr.modules:
        key = m.module if depth is None else ".".join(m.module.split(".")[:depth])
        slot = out.setdefault(key, {})
        for k, b in m.bytes_by_kind.items():
            slot[k] = slot.get(k, 0) + b
    return out


def module_rows(after: PeakAttribution, before: PeakAttribution | None = None,
                depth: int | None = 1) -> list[dict[str, Any]]:
    """Rows of the per-module table: bytes live at the peak, per module, before and after.

    Parameters
    ----------
    after : PeakAttribution
        The shown order's peak by module (the plan; or the baseline when unplanned).
    before : PeakAttribution, optional
        The baseline order's peak by module.
    depth : int or None
        Group paths by their first ``depth`` components (``None``: every full path, each
        with its own bytes only).  Every grouping adds up to the peak.

    Returns
    -------
    list of dict
        ``id`` (the label), ``module``, ``depth``, ``after_mib``, ``before_mib``,
        ``change_mib``, ``share_pct`` and one ``<kind>_mib`` column per
        :data:`MODULE_KINDS` plus ``other_mib`` (the kinds of ``after``); largest first.
    """
    mib = float(2**20)
    ka = _grouped_kinds(after, depth)
    kb = _grouped_kinds(before, depth) if before is not None else {}
    total = after.total_bytes or 1
    rows = []
    for path in dict.fromkeys([*ka, *kb]):
        a = sum(ka.get(path, {}).values())
        b = sum(kb.get(path, {}).values()) if before is not None else None
        row: dict[str, Any] = {
            "id": module_label(path), "module": module_label(path),
            "depth": path.count(".") + 1 if path else 0,
            "after_mib": round(a / mib, 3),
            "before_mib": None if b is None else round(b / mib, 3),
            "change_mib": None if b is None else round((a - b) / mib, 3),
            "share_pct": round(100 * a / total, 1)}
        kinds = ka.get(path, {})
        for k in MODULE_KINDS:
            row[f"{k}_mib"] = round(kinds.get(k, 0) / mib, 3)
        row["other_mib"] = round(sum(v for k, v in kinds.items() if k not in MODULE_KINDS)
                                 / mib, 3)
        rows.append(row)
    rows.sort(key=lambda r: (-max(r["after_mib"], r["before_mib"] or 0),
                             natural_key(r["module"])))
    return rows


def module_depth(graph: Graph) -> int:
    """The deepest module path of ``graph`` (0 when it records no modules)."""
    return max((op.module.count(".") + 1 for op in graph.ops if op.module), default=0)


def module_members(graph: Graph, path: str) -> tuple[set[str], set[str]]:
    """``(op ids, storage ids)`` of module ``path`` and its submodules.

    ``""`` (the top level) means exactly the ops and storages outside every module.
    """
    ops = {op.id for op in graph.ops if in_module(op.module, path)}
    tensors = {tid for tid, t in graph.tensors.items() if in_module(tensor_module(graph, t), path)}
    return ops, tensors


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


def _tensor_line(graph: Graph, tid: str) -> str:
    """``"h.0.c_fc.weight (params__11, parameter, 64.00 KiB)"`` (the id alone if unnamed)."""
    t = graph.tensors[tid]
    head = f"{t.name} ({tid}, " if t.name else f"{tid} ("
    return f"{head}{t.kind.value}, {fmt_bytes(t.size_bytes)})"
