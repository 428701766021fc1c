"""Layout baselines: how other systems place tensors once the order is fixed.

Three methods, all on :class:`~roam_core.model.dsa.Problem` and all checked by the same validator:

``greedy_size``
    TFLite's / XLA's greedy by size: decreasing size, each into the smallest gap between the
    already placed time-neighbours that holds it (best fit), else on top.
``llfb``
    ROAM's long-lived-first baseline (LLFB): a skyline over time; at the lowest free level,
    place the longest-lived tensor whose lifetime fits inside the gap's time range; when none
    fits, raise the gap to its lower neighbour.
``inductor``
    A re-implementation of the idea of torch inductor's pool planner
    (``torch/_inductor/codegen/memory_planning.py``): tensors by decreasing size go into a tree
    of *temporal splits* (children disjoint in time) and *spatial splits* (left below right);
    a tensor descends into the only child it overlaps in time, takes a free slot beside
    time-disjoint children, or the pool grows on top.

:data:`LAYOUT_METHODS` maps each name to ``function(problem) -> Solution``;
:func:`baseline_layout` runs one on a graph in an order.

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> p = Problem((Buffer("a", 0, 4, 2), Buffer("b", 0, 2, 1), Buffer("c", 2, 4, 1)))
>>> {name: fn(p).height for name, fn in sorted(LAYOUT_METHODS.items())}
{'greedy_size': 3, 'inductor': 3, 'llfb': 3}
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from roam_core.base.errors import ConfigError
from roam_core.layout.arena_layout import arena_layout, layout_problem
from roam_core.layout.dsa_heuristics import greedy_by_size
from roam_core.model.dsa import Problem, Solution
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId

__all__ = ["LAYOUT_METHODS", "BaselineLayout", "baseline_layout", "inductor_pool", "llfb"]

_logger = logging.getLogger(__name__)


# ------------------------------------------------------------------- LLFB
def llfb(problem: Problem) -> Solution:
    """Long-lived-first skyline placement (ROAM's heuristic layout baseline).

    Fixed offsets are not supported (they are ignored).
    """
    bs = problem.buffers
    live = [i for i, b in enumerate(bs) if b.size > 0]
    offsets = [0] * len(bs)
    if not live:
        return Solution.from_offsets(problem, offsets)
    pts = sorted({bs[i].lower for i in live} | {bs[i].upper for i in live})
    sec = {t: k for k, t in enumerate(pts)}
    nsec = len(pts) - 1
    floor = [0] * nsec
    span = {i: (sec[bs[i].lower], sec[bs[i].upper]) for i in live}
    # unplaced buffers, longest-lived first (then larger)
    pending = sorted(live, key=lambda i: (-(bs[i].upper - bs[i].lower), -bs[i].size, i))
    cover = [0] * (nsec + 1)  # unplaced buffers per section (difference array)
    for i in live:
        lo, hi = span[i]
        cover[lo] += 1
        cover[hi] -= 1
    count = [0] * nsec
    run = 0
    for k in range(nsec):
        run += cover[k]
        count[k] = run
    while pending:
        # lowest section that still has unplaced buffers, and its equal-floor gap
        k = min((s for s in range(nsec) if count[s]), key=lambda s: floor[s])
        level = floor[k]
        a = k
        while a > 0 and floor[a - 1] == level:
            a -= 1
        b = k + 1
        while b < nsec and floor[b] == level:
            b += 1
        pick = next((i for i in pending if a <= span[i][0] and span[i][1] <= b
                     and max(floor[span[i][0]:span[i][1]]) == level), None)
        if pick is None:
            neigh = [floor[a - 1]] if a > 0 else []
            neigh += [floor[b]] if b < nsec else []
            raise_to = min(x for x in neigh if x > level) if neigh else level + 1
            for s in range(a, b):
                floor[s] = raise_to
            continue
        pending.remove(pick)
        lo, hi = span[pick]
        a_i = bs[pick].alignment
        off = -(-level // a_i) * a_i
        offsets[pick] = off
        for s in range(lo, hi):
            floor[s] = off + bs[pick].size
            count[s] -= 1
    return Solution.from_offsets(problem, offsets)


# --------------------------------------------------------------- inductor
@dataclass
class _Node:
    """A pool tree node: ``kind`` is "block", "empty", "temporal" or "spatial"."""

    kind: str
    size: int = 0
    buffer: int = -1
    items: list[_Node] = field(default_factory=list)  # temporal children / [left, right]
    ivals: list[tuple[int, int]] = field(default_factory=list)  # lifetimes in the subtree
    h: int = -1  # cached height

    def height(self) -> int:
        if self.h < 0:
            self.refresh()
        return self.h

    def refresh(self) -> None:
        """Recompute the cached height from the children's cached heights."""
        if self.kind in ("block", "empty"):
            self.h = self.size
        elif self.kind == "temporal":
            self.h = max((c.height() for c in self.items), default=0)
        else:
            self.h = self.items[0].height() + self.items[1].height()


def _overlaps(node: _Node, lo: int, hi: int) -> bool:
    return any(a < hi and lo < b for a, b in node.ivals)


def _alloc(node: _Node, i: int, lo: int, hi: int, size: int, is_last: bool) -> bool:
    if node.kind == "spatial":
        ok = _alloc(node.items[0], i, lo, hi, size, False) or \
            _alloc(node.items[1], i, lo, hi, size, is_last)
    elif node.kind == "temporal":
        slot = node.height()
        if not is_last and size > slot:
            return False
        hit = [c for c in node.items if _overlaps(c, lo, hi)]
        if len(hit) > 1:
            return False
        if hit:
            ok = _alloc(hit[0], i, lo, hi, size, is_last)
        else:
            if len(node.items) == 1 and node.items[0].kind == "empty":
                node.items.pop()
            block = _Node("block", size, i, ivals=[(lo, hi)])
            if slot == size or (not node.items and slot < size):
                node.items.append(block)
            elif slot > size:
                node.items.append(_spatial(block, slot - size))
            else:  # grow: every child gets room on top
                node.items = [_spatial(c, size - slot) for c in node.items] + [block]
            ok = True
    else:
        return False
    if ok:
        node.ivals.append((lo, hi))
        node.refresh()
    return ok


def _spatial(left: _Node, extra: int) -> _Node:
    lt = _Node("temporal", items=[left], ivals=list(left.ivals))
    rt = _Node("temporal", items=[_Node("empty", extra)])
    return _Node("spatial", items=[lt, rt], ivals=list(left.ivals))


def _assign(node: _Node, base: int, out: list[int]) -> None:
    if node.kind == "block":
        out[node.buffer] = base
    elif node.kind == "temporal":
        for c in node.items:
            _assign(c, base, out)
    elif node.kind == "spatial":
        _assign(node.items[0], base, out)
        _assign(node.items[1], base + node.items[0].height(), out)


def inductor_pool(problem: Problem) -> Solution:
    """Inductor-style pool tree: decreasing size (then longer life), one growing pool.

    Alignment is handled by rounding sizes up to each buffer's alignment.
    """
    bs = problem.buffers
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 4 * len(bs) + 1000))
    try:
        return _inductor_pool(problem)
    finally:
        sys.setrecursionlimit(old_limit)


def _inductor_pool(problem: Problem) -> Solution:
    bs = problem.buffers
    root = _Node("temporal")
    for i in sorted(range(len(bs)), key=lambda i: (-bs[i].size, -(bs[i].upper - bs[i].lower))):
        b = bs[i]
        if b.size == 0:
            continue
        size = -(-b.size // b.alignment) * b.alignment
        if not _alloc(root, i, b.lower, b.upper, size, True):
            block = _Node("block", size, i, ivals=[(b.lower, b.upper)])
            top = _Node("temporal", items=[block], ivals=[(b.lower, b.upper)])
            root = _Node("temporal", items=[_Node("spatial", items=[root, top],
                                                  ivals=root.ivals + top.ivals)],
                         ivals=root.ivals + top.ivals)
    offsets = [0] * len(bs)
    _assign(root, 0, offsets)
    return Solution.from_offsets(problem, offsets)


#: Layout baselines by name: ``function(problem) -> Solution``.
LAYOUT_METHODS: dict[str, Callable[[Problem], Solution]] = {
    "greedy_size": greedy_by_size,
    "llfb": llfb,
    "inductor": inductor_pool,
}


@dataclass(frozen=True, slots=True)
class BaselineLayout:
    """A baseline's arena layout (same convention as
    :class:`roam_core.layout.arena_layout.ArenaLayout`)."""

    method: str
    offsets: Mapping[TensorId, int]
    arena_bytes: int
    alignment_bytes: int
    resident_bytes: int
    wall_time_s: float


def baseline_layout(graph: Graph, order: Sequence[OpId], method: str, *,
                    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> BaselineLayout:
    """Lay out ``graph`` in ``order`` with a baseline: resident storages at the bottom.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> baseline_layout(chain3(), chain3().op_ids, "llfb").arena_bytes
    1024
    """
    if method not in LAYOUT_METHODS:
        raise ConfigError(f"unknown layout method {method!r}; known: {sorted(LAYOUT_METHODS)}")
    t0 = time.perf_counter()
    a = max(1, alignment_bytes)
    problem = layout_problem(graph, order, a)
    lay = arena_layout(graph, problem, LAYOUT_METHODS[method](problem).offsets, a)
    return BaselineLayout(method, lay.offsets, lay.arena_bytes, a, lay.resident_bytes,
                          time.perf_counter() - t0)
