"""The Search card: hits as buttons (a click selects, highlights and zooms every view).

A hit is picked by ``assets/search_hits.js`` (the press names the hit, the release hands it
to ``SEARCH_PICK``), not by the button's ``n_clicks``: a newer query's answer replacing the
list between the press and the release lost the click, or gave it to another hit.
"""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, dcc, html
from dash.development.base_component import Component

from app.core import ids
from app.core.config import AppConfig
from app.core.state import get_graph
from app.core.store_types import GraphRef
from app.views.components import card
from app.views.lazy import store
from app.views.search.model import regex_problem, search
from app.views.spec import PageDefaults, View

__all__ = ["VIEW", "on_search", "search_children"]


def _search_card(_: PageDefaults) -> list[Component]:
    return [card("Search", dcc.Input(id=ids.SEARCH_INPUT, type="search",
                                     placeholder="op or tensor name (regex)", debounce=True),
                 html.Div(id=ids.SEARCH_RESULTS, className="hits"))]


def search_children(hits: Sequence[tuple[str, str, str]], problem: str | None = None
                    ) -> list[Component]:
    """Search hits as buttons (click: select, highlight and zoom); a query that is not a
    valid regular expression says so first (it is then matched as plain text)."""
    note = [html.Div(f"not a valid regular expression ({problem}): matched as plain text",
                     className="status error")] if problem else []
    if not hits:
        return [*note, html.Div("no match", className="muted")]
    return [*note, *[html.Button(label, id={"type": ids.SEARCH_HIT, "index": f"{kind}:{ident}"},
                                 className="hit") for kind, ident, label in hits]]


def on_search(query: str | None, graph: GraphRef | None) -> list[Component]:
    """View 6: search by op or tensor name."""
    if not graph or not query:
        return []
    return search_children(search(get_graph(graph["key"]), query), regex_problem(query))


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Search card's callback (no query at start: no hits)."""
    app.callback(Output(ids.SEARCH_RESULTS, "children"), Input(ids.SEARCH_INPUT, "value"),
                 Input(ids.GRAPH_KEY, "data"), prevent_initial_call=True)(on_search)


VIEW = View("search", "side", _search_card, register, stores=lambda: [store(ids.SEARCH_PICK)])
