"""Component builders every view uses: cards, number fields, graphs, "How to read this"."""

from __future__ import annotations

from typing import Any

from dash import dcc, html
from dash.development.base_component import Component

__all__ = ["GRAPH_CONFIG", "blank_figure", "card", "fixed_graph", "how_to_read", "number_field"]

#: Mode bar of every graph of the page.
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False, "scrollZoom": False,
                                "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def card(title: str, *children: Component | str, id_: str | None = None,
         cls: str = "") -> html.Div:
    """A titled card (``id_`` when something refers to it)."""
    kw: dict[str, Any] = {"id": id_} if id_ else {}  # no id at all when none is given
    return html.Div([html.H3(title), *children], className=f"card {cls}".strip(), **kw)


def number_field(id_: str, label: str, value: float, step: float | str = 1,
                 min_: float | None = 0) -> html.Label:
    """A labelled number input (``min_=None``: no minimum, a bad value reaches the check)."""
    kw: dict[str, Any] = {} if min_ is None else {"min": min_}
    return html.Label([label, dcc.Input(id=id_, type="number", value=value, step=step,
                                        debounce=True, **kw)], className="field")


def how_to_read(view: str, text: str) -> html.Details:
    """The collapsible "How to read this" note of one view (closed by default)."""
    return html.Details([html.Summary("How to read this"), html.Div(text, className="muted")],
                        className="howto", id=f"howto-{view}")


def blank_figure(note: str = "") -> dict[str, Any]:
    """What a graph shows before its first render: no axes (plotly's default empty figure
    draws a -1..6 grid that looks like a broken chart), and ``note`` if given."""
    hidden = {"visible": False}
    notes = [{"text": note, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
              "y": 0.5, "font": {"color": "#888"}}] if note else []
    return {"data": [], "layout": {"xaxis": hidden, "yaxis": hidden, "annotations": notes,
                                   "paper_bgcolor": "rgba(0,0,0,0)",
                                   "plot_bgcolor": "rgba(0,0,0,0)"}}


def fixed_graph(id_: str, height: int, note: str = "") -> html.Div:
    """A ``dcc.Graph`` of a fixed height, blank until its first render."""
    # the wrapper holds the height while plotly.js loads: the page does not jump, and the
    # cards below the fold stay below it (they are mounted when scrolled into view)
    return html.Div(dcc.Graph(id=id_, config=GRAPH_CONFIG, style={"height": f"{height}px"},
                              figure=blank_figure(note)),
                    style={"minHeight": f"{height}px"})
