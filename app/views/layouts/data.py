"""The planned layout and the baseline allocator layout of a stored graph and plan (the same
window; memoised; the selected tensor and module outlined)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.core.memo import memoised
from app.core.store_types import FigureJSON, Selection
from app.figures.style import empty_figure
from app.services.figure_cache import copy_pair, fresh, pair_json, window_key
from app.services.plan_data import after_data, before_data
from app.services.selection import (
    SelectionKey,
    members,
    selected_module,
    selected_tensor,
    selection_key,
    selection_of,
)
from app.views.layouts.figure import layout_figure, outline_tensors

__all__ = ["layout_dicts", "layout_figures"]


def layout_figures(graph_key: str, plan_key: str | None, base: str,
                   x_range: Sequence[float] | None, selection: Selection | None
                   ) -> tuple[go.Figure, go.Figure]:
    """View 4: planned layout and the baseline allocator layout (same window; memoised)."""
    return _layouts(graph_key, plan_key, base, window_key(x_range), selection_key(selection))


def layout_dicts(graph_key: str, plan_key: str | None, base: str,
                 x_range: Sequence[float] | None, selection: Selection | None
                 ) -> tuple[FigureJSON, FigureJSON]:
    """:func:`layout_figures` as fresh figure dicts (what the page is sent)."""
    lay, base_lay = _layouts.frozen(graph_key, plan_key, base, window_key(x_range),
                                    selection_key(selection))
    return fresh(lay), fresh(base_lay)


@memoised(16, copy=copy_pair, frozen=pair_json)
def _layouts(graph_key: str, plan_key: str | None, base: str,
             x_range: tuple[float, ...] | None, sel: SelectionKey | None
             ) -> tuple[go.Figure, go.Figure]:
    selection = selection_of(sel)
    b = before_data(graph_key, base)
    tid = selected_tensor(selection)
    base_fig = layout_figure(b.view, x_range=x_range, highlight_id=tid)
    path = selected_module(selection)
    module_tensors = members(graph_key, path)[1] if path is not None else frozenset()
    if module_tensors:
        outline_tensors(base_fig, b.view, module_tensors)
    if not plan_key:
        return empty_figure("not planned yet: press Plan"), base_fig
    a = after_data(graph_key, plan_key)
    fig = layout_figure(a.view, x_range=x_range, highlight_id=tid)
    if module_tensors:
        outline_tensors(fig, a.view, module_tensors)
    return fig, base_fig
