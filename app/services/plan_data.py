"""The two sides of every comparison: the "before" (a baseline order, its curve, its caching
allocator layout) and the planned side (the plan, its curve, layout and per-step bytes).

Memoised per process by cache key (arrays frozen read-only), so that every view of one
plan shares one computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis import planner
from app.analysis.layout_view import (
    LayoutView,
    layout_from_blocks,
    layout_from_plan,
    step_bytes,
    total_curve,
)
from app.core import state
from app.core.memo import array_bytes, freeze_arrays, memoised
from app.services.view_graph import view_graph
from roam_core.model.graph import OpId
from roam_core.model.plan import Plan

__all__ = ["After", "Before", "after_data", "before_data"]


@dataclass(frozen=True)
class Before:
    """The "before" side: a baseline order, its curve and its allocator layout."""

    method: str
    label: str
    order: tuple[OpId, ...]
    curve: np.ndarray
    view: LayoutView
    reserved_bytes: int


@dataclass(frozen=True)
class After:
    """The planned side."""

    plan: Plan
    curve: np.ndarray
    view: LayoutView
    alloc: np.ndarray
    freed: np.ndarray


def _before_weight(record: Before) -> int:
    """Estimated bytes of a record: its arrays and its order."""
    return array_bytes(record) + 64 * len(record.order)


def _after_weight(record: After) -> int:
    """Estimated bytes of a record: its arrays and its plan."""
    return array_bytes(record) + state.plan_bytes(record.plan)


@memoised(8, max_bytes=state.VIEW_MEMO_BYTES, weigh=_before_weight)
def before_data(graph_key: str, method: str = "eager", alignment_bytes: int = 512) -> Before:
    """Baseline order, curve and simulated-allocator layout (memoised)."""
    graph = state.get_graph(graph_key)
    order, label = planner.baseline_order(graph, method)
    blocks, reserved, how = planner.baseline_layout(graph, order)
    view = layout_from_blocks(graph, blocks, len(order), label=f"{label} layout ({how})")
    return freeze_arrays(Before(method, label, order,
                                total_curve(graph, order, alignment_bytes), view,
                                reserved))


@memoised(8, max_bytes=state.VIEW_MEMO_BYTES, weigh=_after_weight)
def after_data(graph_key: str, plan_key: str) -> After:
    """Planned curve, layout arrays and per-step bytes (memoised)."""
    graph = view_graph(graph_key, plan_key)
    plan = state.get_plan(plan_key)
    curve = np.asarray(plan.live_bytes, np.int64) + plan.resident_bytes
    if len(curve) != len(plan.order):
        curve = total_curve(graph, plan.order, plan.alignment_bytes)
    alloc, freed = step_bytes(graph, plan.order, plan.alignment_bytes)
    view = layout_from_plan(graph, plan, label=f"planned layout ({plan.method})")
    return freeze_arrays(After(plan, curve, view, alloc, freed))
