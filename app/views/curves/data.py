"""The memory curves of a stored graph and plan (memoised; a selected module adds its own
bytes per step, before and after)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from app.analysis.layout_view import LayoutView
from app.analysis.modules import has_modules, module_label
from app.analysis.peaks import peak_contributors, peak_modules, peak_note
from app.core import state
from app.core.memo import memoised
from app.core.store_types import FigureJSON, Selection
from app.figures.style import KIND_COLORS
from app.services.figure_cache import copy_figure, figure_json, fresh, window_key
from app.services.plan_data import after_data, before_data
from app.services.selection import selected_module
from app.services.view_graph import view_graph
from app.views.curves.figure import memory_curves_figure
from roam_core.model.graph import Graph, OpId, TensorKind
from roam_core.oracle.attribution import kind_bytes_per_step, module_bytes_per_step

__all__ = ["curves_dict", "curves_figure"]


def curves_figure(graph_key: str, plan_key: str | None, base: str,
                  x_range: Sequence[float] | None, step: int | None,
                  selection: Selection | None = None) -> go.Figure:
    """View 1: before/after live bytes (memoised; each call gets its own copy); a selected
    module adds its own bytes per step, before and after."""
    return _curves(graph_key, plan_key, base, window_key(x_range), step,
                   selected_module(selection))


def curves_dict(graph_key: str, plan_key: str | None, base: str,
                x_range: Sequence[float] | None, step: int | None,
                selection: Selection | None = None) -> FigureJSON:
    """:func:`curves_figure` as a fresh figure dict (what the page is sent; no copy of the
    stored figure, which is serialised once)."""
    return fresh(_curves.frozen(graph_key, plan_key, base, window_key(x_range), step,
                                selected_module(selection)))


@memoised(16, copy=copy_figure, frozen=figure_json)
def _curves(graph_key: str, plan_key: str | None, base: str,
            x_range: tuple[float, ...] | None, step: int | None,
            module: str | None = None) -> go.Figure:
    b = before_data(graph_key, base, state.get_plan(plan_key).alignment_bytes if plan_key else 512)
    graph = state.get_graph(graph_key)
    label = f"module {module_label(module or '')}"
    if not plan_key:
        extra: list[tuple[str, Any, str, str]] = [] if module is None else [
            (f"{label} ({b.label})", module_bytes_per_step(graph, b.order, module), "#55a868",
             "before")]
        note = {b.label: _peak_note(graph, b.view, b.curve)}
        return memory_curves_figure(b.curve, None, after_label=b.label, x_range=x_range,
                                    step=step, extra_curves=extra, peak_notes=note,
                                    title="not planned yet: press Plan", planned=False)
    a = after_data(graph_key, plan_key)
    g_after = view_graph(graph_key, plan_key)
    extra = [] if module is None else [
        (f"{label} (before)", module_bytes_per_step(graph, b.order, module), "#8fb8de",
         "before"),
        (f"{label} (planned)", module_bytes_per_step(
            g_after, a.plan.order, module, alignment_bytes=a.plan.alignment_bytes), "#e89c9f",
         "after")]
    extra += _communication(g_after, a.plan.order, a.plan.alignment_bytes)
    after_label = f"planned ({a.plan.method})"
    notes = {lbl: _peak_note(g, view, curve) for lbl, g, view, curve in (
        (b.label, graph, b.view, b.curve), (after_label, g_after, a.view, a.curve))}
    return memory_curves_figure(
        a.curve, b.curve, arena_bytes=a.plan.arena_bytes,
        lower_bound_bytes=a.plan.lower_bound_bytes, after_label=after_label,
        before_label=b.label, x_range=x_range, step=step, extra_curves=extra,
        peak_notes=notes, title="")  # the summary's headline says it


def _communication(graph: Graph, order: Sequence[OpId],
                   alignment_bytes: int) -> list[tuple[str, np.ndarray, str, str]]:
    """The planned live bytes of the communication buffers of a data-parallel rank's step
    (gathered parameters, all-gather / reduce-scatter / bucket buffers), in their colour."""
    if not any(t.kind is TensorKind.COMMUNICATION for t in graph.tensors.values()):
        return []
    curve = kind_bytes_per_step(graph, order, TensorKind.COMMUNICATION,
                                alignment_bytes=alignment_bytes)
    return [("communication (planned)", np.asarray(curve), KIND_COLORS["communication"],
             "after")]


def _peak_note(graph: Graph, view: LayoutView, curve: np.ndarray) -> str:
    """The line under a peak: its top-3 modules (tensors when the graph has no modules)."""
    k = int(np.argmax(curve)) if len(curve) else 0
    if has_modules(graph):
        return peak_note(peak_modules(graph, view, k), "top modules")
    return peak_note(peak_contributors(graph, view, k))
