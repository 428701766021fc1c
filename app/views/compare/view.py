"""The "Compare two plans" card: pick plans A and B of the loaded graph, see both memory
curves, a table of their peaks, arenas and extra time, the bytes at each peak by module and
the largest lifetime changes, each with the difference B − A.

Closed until opened (a lazy card); the plans on offer are the baselines, the plan shown,
roam's plan for the Plan card's settings, the last plan made or imported, and every plan of
the Budget view's frontier (:func:`app.views.compare.data.plan_choices`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

# (mypy skips dash_table's __init__, which opts out of checking: the class's module)
from dash.dash_table.DataTable import DataTable
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.analysis.settings import FormNumber, PlanSettings, settings_from_form
from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import FigureJSON, GraphRef, JobResult
from app.services.figure_cache import fresh
from app.views import lazy
from app.views.budget.view import FRONTIER_RESULT
from app.views.compare.data import (
    BASE,
    PLAN,
    compare_figure,
    compared_ref,
    comparison,
    frontier_keys,
    plan_choices,
    resolve_choice,
)
from app.views.compare.model import LIFETIME_COLUMNS, METRIC_COLUMNS, MODULE_COLUMNS, Row
from app.views.components import GRAPH_CONFIG, blank_figure, how_to_read
from app.views.spec import PageDefaults, View
from roam_core.base.errors import ConfigError, RoamError

__all__ = ["CARD", "COMPARED", "HOW_TO_READ", "PICK_A", "PICK_B", "VIEW", "compare_options",
           "render_compare"]

CARD = "compare-card"
PICK_A = "compare-a"
PICK_B = "compare-b"
STATUS = "compare-status"
GRAPH = "compare-graph"
METRICS = "compare-metrics"
NOTE = "compare-note"
MODULES = "compare-modules"
LIFETIMES = "compare-lifetimes"
#: The plans compared last (:func:`app.views.compare.data.compared_ref`): what the HTML
#: report and the PNG export add as their compare section.
COMPARED = "compare-compared"

HOW_TO_READ = ("Blue is plan A, red plan B; x is the normalised step (each plan's own order "
               "from 0 to 100 %, so plans with re-runs, which have more steps, line up), y the "
               "bytes live. The tables give B − A: negative bytes and steps mean B holds less.")

_CELL = {"fontFamily": "monospace", "fontSize": 12, "whiteSpace": "normal", "height": "auto"}
#: Text columns: left-aligned, wrapped anywhere (long parameter names, paths, source lines).
_TEXT = {"textAlign": "left", "maxWidth": "240px", "overflowWrap": "anywhere"}


def _table(id_: str, cols: Sequence[tuple[str, str]], page_size: int = 10) -> DataTable:
    # numbers of MiB (× steps) with one set of decimals (the table sorts them as numbers)
    mib: dict[str, object] = {"type": "numeric", "format": {"specifier": ",.3f"}}
    columns = [{"name": n, "id": i, **(mib if "mib" in i else {})} for n, i in cols]
    return DataTable(id=id_, columns=columns,  # type: ignore[arg-type]  # the stubs' Columns
                     page_size=page_size, sort_action="native", style_cell=_CELL,
                     style_cell_conditional=[{"if": {"column_id": c}, **_TEXT}
                                             for c in ("metric", "module", "tensor", "op",
                                                       "source")],
                     style_table={"overflowX": "auto"})


def _body() -> list[Component]:
    pick = [html.Label([f"plan {x}", dcc.Dropdown(id=i, clearable=False)], className="field")
            for x, i in (("A", PICK_A), ("B", PICK_B))]
    return [
        how_to_read("compare", HOW_TO_READ),
        html.Div(pick, className="grid2"),
        html.Div(id=STATUS, className="status"),
        html.Div(dcc.Graph(id=GRAPH, config=GRAPH_CONFIG, figure=blank_figure(),
                           style={"height": "340px"}), style={"minHeight": "340px"}),
        _table(METRICS, METRIC_COLUMNS),
        html.Div(id=NOTE, className="muted"),
        html.H4("Bytes at each plan's peak by module"),
        _table(MODULES, MODULE_COLUMNS),
        html.H4("Largest lifetime changes"),
        _table(LIFETIMES, LIFETIME_COLUMNS),
    ]


def _settings(form: Sequence[Any]) -> PlanSettings | None:
    try:
        return settings_from_form(*form)
    except ConfigError:
        return None


def compare_options(graph: GraphRef | None, plan: str | None, made: JobResult | None,
                    imported: JobResult | None, frontier: dict[str, str] | None,
                    cur_a: str | None, cur_b: str | None, base: str | None,
                    method: str | None, tl: FormNumber, nl: FormNumber, w: FormNumber,
                    al: FormNumber) -> tuple[list[dict[str, str]], list[dict[str, str]],
                                             str, str]:
    """The plans on offer (both dropdowns) and the picks: kept while on offer, else A is
    the compared baseline ("before") and B the plan shown; a newly shown plan (a frontier
    point clicked, a plan made or imported) becomes B."""
    if not graph:
        raise PreventUpdate
    gk = graph["key"]
    s = _settings((method, tl, nl, w, al))

    def mine(r: JobResult | None) -> str | None:
        return r["key"] if r and r.get("graph") == gk else None

    opts = plan_choices(gk, plan, [mine(made)], mine(imported),
                        frontier_keys(gk, frontier, s), s)
    values = [o["value"] for o in opts]
    a = cur_a if cur_a in values else BASE + (base or "eager")
    if a not in values:
        a = values[0]
    shown = PLAN + plan if plan and PLAN + plan in values else None
    if shown is not None and (dash.ctx.triggered_id == ids.PLAN_KEY or cur_b not in values):
        b = shown
    else:
        b = cur_b if cur_b in values else next(v for v in values if v != a)
    return opts, opts, a, b


def _short(label: str) -> str:
    """An option's label without its peak (the figure labels each peak itself)."""
    return label.split(", peak ")[0]


def render_compare(a: str | None, b: str | None, options: Sequence[dict[str, str]] | None,
                   graph: GraphRef | None, method: str | None, tl: FormNumber,
                   nl: FormNumber, w: FormNumber, al: FormNumber
                   ) -> tuple[FigureJSON, list[Row], list[Row], list[Row], str, str,
                              dict[str, str] | None]:
    """The curves, the three tables, the note, a status line for picks A and B, and the
    plans compared (for the exports; ``None`` when they cannot be compared)."""
    if not graph or not a or not b:
        raise PreventUpdate
    labels = {o["value"]: o["label"] for o in options or []}
    s = _settings((method, tl, nl, w, al)) or PlanSettings()
    try:
        ka, kb = (resolve_choice(graph["key"], c, s) for c in (a, b))
        comp = comparison(graph["key"], ka, kb)
        la, lb = _short(labels.get(a, a)), _short(labels.get(b, b))
        fig = fresh(compare_figure.frozen(graph["key"], ka, la, kb, lb))
    except RoamError as e:
        return blank_figure(str(e)), [], [], [], "", f"Cannot compare: {e}", None
    same = " (the same plan twice: no difference)" if ka == kb else ""
    return fig, comp.metrics, comp.modules, comp.lifetimes, comp.note, (
        f"A: {labels.get(a, a)} · B: {labels.get(b, b)}{same}"), compared_ref(
            graph["key"], ka, la, kb, lb)


def register(app: dash.Dash, config: AppConfig) -> None:
    """The card's callbacks (they fire when the card is opened)."""
    lazy.register_lazy(app, CARD, _body)
    form = [State(i, "value") for i in ids.PLAN_FORM]
    app.callback(Output(PICK_A, "options"), Output(PICK_B, "options"),
                 Output(PICK_A, "value"), Output(PICK_B, "value"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.PLAN_RESULT, "data"), Input(ids.IMPORT_RESULT, "data"),
                 Input(FRONTIER_RESULT, "data"), State(PICK_A, "value"),
                 State(PICK_B, "value"), State(ids.BASELINE, "value"),
                 *form)(compare_options)
    app.callback(Output(GRAPH, "figure"), Output(METRICS, "data"), Output(MODULES, "data"),
                 Output(LIFETIMES, "data"), Output(NOTE, "children"),
                 Output(STATUS, "children"), Output(COMPARED, "data"),
                 Input(PICK_A, "value"), Input(PICK_B, "value"),
                 State(PICK_A, "options"), State(ids.GRAPH_KEY, "data"),
                 # fired by the picks compare_options sets when the card opens; not at page
                 # load, where its COMPARED store is present but no pick is
                 *form, prevent_initial_call=True)(render_compare)


def _components(_: PageDefaults) -> list[Component]:
    return [lazy.lazy_card(CARD, "Compare two plans",
                           "open: any two plans of this graph side by side, with the "
                           "difference")]


VIEW = View("compare", "main", _components, register,
            stores=lambda: [lazy.store(COMPARED)])
