"""Per-module memory of a stored graph and plan: who holds the bytes live at each peak.

The attribution is memoised per plan (and per baseline); the icicle too (building it is most
of the view's time).  A selection of kind ``"module"`` is outlined in the icicle and
highlighted in the tables (:func:`module_highlight_style`).
"""

from __future__ import annotations

import plotly.graph_objects as go

from app.analysis.modules import TOP_LEVEL, module_depth, module_label
from app.analysis.peaks import tensor_label
from app.core import state
from app.core.formatting import fmt_bytes
from app.core.memo import memoised
from app.core.store_types import FigureJSON, Selection
from app.services.figure_cache import copy_figure, figure_json, fresh
from app.services.plan_data import after_data, before_data
from app.services.selection import selected_module
from app.services.view_graph import view_graph
from app.views.memory_by_module.figure import module_icicle_figure
from app.views.memory_by_module.model import ModuleRow, module_rows
from roam_core.model.graph import Graph
from roam_core.oracle.attribution import PeakAttribution, bytes_at_peak_by_module

__all__ = ["Depth", "module_attribution", "module_highlight_style", "module_view",
           "module_view_dict"]

#: How the table groups module paths: by their first ``n`` components, or ``"full"`` paths.
Depth = int | str | None


@memoised(16)
def module_attribution(graph_key: str, plan_key: str | None, base: str = "eager"
                       ) -> PeakAttribution:
    """Bytes live at the peak by module: of the plan's order, or of the baseline's when
    ``plan_key`` is ``None`` (memoised)."""
    graph = state.get_graph(graph_key)
    if plan_key:
        plan = after_data(graph_key, plan_key).plan
        graph = view_graph(graph_key, plan_key)
        return bytes_at_peak_by_module(graph, plan.order, alignment_bytes=plan.alignment_bytes)
    return bytes_at_peak_by_module(graph, before_data(graph_key, base).order)


def module_view(graph_key: str, plan_key: str | None, base: str, depth: Depth,
                side: str = "after", selection: Selection | None = None
                ) -> tuple[list[ModuleRow], go.Figure, str]:
    """Per-module memory: table rows, icicle and a title.

    ``depth`` groups module paths (an int, or ``"full"`` for every full path); ``side``
    picks whose kinds the table and the icicle show: ``"after"`` (the plan) or
    ``"before"`` (the baseline).  The icicle is memoised (each call gets its own copy).
    """
    rows, title = _module_rows(graph_key, plan_key, base, depth, side)
    return rows, _icicle(graph_key, plan_key, base, side, selected_module(selection)), title


def module_view_dict(graph_key: str, plan_key: str | None, base: str, depth: Depth,
                     side: str = "after", selection: Selection | None = None
                     ) -> tuple[list[ModuleRow], FigureJSON, str]:
    """:func:`module_view` with the icicle as a fresh figure dict (what the page is sent)."""
    rows, title = _module_rows(graph_key, plan_key, base, depth, side)
    fig = fresh(_icicle.frozen(graph_key, plan_key, base, side, selected_module(selection)))
    return rows, fig, title


def _module_rows(graph_key: str, plan_key: str | None, base: str, depth: Depth, side: str
                 ) -> tuple[list[ModuleRow], str]:
    """The module table's rows (fresh dicts) and the view's title."""
    graph = state.get_graph(graph_key)
    before = module_attribution(graph_key, None, base)
    b_label = before_data(graph_key, base).label
    after = module_attribution(graph_key, plan_key, base) if plan_key else None
    shown = after if after is not None and side != "before" else before
    d = None if depth in (None, "full") else max(int(depth), 1)
    if after is None:
        rows = module_rows(before, None, d)
    else:
        rows = module_rows(shown, before if shown is after else after, d)
        if shown is before:  # columns keep their meaning: before = baseline, after = plan
            for r in rows:
                r["before_mib"], r["after_mib"] = r["after_mib"], r["before_mib"]
                change = r["change_mib"]
                r["change_mib"] = None if change is None else -float(change)
    if not module_depth(graph):
        title = ("This graph records no module paths (traced before module attribution): "
                 "re-trace it to see memory by module.")
    else:
        what = f"planned peak (step {after.step})" if after is not None else "no plan yet"
        title = (f"Bytes live at the peak by module: {b_label} peak (step {before.step}) "
                 f"vs {what}; kind columns of the "
                 f"{'plan' if shown is after else b_label}.  Click a module to highlight "
                 "its ops and tensors in every view." + _outside_note(graph, shown))
    return rows, title


def _outside_note(graph: Graph, attr: PeakAttribution) -> str:
    """What the :data:`TOP_LEVEL` row holds at that peak, named (the loss and logits of a
    language model, say), so that a big row outside every module is not a mystery."""
    own = [t for m in attr.modules if not m.module for t in m.tensors]
    if not own:
        return ""
    big = sorted(own, key=lambda t: -graph.tensors[t].size_bytes)[:3]
    return (f"  {TOP_LEVEL}: storages made outside every nn.Module (the loss, the step's own "
            "code); largest here: " + ", ".join(
                f"{tensor_label(graph, t)} {fmt_bytes(graph.tensors[t].size_bytes)}"
                for t in big) + ".")


@memoised(16, copy=copy_figure, frozen=figure_json)
def _icicle(graph_key: str, plan_key: str | None, base: str, side: str, sel: str | None
            ) -> go.Figure:
    """The module icicle (building it is most of the module view's time: 0.3 s on GPT2-XL,
    plotly validating a few thousand nodes)."""
    before = module_attribution(graph_key, None, base)
    b_label = before_data(graph_key, base).label
    after = module_attribution(graph_key, plan_key, base) if plan_key else None
    shown = after if after is not None and side != "before" else before
    other = before if shown is after else after
    return module_icicle_figure(
        shown.kind_bytes(), other.kind_bytes() if other is not None else None, selected=sel,
        title=f"{'planned' if shown is after else b_label} peak by module: "
              f"{fmt_bytes(shown.total_bytes)} at step {shown.step}")


def module_highlight_style(selection: Selection | None) -> list[dict[str, object]]:
    """``style_data_conditional`` of a table with a ``module`` column: rows of the
    selected module (and its submodules) highlighted."""
    if not selection or selection.get("kind") != "module":
        return []
    label = module_label(selection["id"])
    query = f'{{module}} = "{label}"'
    if selection["id"]:
        query += f' or {{module}} contains "{selection["id"]}."'
    return [{"if": {"filter_query": query}, "backgroundColor": "#fff3c4"}]
