"""The "Use this plan" card: the code to train with the plan shown and the CLI lines that
make it again (:mod:`app.views.use_plan.model`)."""

from __future__ import annotations

import dash
from dash import Input, Output, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef
from app.views import lazy
from app.views.components import how_to_read
from app.views.spec import PageDefaults, View
from app.views.use_plan.data import use_plan_for

__all__ = ["BODY", "VIEW", "render_use_plan"]

#: The card (drawn when opened: nothing of it runs on page load) and its body.
CARD = "use-plan-card"
BODY = "use-plan-body"
HOW_TO_READ = ("Python: load the plan file (Export / import > Plan JSON) and train with "
               "PlannedStep in your loop. Shell: the lines that trace the graph and make this "
               "plan again from the same settings.")


def render_use_plan(graph: GraphRef | None, plan: str | None) -> list[Component]:
    """The code and the command lines for the plan shown (a hint when there is none)."""
    if not graph:
        raise PreventUpdate
    if not plan:
        return [html.Div("No plan yet: press Plan, then this card shows the code to train "
                         "with it.", className="muted")]
    use = use_plan_for(graph["key"], plan)
    return [html.Div("Train with it (Python)", className="use-label"),
            html.Pre(use.python, id="use-plan-python", className="code"),
            html.Div("Make it again (shell)", className="use-label"),
            html.Pre(use.cli, id="use-plan-cli", className="code"),
            *[html.Div(n, className="muted") for n in use.notes]]


def _body() -> list[Component]:
    return [how_to_read("use-plan", HOW_TO_READ), html.Div(id=BODY)]


def register(app: dash.Dash, config: AppConfig) -> None:
    """The card's callbacks (its body's fires when the card is opened)."""
    lazy.register_lazy(app, CARD, _body)
    app.callback(Output(BODY, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"))(render_use_plan)


def _components(_: PageDefaults) -> list[Component]:
    return [lazy.lazy_card(CARD, "Use this plan",
                           "the code to train with this plan, and the commands that make it")]


VIEW = View("use_plan", "main", _components, register)
