"""The page: the stores, the header and two columns of views, built from the registry; and
every view's callbacks registered on the app.

Components only here and in the views: no roam_core computation (the defaults come in as
arguments).  The page is built on every load (a fresh ``SESSION`` id each time).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import dash
from dash import Input, Output, dcc, html
from dash.development.base_component import Component

from app.core import ids
from app.core.config import AppConfig
from app.views.lazy import store
from app.views.registry import VIEWS
from app.views.share.view import restored
from app.views.spec import Column, PageDefaults, View

__all__ = ["build_layout", "register_views", "warm"]

#: A click on the error banner hides it (in the browser: no round trip).
DISMISS_JS = "function(n) { return true; }"


def _page_stores(defaults: PageDefaults) -> list[dcc.Store]:
    """The stores every view reads (a view's own stores come with it)."""
    return [store(ids.GRAPH_KEY, defaults.graph), store(ids.PLAN_KEY, defaults.plan_key),
            store(ids.RUNNING, {"plan": False, "trace": False, "verify": False})]


def _column(column: Column, defaults: PageDefaults, views: Sequence[View]) -> list[Component]:
    """The components of one column; consecutive views of one ``row`` share a row."""
    out: list[Component] = []
    mine = [v for v in views if v.column == column]
    for row, group in itertools.groupby(mine, key=lambda v: v.row):
        parts = [c for v in group for c in v.components(defaults)]
        out += [html.Div(parts, className="row2")] if row is not None else parts
    return out


def build_layout(defaults: PageDefaults, views: Sequence[View] = VIEWS) -> html.Div:
    """The whole page; ``defaults`` seeds the stores (graph and plan keys, settings...),
    or the link the page is opened with (:mod:`app.views.share`) where it names a graph."""
    defaults, link = restored(defaults)
    stores = [*_page_stores(defaults), *[s for v in views for s in v.stores()]]
    seeds: dict[str, list[float] | dict[str, str]] = {}
    if link.view_range:
        seeds[ids.VIEW_RANGE] = list(link.view_range)
    if link.selection:
        seeds[ids.SELECTION] = {"kind": link.selection[0], "id": link.selection[1]}
    # the link's zoom and selection seed the stores the linking view owns
    stores = [dcc.Store(id=sid, data=seeds[sid]) if (sid := getattr(s, "id", None)) in seeds
              else s for s in stores]
    side = html.Div(_column("side", defaults, views), className="side")
    main = html.Div(_column("main", defaults, views), className="main")
    header = html.Header([html.H1("roam"),
                          html.Span("memory-efficient execution plans for a training step",
                                    className="muted")])
    # every failed callback writes its message here (app.views.callback_tools.show_error)
    banner = html.Div(id=ids.CALLBACK_ERROR, className="callback-error", role="alert",
                      hidden=True, title="click to dismiss")
    return html.Div([*stores, header, banner, html.Div([side, main], className="page")])


def register_views(app: dash.Dash, config: AppConfig, views: Sequence[View] = VIEWS) -> None:
    """Register every view's callbacks on ``app``, bound to ``config``."""
    app.server.config["ROAM"] = config
    for view in views:
        view.register(app, config)
    app.clientside_callback(DISMISS_JS, Output(ids.CALLBACK_ERROR, "hidden"),
                            Input(ids.CALLBACK_ERROR, "n_clicks"), prevent_initial_call=True)


def warm(graph_key: str, plan_key: str | None, views: Sequence[View] = VIEWS) -> None:
    """Compute (and memoise) the opening views of a graph and plan, as figures and as the
    JSON the page is sent."""
    for view in views:
        if view.warm is not None:
            view.warm(graph_key, plan_key)
