"""The "Memory by module" card: a sortable table and an icicle of the bytes live at the peak.

Below the fold, so drawn only once scrolled into view (``MODULE_SEEN``).  A row or an icicle
node selects its module (``SELECTION``): the other views mark its ops and storages, and its
rows are highlighted here and in the live table.
"""

from __future__ import annotations

import dash
from dash import Input, Output, dcc, html

# (mypy skips dash_table's __init__, which opts out of checking: the class's module)
from dash.dash_table.DataTable import DataTable
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.analysis.modules import TOP_LEVEL, module_path
from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import FigureJSON, GraphRef, PlotlyEvent, Selection
from app.views.components import card, fixed_graph
from app.views.lazy import register_seen, store
from app.views.memory_by_module.data import (
    Depth,
    module_highlight_style,
    module_view_dict,
)
from app.views.memory_by_module.model import MODULE_KINDS, ModuleRow
from app.views.spec import PageDefaults, View

__all__ = ["ICICLE_PICK_JS", "VIEW", "module_card", "module_styles", "on_module_pick",
           "render_modules"]

#: An icicle click (``assets/module_icicle.js`` turns it into clickData without plotly's
#: zoom) selects its module; the root clears the selection.
ICICLE_PICK_JS = """
function(click) {
    const p = click && click.points && click.points[0];
    if (!p || p.id === undefined) { return window.dash_clientside.no_update; }
    if (p.id === "all") { return null; }
    return {kind: "module", id: p.id === "TOP_LEVEL" ? "" : p.id};
}
""".replace("TOP_LEVEL", TOP_LEVEL)


def module_card() -> html.Div:
    """Memory by module: a sortable table and an icicle of the bytes live at the peak."""
    mib = {"type": "numeric", "format": {"specifier": ",.3f"}}
    cols = [{"name": "module", "id": "module"},
            {"name": "before (MiB)", "id": "before_mib", **mib},
            {"name": "after (MiB)", "id": "after_mib", **mib},
            {"name": "change (MiB)", "id": "change_mib", **mib},
            {"name": "share %", "id": "share_pct", "type": "numeric"}]
    cols += [{"name": f"{k.replace('_', ' ')} (MiB)", "id": f"{k}_mib", **mib}
             for k in (*MODULE_KINDS, "other")]
    controls = html.Div([
        html.Label(["group by", dcc.Dropdown(
            id=ids.MODULE_DEPTH, clearable=False, value=2,
            options=[{"label": f"depth {d}", "value": d} for d in (1, 2, 3, 4)]
            + [{"label": "full paths (own bytes)", "value": "full"}])], className="field"),
        html.Label(["kinds and icicle of", dcc.RadioItems(
            id=ids.MODULE_SIDE, value="after", inline=True,
            options=[{"label": "the plan", "value": "after"},
                     {"label": "the baseline", "value": "before"}])], className="field"),
    ], className="grid2")
    table = DataTable(
        id=ids.MODULE_TABLE, page_size=15, sort_action="native",
        columns=cols,  # type: ignore[arg-type]  # dicts spread from **mib: the stubs' Columns
        sort_by=[{"column_id": "after_mib", "direction": "desc"}],
        style_cell={"fontFamily": "monospace", "fontSize": 12},
        style_cell_conditional=[{"if": {"column_id": "module"}, "textAlign": "left"}],
        style_table={"overflowX": "auto"})
    return card("Memory by module (bytes live at the peak)",
                html.Div(id=ids.MODULE_TITLE, className="muted"), controls, table,
                fixed_graph(ids.MODULE_ICICLE, 440, "drawn when this card is scrolled into view"),
                id_=ids.MODULE_CARD)


def render_modules(graph: GraphRef | None, plan: str | None, base: str, depth: Depth,
                   side: str, sel: Selection | None, seen: bool | None = True
                   ) -> tuple[list[ModuleRow], FigureJSON, str]:
    """Per-module table, icicle and title (the selected module outlined); nothing until the
    card has been scrolled into view (``seen``)."""
    if not graph or not seen:
        raise PreventUpdate
    return module_view_dict(graph["key"], plan, base, depth, side, sel)


def on_module_pick(cell: PlotlyEvent | None) -> Selection:
    """A module table row selects that module."""
    label = (cell or {}).get("row_id")
    if label is None:
        raise PreventUpdate
    return {"kind": "module", "id": module_path(str(label))}


def module_styles(sel: Selection | None) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Rows of the selected module highlighted in the live and module tables."""
    style = module_highlight_style(sel)
    return style, style


def register(app: dash.Dash, config: AppConfig) -> None:
    """The module view's callbacks."""
    app.callback(Output(ids.MODULE_TABLE, "data"), Output(ids.MODULE_ICICLE, "figure"),
                 Output(ids.MODULE_TITLE, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"),
                 Input(ids.MODULE_DEPTH, "value"), Input(ids.MODULE_SIDE, "value"),
                 Input(ids.SELECTION, "data"), Input(ids.MODULE_SEEN, "data"))(render_modules)
    register_seen(app, ids.MODULE_CARD, ids.MODULE_SEEN)  # below the fold: drawn when seen
    app.callback(Output(ids.SELECTION, "data", allow_duplicate=True),
                 Input(ids.MODULE_TABLE, "active_cell"),
                 prevent_initial_call=True)(on_module_pick)
    app.clientside_callback(ICICLE_PICK_JS, Output(ids.SELECTION, "data", allow_duplicate=True),
                            Input(ids.MODULE_ICICLE, "clickData"), prevent_initial_call=True)
    app.callback(Output(ids.LIVE_TABLE, "style_data_conditional"),
                 Output(ids.MODULE_TABLE, "style_data_conditional"),
                 Input(ids.SELECTION, "data"),
                 prevent_initial_call=True)(module_styles)  # nothing selected at start


def _components(_: PageDefaults) -> list[Component]:
    return [module_card()]


def _warm(graph_key: str, plan_key: str | None) -> None:
    module_view_dict(graph_key, plan_key, "eager", 2, "after")


VIEW = View("memory_by_module", "main", _components, register,
            stores=lambda: [store(ids.MODULE_SEEN)], warm=_warm)
