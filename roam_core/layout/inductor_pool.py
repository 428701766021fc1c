"""A re-implementation of the idea of torch inductor's pool planner, as a layout baseline.

After ``torch/_inductor/codegen/memory_planning.py``: tensors by decreasing size go into a
tree of *temporal splits* (children disjoint in time) and *spatial splits* (left below
right); a tensor descends into the only child it overlaps in time, takes a free slot beside
time-disjoint children, or the pool grows on top.  Registered as ``"inductor"`` in
:data:`roam_core.layout.baseline_layouts.LAYOUT_METHODS`.

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> p = Problem((Buffer("a", 0, 4, 2), Buffer("b", 0, 2, 1), Buffer("c", 2, 4, 1)))
>>> inductor_pool(p).height
3
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from roam_core.model.dsa import Problem, Solution

__all__ = ["inductor_pool"]


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
