"""Layout rules: every storage has an aligned offset inside the arena, and no two storages
live at the same time share a byte.

:func:`check_arena` checks a plan's arena (lifetimes from the order,
:func:`~roam_core.oracle.validate.steps.live_spans`); :func:`check_dsa_solution` checks a
dynamic storage allocation solution (lifetimes given).  Both find overlaps with one sweep
over time (:func:`_overlapping_pairs`), ``O(n log n)`` for valid layouts.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from roam_core.base.errors import Violation, ViolationKind
from roam_core.model.graph import Graph, OpId, TensorId, round_size
from roam_core.oracle.validate.steps import live_spans

if TYPE_CHECKING:  # data types only; the validator shares no code with any solver
    from roam_core.model.dsa import Problem, Solution

__all__ = ["check_arena", "check_dsa_solution"]

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


def check_arena(graph: Graph, order: Sequence[OpId], offsets: Mapping[TensorId, int],
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
    spans = live_spans(graph, order)
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
