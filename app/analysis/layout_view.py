"""The rectangles of one memory layout as NumPy arrays, and the per-step byte curves.

Arrays are NumPy so that the views stay fast for GPT-2-XL-sized plans (tens of thousands of
storages).  Pure: unit-tested without a cache or Dash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.analysis.modules import tensor_module_label
from roam_core.model.graph import Graph, OpId, Tensor, TensorId, TensorKind, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.allocator_sim import Block
from roam_core.oracle.simulate import Lifetime, lifetimes, simulate

__all__ = [
    "KINDS",
    "LayoutView",
    "layout_from_blocks",
    "layout_from_plan",
    "step_bytes",
    "tensor_hover_label",
    "total_curve",
]

#: Kind codes used in the layout arrays (index into this tuple).
KINDS: tuple[TensorKind, ...] = tuple(TensorKind)

_KIND_CODE = {k: i for i, k in enumerate(KINDS)}


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


def _arrays(rows: list[tuple[TensorId, int, int, int, int, int]], n: int, height: int,
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


def tensor_hover_label(graph: Graph, t: Tensor, with_module: bool = True) -> str:
    """``"<br>h.0.attn.c_attn.weight<br>module h.0.attn.c_attn"`` (hover lines after the id).

    >>> from roam_core.model.samples import tiny_train_step
    >>> tensor_hover_label(tiny_train_step(), tiny_train_step().tensors["mm"])
    '<br>module (top level)'
    """
    return ((f"<br>{t.name}" if t.name else "")
            + (f"<br>module {tensor_module_label(graph, t)}" if with_module else ""))


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


def layout_from_blocks(graph: Graph, blocks: Sequence[Block], n_steps: int, *,
                       label: str = "baseline layout") -> LayoutView:
    """The caching allocator's blocks (``tensor_id, address, size_bytes, start_step,
    end_step``) as a layout."""
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
