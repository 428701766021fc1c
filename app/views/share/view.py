"""The page's address keeps the graph, plan, zoom and selection shown (``?graph=…``), so a
copied link reopens the same view; :func:`restored` applies a link when the page is built."""

from __future__ import annotations

import dataclasses
import urllib.parse

import dash
import flask
from dash import Input, Output, dcc
from dash.development.base_component import Component

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef, Selection
from app.views.share.data import graph_name, restorable
from app.views.share.model import UrlState, decode, encode
from app.views.spec import PageDefaults, View

__all__ = ["URL", "VIEW", "restored", "url_search"]

#: The page's address (``dcc.Location``; ``refresh=False``: writing it reloads nothing).
URL = "url"


def url_search(graph: GraphRef | None, plan: str | None, view_range: list[float] | None,
               selection: Selection | None) -> str:
    """The address's query string for what the page shows now."""
    return encode(graph["key"] if graph else None, plan, view_range,
                  {"kind": selection["kind"], "id": selection["id"]} if selection else None)


def _page_query() -> str:
    """The query string of the page being opened.  Dash asks for the layout in a request of
    its own (``/_dash-layout``), without the page's query string; the browser names the page
    in that request's ``Referer`` (same origin: the whole address)."""
    if not flask.has_request_context():
        return ""
    if flask.request.args.get("graph"):
        return flask.request.query_string.decode("utf-8", "replace")
    return urllib.parse.urlsplit(flask.request.referrer or "").query


def restored(defaults: PageDefaults) -> tuple[PageDefaults, UrlState]:
    """``defaults`` with the graph and plan of the link the page is opened with (if any),
    and the zoom and selection to seed the stores with."""
    query = _page_query()
    if "graph=" not in query:
        return defaults, UrlState()
    link, note = restorable(decode(query))
    if link.graph_key is None:
        return dataclasses.replace(defaults, load_message=note), link
    graph: GraphRef = {"key": link.graph_key, "name": graph_name(link.graph_key)}
    return dataclasses.replace(defaults, graph=graph,
                               plan_key=link.plan_key, sample_value=None,
                               load_message=note), link


def register(app: dash.Dash, config: AppConfig) -> None:
    """Every change of graph, plan, zoom or selection rewrites the address (not the page
    load: an address without a query is the start-up view, one with a query stays as is)."""
    app.callback(Output(URL, "search"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.VIEW_RANGE, "data"),
                 Input(ids.SELECTION, "data"), prevent_initial_call=True)(url_search)


def _components(_: PageDefaults) -> list[Component]:
    return [dcc.Location(id=URL, refresh=False)]


VIEW = View("share", "main", _components, register)
