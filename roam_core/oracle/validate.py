"""Independent checkers for orders and plans; they share no code with any solver.

Every checker returns a list of :class:`~roam_core.base.errors.Violation` (empty when valid) and
never raises on a bad plan.  The rules:

1. the order is a permutation of the graph's ops (``MISSING_OP``, ``DUPLICATE_OP``,
   ``UNKNOWN_OP``);
2. every data edge runs forward (``PRECEDENCE``), every mutation hazard keeps its side
   (``MUTATION_ORDER``), random ops keep their relative order (``RNG_ORDER``);
3. (layouts, see :func:`check_arena`) every planned tensor has an aligned offset inside the
   arena and no two co-live tensors share bytes;
4. (recomputation, see :func:`check_recompute`) every recompute op re-runs a re-runnable op
   on the same inputs it read (``RECOMPUTE_MISMATCH``; random ops only when the tracer
   vouches that their draw is replayed), its inputs exist when it runs
   (``RECOMPUTE_INPUT``), and no op reads a dropped value before it is recomputed
   (``READ_DROPPED``).  Orders and layouts of such plans are checked on the expanded graph
   (:func:`roam_core.model.recompute_ops.expand_graph`).
"""

from __future__ import annotations

import bisect
import heapq
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from roam_core.base.errors import GraphError, Violation, ViolationKind
from roam_core.model.graph import EdgeReason, Graph, OpId, TensorId, round_size
from roam_core.model.positions import order_indices, program_index
from roam_core.model.recompute_ops import expand_graph, recompute_blockers, running_stats_writes

if TYPE_CHECKING:  # data types only; the validator shares no code with any solver
    from roam_core.model.dsa import Problem, Solution

__all__ = ["check_arena", "check_dsa_solution", "check_order", "check_plan", "check_recompute"]

_EDGE_KIND = {
    EdgeReason.DATA: ViolationKind.PRECEDENCE,
    EdgeReason.MUTATION: ViolationKind.MUTATION_ORDER,
    EdgeReason.RNG: ViolationKind.RNG_ORDER,
    EdgeReason.WEIGHT_UPDATE: ViolationKind.PRECEDENCE,
}


@dataclass(frozen=True, slots=True)
class _EdgeIndex:
    """Every edge ``check_order`` checks, as program indices (cached per graph object)."""

    index: Mapping[OpId, int]
    src: np.ndarray
    dst: np.ndarray


_EDGE_INDEX: dict[int, tuple[weakref.ref[Graph], _EdgeIndex]] = {}


def _edge_index(graph: Graph) -> _EdgeIndex:
    hit = _EDGE_INDEX.get(id(graph))
    if hit is not None and hit[0]() is graph:
        return hit[1]
    ei = _extended_edge_index(graph)
    if ei is None:
        ei = _own_edge_index(graph)
    if len(_EDGE_INDEX) > 16:
        _EDGE_INDEX.clear()
    _EDGE_INDEX[id(graph)] = (weakref.ref(graph), ei)
    return ei


def _extended_edge_index(graph: Graph) -> _EdgeIndex | None:
    """The edge index of a copy with more control edges (``Graph.with_control_edges``) from
    its original's cached one, when the copy holds the original's very ops and control edges
    (checked here, object by object) followed by more: those are appended."""
    derived = graph.derived_from()
    if derived is None:
        return None
    base = derived[0]
    hit = _EDGE_INDEX.get(id(base))
    n_base = len(base.control_edges)
    if (hit is None or hit[0]() is not base or graph.ops is not base.ops
            or len(graph.control_edges) < n_base
            or any(a is not b for a, b in zip(graph.control_edges, base.control_edges))):
        return None
    old = hit[1]
    index = old.index
    extra = graph.control_edges[n_base:]
    src = np.fromiter((index[e.src] for e in extra), np.int64, len(extra))
    dst = np.fromiter((index[e.dst] for e in extra), np.int64, len(extra))
    return _EdgeIndex(index, np.concatenate([old.src, src]), np.concatenate([old.dst, dst]))


def _own_edge_index(graph: Graph) -> _EdgeIndex:
    index = program_index(graph)
    src: list[int] = []
    dst: list[int] = []
    for op in graph.ops:  # the same edges as the full check below, read the same way
        for v in op.inputs:
            p = graph.value_producer(v)
            if p is not None and p != op.id:
                src.append(index[p])
                dst.append(index[op.id])
    for e in graph.control_edges:
        src.append(index[e.src])
        dst.append(index[e.dst])
    return _EdgeIndex(index, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))


def _obviously_valid(graph: Graph, order: Sequence[OpId]) -> bool:
    """True only when ``order`` is a permutation of the ops and every edge runs forward (the
    rules of :func:`check_order`, vectorised); False sends the order to the full check, which
    names every violation."""
    ei = _edge_index(graph)
    n = len(ei.index)
    if len(order) != n:
        return False
    try:
        prog = order_indices(graph, order)  # ei.index's mapping (program indices)
    except Exception:  # an unknown (or unhashable) entry: the full check reports it
        return False
    step = np.full(n, -1, dtype=np.int64)
    step[prog] = np.arange(n)
    if n and step.min() < 0:  # some op twice, so another one missing
        return False
    return not bool(np.any(step[ei.src] > step[ei.dst]))


def check_order(graph: Graph, order: Sequence[OpId]) -> list[Violation]:
    """Check that ``order`` is a valid execution order of ``graph``.

    Parameters
    ----------
    graph : Graph
        The graph whose data edges and control edges must be honoured.
    order : sequence of OpId
        The candidate order.

    Returns
    -------
    list of Violation
        One record per broken rule; empty when the order is valid.

    Notes
    -----
    A vectorised pass over the same rules answers first; only an order it cannot clear goes
    through the op-by-op check that names every violation (``O(N + E)`` either way).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> check_order(diamond(), ["a", "c", "b", "d"])
    []
    >>> [v.kind.value for v in check_order(diamond(), ["b", "a", "c", "d"])]
    ['precedence']
    """
    if _obviously_valid(graph, order):
        return []
    out: list[Violation] = []
    pos: dict[str, int] = {}
    known = set(graph.op_ids)
    for i, op in enumerate(order):
        if op not in known:
            out.append(Violation(ViolationKind.UNKNOWN_OP, str(op),
                                 f"order step {i} names unknown op {op!r}"))
        elif op in pos:
            out.append(Violation(ViolationKind.DUPLICATE_OP, op,
                                 f"op {op!r} appears at steps {pos[op]} and {i}"))
        else:
            pos[op] = i
    for op in graph.op_ids:
        if op not in pos:
            out.append(Violation(ViolationKind.MISSING_OP, op, f"op {op!r} is not in the order"))
    # every edge must run forward; edges touching absent ops were reported above
    for op in graph.ops:
        for v in op.inputs:
            src = graph.value_producer(v)
            if src is None or src == op.id or src not in pos or op.id not in pos:
                continue
            if pos[src] > pos[op.id]:
                out.append(Violation(
                    ViolationKind.PRECEDENCE, op.id,
                    f"op {op.id!r} (step {pos[op.id]}) reads {v!r} before its producer "
                    f"{src!r} runs (step {pos[src]})"))
    for e in graph.control_edges:
        if e.src in pos and e.dst in pos and pos[e.src] > pos[e.dst]:
            out.append(Violation(
                _EDGE_KIND[e.reason], e.dst,
                f"{e.reason.value} edge {e.src!r} -> {e.dst!r} broken: step {pos[e.src]} "
                f"after step {pos[e.dst]}"))
    return out


# ------------------------------------------------------------------ layouts
#: One rectangle for the overlap sweep: (id, first step, end step (exclusive), offset, size).
_Rect = tuple[str, int, int, int, int]


def _overlapping_pairs(rects: Iterable[_Rect]) -> list[tuple[str, str]]:
    """Pairs of rectangles sharing a step and a byte, by a sweep over time.

    The active set is kept sorted by offset.  While it is disjoint (every valid layout), a new
    rectangle only needs its right neighbours below its top and its left neighbour; after the
    first overlap the left scan widens to every active rectangle that could reach it, so every
    pair is still reported.  ``O(n log n)`` for valid layouts.
    """
    items = sorted((r for r in rects if r[4] > 0), key=lambda r: (r[1], r[2]))
    active: list[tuple[int, int, str]] = []  # (offset, top, id), sorted
    ends: list[tuple[int, int, int, str]] = []  # heap of (end, offset, top, id)
    max_size = 0
    pairs: list[tuple[str, str]] = []
    for rid, start, end, off, size in items:
        while ends and ends[0][0] <= start:
            _, o, t, i = heapq.heappop(ends)
            del active[bisect.bisect_left(active, (o, t, i))]
        top = off + size
        k = bisect.bisect_left(active, (off, top, rid))
        j = k
        while j < len(active) and active[j][0] < top:  # start inside [off, top)
            pairs.append((active[j][2], rid))
            j += 1
        j = k - 1
        while j >= 0:  # start below off: overlaps when its top passes off
            o, t, i = active[j]
            if t > off:
                pairs.append((i, rid))
            elif not pairs or o < off - max_size:
                break
            j -= 1
        active.insert(k, (off, top, rid))
        heapq.heappush(ends, (end, off, top, rid))
        max_size = max(max_size, size)
    return pairs


def _positions(graph: Graph, order: Sequence[OpId]) -> dict[str, int]:
    pos: dict[str, int] = {}
    for i, op in enumerate(order):
        pos.setdefault(op, i)
    return pos


def _spans(graph: Graph, order: Sequence[OpId]) -> dict[TensorId, tuple[int, int]]:
    """Live steps ``[start, end)`` of every storage; resident ones span the whole step.

    Recomputed here from the graph's definition (not imported from the simulator) so that
    the checker stays independent.  A storage whose producer is missing from the order
    (already reported by :func:`check_order`) is treated as live throughout.
    """
    pos = _positions(graph, order)
    n = len(order)
    outputs = set(graph.outputs)
    out: dict[TensorId, tuple[int, int]] = {}
    for t in graph.tensors.values():
        if t.producer is None or t.producer not in pos:
            out[t.id] = (-1, n + 1)
            continue
        s = pos[t.producer]
        if t.id in outputs:
            e = n
        else:
            e = max((pos.get(c, n) + 1 for c in t.consumers), default=s + 1)
        out[t.id] = (s, max(e, s + 1))
    return out


def check_arena(graph: Graph, order: Sequence[OpId], offsets: Mapping[str, int],
                arena_bytes: int, alignment_bytes: int) -> list[Violation]:
    """Check an arena layout of ``graph`` executed in ``order``.

    Rules: every storage (resident ones included) has an offset (``MISSING_OFFSET``), no
    offset names an unknown storage (``UNKNOWN_TENSOR``), offsets are non-negative
    (``NEGATIVE_OFFSET``) multiples of ``alignment_bytes`` (``MISALIGNED``), every storage
    (size rounded up to the alignment) ends inside the arena (``OUT_OF_ARENA``), no two
    co-live storages share a byte (``OVERLAP``; resident storages are always live), and
    ``arena_bytes`` equals the layout's height (``WRONG_HEIGHT``).

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        The order defining the lifetimes (see :mod:`roam_core.oracle.simulate`).
    offsets : Mapping of TensorId to int
        Byte offset of every storage.
    arena_bytes : int
        Declared arena size.
    alignment_bytes : int
        Offset and size granularity.

    Returns
    -------
    list of Violation

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> g = chain3()
    >>> check_arena(g, g.op_ids, {"a": 0, "b": 512, "c": 0}, 1024, 512)
    []
    >>> [v.kind.value for v in check_arena(g, g.op_ids, {"a": 0, "b": 0, "c": 512}, 1024, 512)]
    ['overlap']
    """
    out: list[Violation] = []
    align = max(1, int(alignment_bytes))
    for tid in offsets:
        if tid not in graph.tensors:
            out.append(Violation(ViolationKind.UNKNOWN_TENSOR, str(tid),
                                 f"offset given for unknown storage {tid!r}"))
    spans = _spans(graph, order)
    rects: list[_Rect] = []
    height = 0
    for t in graph.tensors.values():
        if t.id not in offsets:
            out.append(Violation(ViolationKind.MISSING_OFFSET, t.id,
                                 f"storage {t.id!r} has no offset"))
            continue
        off = offsets[t.id]
        size = round_size(t.size_bytes, align)
        if not isinstance(off, int) or isinstance(off, bool) or off < 0:
            out.append(Violation(ViolationKind.NEGATIVE_OFFSET, t.id,
                                 f"storage {t.id!r} has offset {off!r} (must be an int >= 0)"))
            continue
        if off % align:
            out.append(Violation(ViolationKind.MISALIGNED, t.id,
                                 f"storage {t.id!r} offset {off} is not a multiple of {align}"))
        if off + size > arena_bytes:
            out.append(Violation(ViolationKind.OUT_OF_ARENA, t.id,
                                 f"storage {t.id!r} [{off}, {off + size}) ends beyond the "
                                 f"arena of {arena_bytes} bytes"))
        if size:
            height = max(height, off + size)
            s, e = spans[t.id]
            rects.append((t.id, s, e, off, size))
    for a, b in _overlapping_pairs(rects):
        out.append(Violation(ViolationKind.OVERLAP, a,
                             f"storages {a!r} and {b!r} are live together and share bytes"))
    if height != arena_bytes:
        out.append(Violation(ViolationKind.WRONG_HEIGHT, "arena",
                             f"declared arena {arena_bytes} bytes, layout height {height}"))
    return out


def check_plan(graph: Graph, plan: Any) -> list[Violation]:
    """Check a :class:`~roam_core.model.plan.Plan` against ``graph``: fingerprint, order, arena.

    ``plan`` is typed loosely so that this layer does not import the plan module.

    Returns
    -------
    list of Violation
        ``FINGERPRINT`` first when the plan was made for another graph (the order and layout
        are still checked when they can be).
    """
    out: list[Violation] = []
    fp = graph.fingerprint()
    if plan.graph_fingerprint != fp:
        out.append(Violation(ViolationKind.FINGERPRINT, "plan",
                             f"plan was made for graph {plan.graph_fingerprint[:12]}, "
                             f"this graph is {fp[:12]}"))
    rops = tuple(getattr(plan, "recompute", ()) or ())
    if not rops:
        out.extend(check_order(graph, plan.order))
        out.extend(check_arena(graph, plan.order, plan.offsets, plan.arena_bytes,
                               plan.alignment_bytes))
        return out
    own = check_recompute(graph, rops, plan.order)
    out.extend(own)
    try:
        g2 = expand_graph(graph, rops)
    except GraphError as e:
        if not own:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, "recompute", str(e)))
        return out
    # a reader before its recompute op, or a recompute op before its input's producer,
    # is reported once, by check_recompute, not again as a broken data edge
    flagged = {v.subject_id for v in own}
    out.extend(v for v in check_order(g2, plan.order)
               if not (v.kind in (ViolationKind.PRECEDENCE, ViolationKind.RNG_ORDER)
                       and v.subject_id in flagged))
    out.extend(check_arena(g2, plan.order, plan.offsets, plan.arena_bytes,
                           plan.alignment_bytes))
    return out


def check_recompute(graph: Graph, recompute: Sequence[Any],
                    order: Sequence[OpId]) -> list[Violation]:
    """Check the recompute ops of a plan against ``graph`` and the plan's ``order``.

    Rules:

    * ``RECOMPUTE_MISMATCH``: the copy may differ from the original -- the source op is
      unknown or may not be re-run (in-place, random, optimizer, ...), an input is neither
      the value the source read nor a recomputed copy of it, the output count differs, a
      listed reader reads none of the source's values, an input storage was written in
      place between the source and the re-run (the re-run would read another version), or
      the re-run of an in-place op writes the original storage instead of a copy;
    * ``RNG_ORDER``: the re-run of a random op runs before its source (the generator state
      it replays is recorded when the source's stream reaches it);
    * ``RECOMPUTE_INPUT``: an input is not available at the recompute op's step (its
      producer, or the recompute op making the copy, runs later or not at all);
    * ``READ_DROPPED``: a reader of the copy runs before the recompute op (it would read the
      dropped value between its drop and its recomputation).

    Parameters
    ----------
    graph : Graph
        The graph the plan was made for (without the recompute ops).
    recompute : sequence of RecomputeOp
        The plan's recompute ops.
    order : sequence of OpId
        The plan's order (graph ops and recompute ops).

    Returns
    -------
    list of Violation
    """
    out: list[Violation] = []
    pos = _positions(graph, order)
    copy_of: dict[str, str] = {}  # copy value -> original value
    made_by: dict[str, str] = {}  # copy value -> recompute op id
    for r in recompute:
        try:
            src = graph.op(r.source)
        except GraphError:
            continue
        for v, v0 in zip(r.outputs, src.outputs):
            copy_of[v] = v0
            made_by[v] = r.id
    writers: dict[TensorId, list[OpId]] = {}
    for op in graph.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op.id)
    blockers: dict[OpId, str | None] | None = None
    for r in recompute:
        try:
            src = graph.op(r.source)
        except GraphError:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} copies unknown op {r.source!r}"))
            continue
        if blockers is None:
            blockers = recompute_blockers(graph)
        why = blockers[src.id]
        if why is not None:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} re-runs {src.id!r}, which may not be "
                                 f"re-run ({why})"))
        if len(r.inputs) != len(src.inputs) or len(r.outputs) != len(src.outputs):
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} has {len(r.inputs)} inputs and "
                                 f"{len(r.outputs)} outputs; {src.id!r} has "
                                 f"{len(src.inputs)} and {len(src.outputs)}"))
            continue
        here = pos.get(r.id)
        if here is None:
            out.append(Violation(ViolationKind.RECOMPUTE_INPUT, r.id,
                                 f"recompute op {r.id!r} is not in the order"))
        stats = running_stats_writes(graph, src)  # batch norm: the re-run skips them
        for u, u0 in zip(r.inputs, src.inputs):
            if u == u0 and graph.storage_of(u0) in stats:
                continue
            if u != u0 and copy_of.get(u) != u0:
                out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                     f"recompute op {r.id!r} reads {u!r} where {src.id!r} "
                                     f"read {u0!r}"))
                continue
            if here is None:
                continue
            maker = made_by[u] if u != u0 else graph.value_producer(u0)
            if maker is not None and pos.get(maker, len(order)) >= here:
                out.append(Violation(ViolationKind.RECOMPUTE_INPUT, r.id,
                                     f"recompute op {r.id!r} (step {here}) reads {u!r}, which "
                                     f"{maker!r} only makes at step {pos.get(maker, 'never')}"))
            if u == u0 and src.id in pos:
                s = graph.storage_of(u0)
                a = {w for w in writers.get(s, ()) if pos.get(w, len(order)) < pos[src.id]}
                b = {w for w in writers.get(s, ()) if pos.get(w, len(order)) < here}
                if a != b:
                    w = sorted(a ^ b)[0]
                    out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                         f"recompute op {r.id!r} reads {s!r} after {w!r} wrote "
                                         f"it in place, {src.id!r} read it before"))
        for u, u0 in zip(r.inputs, src.inputs):
            if u == u0 and graph.storage_of(u0) in src.mutates \
                    and graph.storage_of(u0) not in stats:
                out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                     f"recompute op {r.id!r} writes {graph.storage_of(u0)!r} "
                                     f"in place, as {src.id!r} did: a re-run may only write "
                                     "the copies it reads"))
        if src.random and here is not None and pos.get(src.id, len(order)) > here:
            out.append(Violation(ViolationKind.RNG_ORDER, r.id,
                                 f"recompute op {r.id!r} replays the random draw of "
                                 f"{src.id!r} before {src.id!r} runs: the generator state it "
                                 "replays is not recorded yet"))
        outs0 = set(src.outputs)
        for reader in r.readers:
            if reader not in graph.op_ids:
                out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                     f"recompute op {r.id!r} lists unknown reader {reader!r}"))
                continue
            if not outs0 & set(graph.op(reader).inputs):
                out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                     f"recompute op {r.id!r} lists reader {reader!r}, which "
                                     f"reads none of the values of {src.id!r}"))
                continue
            if here is not None and reader in pos and pos[reader] < here:
                out.append(Violation(ViolationKind.READ_DROPPED, reader,
                                     f"op {reader!r} (step {pos[reader]}) reads the value of "
                                     f"{src.id!r} after it was dropped, before recompute op "
                                     f"{r.id!r} rebuilds it (step {here})"))
    return out


def check_dsa_solution(problem: Problem, solution: Solution) -> list[Violation]:
    """Check a DSA solution (minimalloc's validator rules, every violation reported).

    Rules: one offset per buffer (``MISSING_OFFSET``), offsets ``>= 0`` (``NEGATIVE_OFFSET``),
    multiples of each buffer's alignment (``MISALIGNED``), fixed offsets kept
    (``FIXED_OFFSET``), within the capacity if any (``OUT_OF_ARENA``), no two buffers live
    together sharing a byte (``OVERLAP``), and ``solution.height`` equal to
    ``max(offset + size)`` (``WRONG_HEIGHT``).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem, Solution
    >>> p = Problem((Buffer("a", 0, 2, 4), Buffer("b", 1, 3, 4)), capacity=8)
    >>> check_dsa_solution(p, Solution((0, 4), 8))
    []
    >>> [v.kind.value for v in check_dsa_solution(p, Solution((0, 2), 6))]
    ['overlap']
    """
    out: list[Violation] = []
    bs = problem.buffers
    if len(solution.offsets) != len(bs):
        out.append(Violation(ViolationKind.MISSING_OFFSET, "solution",
                             f"{len(solution.offsets)} offsets for {len(bs)} buffers"))
        return out
    rects: list[_Rect] = []
    height = 0
    for b, off in zip(bs, solution.offsets):
        if off < 0:
            out.append(Violation(ViolationKind.NEGATIVE_OFFSET, b.id,
                                 f"buffer {b.id!r} has negative offset {off}"))
            continue
        if off % b.alignment:
            out.append(Violation(ViolationKind.MISALIGNED, b.id,
                                 f"buffer {b.id!r} offset {off} is not a multiple of "
                                 f"{b.alignment}"))
        if b.offset is not None and off != b.offset:
            out.append(Violation(ViolationKind.FIXED_OFFSET, b.id,
                                 f"buffer {b.id!r} is fixed at {b.offset}, solution has {off}"))
        if problem.capacity is not None and off + b.size > problem.capacity:
            out.append(Violation(ViolationKind.OUT_OF_ARENA, b.id,
                                 f"buffer {b.id!r} ends at {off + b.size} beyond capacity "
                                 f"{problem.capacity}"))
        if b.size:
            height = max(height, off + b.size)
            rects.append((b.id, b.lower, b.upper, off, b.size))
    for x, y in _overlapping_pairs(rects):
        out.append(Violation(ViolationKind.OVERLAP, x,
                             f"buffers {x!r} and {y!r} are live together and share bytes"))
    if height != solution.height:
        out.append(Violation(ViolationKind.WRONG_HEIGHT, "solution",
                             f"declared height {solution.height}, actual {height}"))
    return out
