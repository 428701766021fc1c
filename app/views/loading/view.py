"""The Graph card: a sample, an uploaded graph file, or a zoo model or a Hugging Face model
from a dropped ``config.json`` traced in a background job (in a chosen precision and
attention kernel) becomes the page's graph (``GRAPH_KEY``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import dash
from dash import Input, Output, State, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import DEFAULT_CONFIG, AppConfig
from app.core.state import get_graph
from app.core.store_types import GraphRef
from app.services.uploads import read_upload
from app.views import running
from app.views.callback_tools import bind_config
from app.views.casts import merge_casts_choice, merge_casts_field, merge_casts_state, note_id
from app.views.components import card, number_field
from app.views.lazy import lazy_section, register_lazy, store
from app.views.loading import data
from app.views.spec import PageDefaults, View
from app.views.uploads import (
    UploadRef,
    register_upload,
    result_id,
    upload_ref,
    upload_store,
    upload_zone,
)
from roam_core.base.errors import RoamError

__all__ = ["VIEW", "hf_config_dropped", "load_graph", "sample_pick_for", "trace_buttons",
           "trace_job"]


#: The trace panel (a lazy section of the Graph card, :func:`app.views.lazy.lazy_section`).
ZOO_SECTION = "zoo"


def _loading_card(defaults: PageDefaults) -> html.Div:
    return card(
        "Graph",
        dcc.Dropdown(id=ids.SAMPLE_PICK, options=list(defaults.sample_options),
                     value=defaults.sample_value, clearable=False,
                     placeholder="pick a sample graph"),
        upload_zone(ids.UPLOAD, "graph", defaults.max_upload_bytes, ids.LOAD_STATUS, [
            f"Drop a graph (.json / .json.gz, ≤ {defaults.max_upload_bytes // 2**20} MiB) or ",
            html.A("browse")], accept=".json,.gz,.json.gz"),
        html.Div(defaults.load_message, id=ids.LOAD_STATUS, className="status"),
        lazy_section(ZOO_SECTION, "Trace a zoo or Hugging Face model", "zoo"),
    )


def _zoo_body(zoo: Sequence[str]) -> list[Component]:
    """The trace panel's controls, mounted when it is first opened: the page's first render
    need not build its six dropdowns (each builds a search index when mounted)."""
    zoo = list(zoo)
    return [
        dcc.Dropdown(id=ids.ZOO_MODEL, options=zoo, value=zoo[0] if zoo else None,
                     placeholder="no zoo (torch missing)" if not zoo else None),
        dcc.Upload(id=ids.HF_UPLOAD, className="upload", children=html.Div([
            "Drop a Hugging Face config.json (no weights needed) or ", html.A("browse")])),
        html.Label(["task", dcc.Dropdown(id=ids.HF_TASK, clearable=False,
                                         options=list(data.HF_TASKS),
                                         value="causal-lm")], className="field"),
        html.Div(id=ids.HF_STATUS, className="status"),
        number_field(ids.ZOO_BATCH, "batch", 1, min_=1),
        number_field(ids.ZOO_SEQ, "sequence length (0 = default)", 0),
        html.Label(["optimizer", dcc.Dropdown(id=ids.ZOO_OPTIMIZER, clearable=False,
                                              options=["adamw", "adam", "sgd"],
                                              value="adamw")], className="field"),
        html.Label(["setting", dcc.Dropdown(id=ids.ZOO_SETTING, clearable=False,
                                            options=["steady", "roam"],
                                            value="steady")], className="field"),
        html.Label(["precision", dcc.Dropdown(id=ids.ZOO_PRECISION, clearable=False,
                                              options=list(data.PRECISIONS),
                                              value="fp32")], className="field"),
        html.Label(["attention", dcc.Dropdown(
            id=ids.ZOO_ATTENTION, clearable=False,
            options=["sdpa", "math", "flash", "efficient"], value="sdpa")],
            className="field"),
        merge_casts_field(ids.ZOO_MERGE_CASTS, "fp32"),
        html.Div([html.Button("Trace", id=ids.ZOO_TRACE_BTN, disabled=not zoo),
                  html.Button("Cancel", id=ids.ZOO_CANCEL_BTN, disabled=True)],
                 className="buttons"),
        html.Div(id=ids.ZOO_PROGRESS, className="status"),
        html.Div(id=ids.ZOO_STATUS, className="status"),
    ]


def load_graph(sample: str | None, upload: UploadRef | None, trace: GraphRef | None
               ) -> tuple[GraphRef | dash.NoUpdate, str]:
    """Sample pick, uploaded file (streamed to the server, :mod:`app.views.uploads`) or
    finished zoo trace -> graph key."""
    trig = dash.ctx.triggered_id
    try:
        if trig == result_id(ids.UPLOAD):
            token, filename = upload_ref(upload)
            key = data.graph_from_upload(read_upload(token), filename)
        elif trig == ids.TRACE_RESULT and trace and trace.get("key"):
            key = trace["key"]
        elif trig == ids.SAMPLE_PICK and sample:
            key = data.load_choice(sample)
        else:
            raise PreventUpdate
    except RoamError as e:
        return dash.no_update, f"Error: {e}"
    g = get_graph(key)
    return {"key": key, "name": g.name}, f"loaded {g.name}: {len(g.ops)} ops"


def sample_pick_for(graph: GraphRef | None, current: str | None,
                    options: Sequence[dict[str, str]] | None
                    ) -> tuple[dash.NoUpdate | None, str]:
    """The sample dropdown follows the loaded graph: it keeps a sample's value, and clears
    (naming the graph in its placeholder) once an upload or a trace replaced it."""
    if not graph:
        raise PreventUpdate
    name = graph.get("name", "")
    values = {o["value"] for o in options or ()}
    if current in values and current is not None and _choice_name(current) == name:
        return dash.no_update, "pick a sample graph"
    return None, f"{name} (loaded; not a sample)"


def _choice_name(value: str) -> str:
    """Graph name of a dropdown value (``file:mlp-b8-steady.json.gz`` -> ``mlp-b8-steady``)."""
    return value.partition(":")[2].split(".")[0]


def hf_config_dropped(contents: str | None, filename: str | None,
                      options: Sequence[Any] | None, *, config: AppConfig = DEFAULT_CONFIG
                      ) -> tuple[dict[str, Any] | None, str, list[Any], str | dash.NoUpdate]:
    """A dropped ``config.json``: stored, and offered (and picked) in the model dropdown."""
    if not contents:
        raise PreventUpdate
    rest = [o for o in options or () if (o.get("value") if isinstance(o, dict) else o)
            != data.HF_CHOICE]
    try:
        cfg = data.hf_config_from_upload(contents, filename, config.max_upload_bytes)
    except RoamError as e:
        return None, f"Error: {e}", rest, dash.no_update
    label = f"{cfg['model_type']} ({filename or 'config.json'})"
    return (cfg, f"config: {label}; pick the task, then Trace",
            [{"label": f"Hugging Face: {label}", "value": data.HF_CHOICE}, *rest],
            data.HF_CHOICE)


def trace_job(set_progress: Callable[[tuple[str]], None], n: int | None, model: str,
              batch: int | None, seq: int | None, optimizer: str, setting: str,
              precision: str | None = "fp32", attention: str | None = "sdpa",
              merge: Sequence[str] | None = None, hf_config: dict[str, Any] | None = None,
              hf_task: str | None = "causal-lm"
              ) -> tuple[dict[str, str] | dash.NoUpdate, str]:
    """Background: trace a zoo model, or the dropped Hugging Face config, server-side (a
    status line ticks while it runs; ``merge``: the merge-casts checkbox's value)."""
    if not n or not model:
        raise PreventUpdate
    hf = model == data.HF_CHOICE
    if hf and not hf_config:
        return dash.no_update, "Trace failed: drop a Hugging Face config.json first"
    try:
        merged = merge_casts_choice(merge, precision or "fp32")
    except RoamError as e:
        return dash.no_update, f"Trace failed: {e}"
    name = str(hf_config.get("model_type")) if hf and hf_config else model
    what = (f"tracing {name} (batch {int(batch or 1)}, {precision or 'fp32'}"
            + (", casts merged)" if merged else ")"))
    done = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not done.wait(1.0):
            set_progress((f"{what}: {time.monotonic() - t0:.0f} s (large models take a "
                          "minute or more)",))

    set_progress((f"{what}…",))
    threading.Thread(target=tick, name="roam-trace-status", daemon=True).start()
    try:
        args = (int(batch or 1), int(seq or 0) or None, optimizer, setting,
                precision or "fp32", attention or None, merged)
        key = (data.trace_hf_graph(hf_config or {}, hf_task or "causal-lm", *args) if hf
               else data.trace_zoo_graph(model, *args))
    except Exception as e:  # a trace failure must not kill the app
        return dash.no_update, f"Trace failed: {type(e).__name__}: {e}"
    finally:
        done.set()
    set_progress((f"traced in {time.monotonic() - t0:.1f} s",))
    return {"key": key}, f"traced {name}"


def trace_buttons(running_jobs: dict[str, bool] | None, zoo: Sequence[str] | None
                  ) -> tuple[bool, bool]:
    """Trace / Cancel ``disabled`` from the ``RUNNING`` store (Trace off without a zoo)."""
    return running.buttons(running_jobs, None, zoo)[2:4]


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Graph card's callbacks."""
    register_upload(app, "graph", config.max_upload_bytes)
    register_lazy(app, ZOO_SECTION, lambda: _zoo_body(data.zoo_models()))
    app.callback(Output(ids.GRAPH_KEY, "data"), Output(ids.LOAD_STATUS, "children"),
                 Input(ids.SAMPLE_PICK, "value"), Input(result_id(ids.UPLOAD), "data"),
                 Input(ids.TRACE_RESULT, "data"), prevent_initial_call=True)(load_graph)
    app.callback(Output(ids.SAMPLE_PICK, "value", allow_duplicate=True),
                 Output(ids.SAMPLE_PICK, "placeholder"), Input(ids.GRAPH_KEY, "data"),
                 State(ids.SAMPLE_PICK, "value"), State(ids.SAMPLE_PICK, "options"),
                 prevent_initial_call=True)(sample_pick_for)
    app.callback(
        Output(ids.TRACE_RESULT, "data"), Output(ids.ZOO_STATUS, "children"),
        Input(ids.ZOO_TRACE_BTN, "n_clicks"),
        *[State(i, "value") for i in (ids.ZOO_MODEL, ids.ZOO_BATCH, ids.ZOO_SEQ,
                                      ids.ZOO_OPTIMIZER, ids.ZOO_SETTING, ids.ZOO_PRECISION,
                                      ids.ZOO_ATTENTION, ids.ZOO_MERGE_CASTS)],
        State(ids.HF_CONFIG, "data"), State(ids.HF_TASK, "value"),
        background=True, prevent_initial_call=True, interval=500,
        running=[(Output(ids.RUNNING, "data"), running.running_patch("trace", True),
                  running.running_patch("trace", False))],
        progress=[Output(ids.ZOO_PROGRESS, "children")],
        cancel=[Input(ids.ZOO_CANCEL_BTN, "n_clicks")])(trace_job)
    app.callback(Output(ids.ZOO_STATUS, "children", allow_duplicate=True),
                 Input(ids.ZOO_CANCEL_BTN, "n_clicks"),
                 prevent_initial_call=True)(running.cancelled)
    app.callback(Output(ids.HF_CONFIG, "data"), Output(ids.HF_STATUS, "children"),
                 Output(ids.ZOO_MODEL, "options"), Output(ids.ZOO_MODEL, "value"),
                 Input(ids.HF_UPLOAD, "contents"), State(ids.HF_UPLOAD, "filename"),
                 State(ids.ZOO_MODEL, "options"),
                 prevent_initial_call=True)(bind_config(hf_config_dropped, config))
    app.callback(Output(ids.ZOO_TRACE_BTN, "disabled"), Output(ids.ZOO_CANCEL_BTN, "disabled"),
                 Input(ids.RUNNING, "data"), State(ids.ZOO_MODEL, "options"),
                 prevent_initial_call=True)(trace_buttons)
    app.callback(Output(ids.ZOO_MERGE_CASTS, "options"), Output(ids.ZOO_MERGE_CASTS, "value"),
                 Output(note_id(ids.ZOO_MERGE_CASTS), "children"),
                 Input(ids.ZOO_PRECISION, "value"), State(ids.ZOO_MERGE_CASTS, "value"),
                 prevent_initial_call=True)(merge_casts_state)  # the layout starts in step


VIEW = View("loading", "side", lambda defaults: [_loading_card(defaults)], register,
            stores=lambda: [store(ids.TRACE_RESULT), store(ids.HF_CONFIG),
                            upload_store(ids.UPLOAD)])
