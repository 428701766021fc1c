"""The "Verify on GPU/CPU" card: which devices may run this plan (and why not), the run as a
background job, and its stored report next to the plan."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import dash
from dash import Input, Output, State, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.state import get_graph
from app.core.store_types import GraphRef
from app.views import running
from app.views.components import card
from app.views.lazy import store
from app.views.spec import PageDefaults, View
from app.views.verify import data

__all__ = ["VIEW", "render_verify", "verify_buttons", "verify_card_state", "verify_children",
           "verify_job", "verify_label", "verify_label_text", "verify_options"]

_logger = logging.getLogger(__name__)


def verify_label_text(device: str | None) -> str:
    """The Verify button says where it runs."""
    return f"Verify on {'GPU' if device == 'cuda' else 'CPU'}"


def verify_children(passed: bool | None, rows: Sequence[tuple[str, str]]) -> list[Component]:
    """The Verify result: a pass/fail badge and the report table (a hint when empty); a pass
    that proves little (a zero loss) says so in its badge."""
    if passed is None:
        return [html.Div("not verified yet: press Verify", className="muted")]
    weak = passed and any(k == "what the pass proves" for k, _ in rows)
    badge = html.Div("PASS, but it proves little (zero loss: see below)" if weak else
                     "PASS" if passed else "FAIL", className="verify-badge",
                     style={"fontWeight": "bold", "margin": "6px 0",
                            "color": "#b8860b" if weak else "#2a7a2a" if passed
                            else "#c44e52"})
    return [badge, html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in rows],
                              className="verify-table", style={"fontSize": "12px"})]


def _verify_card(_: PageDefaults) -> list[Component]:
    """"Verify on GPU/CPU": run the plan for real (options are filled by a callback)."""
    return [card("Verify on GPU/CPU",
                 html.Div("Runs the training step eagerly and as the plan's one-arena "
                          "replay, and compares them.", className="muted"),
                 dcc.RadioItems(id=ids.VERIFY_DEVICE, options=[], value=None, inline=True),
                 html.Div(id=ids.VERIFY_NOTE, className="muted"),
                 html.Div([html.Button(verify_label_text(None), id=ids.VERIFY_BTN,
                                       disabled=True),
                           html.Button("Cancel", id=ids.VERIFY_CANCEL_BTN, disabled=True)],
                          className="buttons"),
                 html.Div(id=ids.VERIFY_STATUS, className="status"),
                 html.Div(verify_children(None, []), id=ids.VERIFY_RESULT),
                 id_=ids.VERIFY_CARD)]


def verify_options(graph: GraphRef | None, plan: str | None, current: str | None
                   ) -> tuple[list[dict[str, str | bool]], str | None, str, bool]:
    """Devices that may verify this plan (disabled ones with the reason shown)."""
    o = data.verify_options(graph.get("key") if graph else None, plan, current)
    return o["options"], o["value"], o["note"], o["disabled"]


def verify_card_state(graph: GraphRef | None, plan: str | None, current: str | None,
                      running_jobs: dict[str, bool] | None
                      ) -> tuple[list[dict[str, str | bool]], str | dash.NoUpdate | None, str,
                                 bool, str, list[Component], bool, bool]:
    """Everything the card shows for a graph and plan, in one answer: device options,
    device (left as it is when unchanged, so nothing chained on it fires), note, whether
    Verify is off, the button's label, the stored report, and the buttons' ``disabled``.

    The page's first load used to ask four callbacks in a chain (options -> label, report,
    buttons): three more requests, each answered with a redraw, before the views settled.
    """
    options, value, note, off = verify_options(graph, plan, current)
    running_off = verify_buttons(running_jobs, off)
    return (options, dash.no_update if value == current else value, note, off,
            verify_label_text(value), render_verify(None, graph, plan, value), *running_off)


def verify_label(device: str | None) -> str:
    """The button says where it runs."""
    return verify_label_text(device)


def verify_job(n: int | None, graph: GraphRef | None, plan: str | None, device: str | None
               ) -> tuple[dict[str, str] | dash.NoUpdate, str]:
    """Background: run the plan for real (torch is imported in the job process only)."""
    if not n or not graph or not plan or not device:
        raise PreventUpdate
    try:
        res = data.run_verify(graph["key"], plan, device)
    except Exception as e:  # an executor failure must reach the user, not kill the app
        _logger.exception("verify failed")
        return dash.no_update, f"Verify failed: {type(e).__name__}: {e}"
    ok = res["report"]["numerics_ok"]
    how = "FAIL" if not ok else ("pass, but the loss is 0: it proves little"
                                 if data.zero_loss(res["report"]) else "pass")
    msg = f"verified {graph.get('name', '')} on {device}: {how} ({res['wall_time_s']:.1f} s)"
    return {"key": res["key"], "device": device}, msg


def render_verify(_done: dict[str, str] | None, graph: GraphRef | None, plan: str | None,
                  device: str | None) -> list[Component]:
    """The stored report of this plan on this device, next to the plan."""
    res = data.cached_result(graph.get("key") if graph else None, plan, device)
    if res is None:
        return verify_children(None, [])
    setting = get_graph(graph["key"]).origin.get("setting") if graph else None
    return verify_children(*data.report_rows(res["report"], setting))


def verify_buttons(running_jobs: dict[str, bool] | None, verify_off: bool | None
                   ) -> tuple[bool, bool]:
    """Verify / Cancel ``disabled`` from the ``RUNNING`` store and the device check."""
    return running.buttons(running_jobs, verify_off, None)[4:]


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Verify card's callbacks (CUDA is probed once, now, in a subprocess: no torch in
    the server)."""
    data.cuda_status()
    gk, pk = State(ids.GRAPH_KEY, "data"), State(ids.PLAN_KEY, "data")
    app.callback(Output(ids.VERIFY_DEVICE, "options"), Output(ids.VERIFY_DEVICE, "value"),
                 Output(ids.VERIFY_NOTE, "children"), Output(ids.VERIFY_OFF, "data"),
                 Output(ids.VERIFY_BTN, "children"), Output(ids.VERIFY_RESULT, "children"),
                 Output(ids.VERIFY_BTN, "disabled"), Output(ids.VERIFY_CANCEL_BTN, "disabled"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 State(ids.VERIFY_DEVICE, "value"), State(ids.RUNNING, "data"),
                 )(verify_card_state)
    # the user's device pick (verify_card_state answers for a new graph or plan)
    app.callback(Output(ids.VERIFY_BTN, "children", allow_duplicate=True),
                 Input(ids.VERIFY_DEVICE, "value"), prevent_initial_call=True)(verify_label)
    app.callback(
        Output(ids.VERIFY_DONE, "data"), Output(ids.VERIFY_STATUS, "children"),
        Input(ids.VERIFY_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"),
        State(ids.PLAN_KEY, "data"), State(ids.VERIFY_DEVICE, "value"),
        background=True, prevent_initial_call=True, interval=500,
        running=[(Output(ids.RUNNING, "data"), running.running_patch("verify", True),
                  running.running_patch("verify", False))],
        cancel=[Input(ids.VERIFY_CANCEL_BTN, "n_clicks")])(verify_job)
    app.callback(Output(ids.VERIFY_STATUS, "children", allow_duplicate=True),
                 Input(ids.VERIFY_CANCEL_BTN, "n_clicks"),
                 prevent_initial_call=True)(running.cancelled)
    app.callback(Output(ids.VERIFY_RESULT, "children", allow_duplicate=True),
                 Input(ids.VERIFY_DONE, "data"), gk, pk, Input(ids.VERIFY_DEVICE, "value"),
                 prevent_initial_call=True)(render_verify)
    # one callback per job: Dash holds a callback back while any of its inputs may still be
    # changed by a running chain, so the Plan buttons must not wait on the verify inputs
    app.callback(Output(ids.VERIFY_BTN, "disabled", allow_duplicate=True),
                 Output(ids.VERIFY_CANCEL_BTN, "disabled", allow_duplicate=True),
                 Input(ids.RUNNING, "data"), State(ids.VERIFY_OFF, "data"),
                 prevent_initial_call=True)(verify_buttons)


def _stores() -> list[dcc.Store]:
    return [store(ids.VERIFY_DONE), store(ids.VERIFY_OFF, True)]


VIEW = View("verify", "side", _verify_card, register, stores=_stores)
