"""The operator timeline of a stored graph and plan (memoised; the selection ringed or
underlined)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.core import state
from app.core.memo import memoised
from app.core.store_types import FigureJSON, Selection
from app.services.figure_cache import copy_figure, figure_json, fresh, window_key
from app.services.plan_data import after_data, before_data
from app.services.selection import (
    SelectionKey,
    members,
    selected_module,
    selected_op,
    selection_key,
    selection_of,
)
from app.services.view_graph import view_graph
from app.views.timeline.figure import mark_ops, mark_recompute, timeline_figure
from roam_core.model.graph import OpId

__all__ = ["timeline_dict", "timeline_fig"]


def timeline_fig(graph_key: str, plan_key: str | None, base: str,
                 x_range: Sequence[float] | None, selection: Selection | None) -> go.Figure:
    """View 3: operator timeline (planned and baseline rows; memoised)."""
    return _timeline(graph_key, plan_key, base, window_key(x_range), selection_key(selection))


def timeline_dict(graph_key: str, plan_key: str | None, base: str,
                  x_range: Sequence[float] | None, selection: Selection | None
                  ) -> FigureJSON:
    """:func:`timeline_fig` as a fresh figure dict (what the page is sent)."""
    return fresh(_timeline.frozen(graph_key, plan_key, base, window_key(x_range),
                                  selection_key(selection)))


@memoised(16, copy=copy_figure, frozen=figure_json)
def _timeline(graph_key: str, plan_key: str | None, base: str,
              x_range: tuple[float, ...] | None, sel: SelectionKey | None) -> go.Figure:
    selection = selection_of(sel)
    graph = state.get_graph(graph_key)
    b = before_data(graph_key, base)
    hl = selected_op(graph, selection)
    if not plan_key:
        fig = timeline_figure(graph, b.order, None, x_range=x_range, highlight_op=hl,
                              before_label=b.label, planned=False)
        _mark_module_ops(fig, graph_key, selection, [b.order])
        return fig
    a = after_data(graph_key, plan_key)
    graph = view_graph(graph_key, plan_key)
    fig = timeline_figure(graph, a.plan.order, b.order, alloc_bytes=a.alloc,
                          freed_bytes=a.freed, x_range=x_range, highlight_op=hl,
                          before_label=b.label, after_label=a.plan.method)
    mark_recompute(fig, a.plan, 1, 2)
    _mark_module_ops(fig, graph_key, selection, [b.order, a.plan.order])
    return fig


def _mark_module_ops(fig: go.Figure, graph_key: str, sel: Selection | None,
                     orders: Sequence[Sequence[OpId]]) -> None:
    path = selected_module(sel)
    if path is not None:
        mark_ops(fig, orders, members(graph_key, path)[0])
