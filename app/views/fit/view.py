"""The What-fits card: closed until opened; then the sweep's controls, answer and chart.

"Sweep" runs :func:`app.views.fit.data.sweep` as a background job (torch is imported in the
job process only); the chart marks common GPU sizes and the user's, and answers "largest
batch that fits".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.analysis.settings import FormNumber, settings_from_form
from app.core import ids
from app.core.config import AppConfig
from app.services import cancel_requests
from app.views import lazy
from app.views.casts import merge_casts_choice, merge_casts_field, merge_casts_state, note_id
from app.views.fit.data import sweep, sweep_rows
from app.views.fit.figure import fit_figure
from app.views.fit.model import GPU_SIZES_GIB, fit_answer, parse_ints
from app.views.loading.data import zoo_models
from app.views.spec import View
from roam_core.base.catalog import default_precision
from roam_core.base.errors import ConfigError, RoamError
from roam_core.model.parallel import PARALLEL_PRECISIONS, ParallelSetting

__all__ = ["CARD", "VIEW", "body", "cancel_fit", "card", "fit_job", "merge_casts_for",
           "parallel_choice", "render_fit"]

_logger = logging.getLogger(__name__)

FIT_MODEL = "fit-model"
FIT_BATCHES = "fit-batches"
FIT_SEQS = "fit-seqs"
FIT_MEMORY = "fit-memory-gib"
FIT_PRECISION = "fit-precision"
#: The precision dropdown's default: bf16-mixed for transformers, fp32 otherwise.
AUTO = "auto"
FIT_MERGE = "fit-merge-casts"  # checklist: ["merge"] plans roam's rows with merged casts
FIT_PARALLEL = "fit-parallel"
FIT_WORLD = "fit-world-size"
FIT_BTN = "fit-btn"
FIT_CANCEL = "fit-cancel-btn"
FIT_PROGRESS = "fit-progress"
FIT_PROGRESS_TEXT = "fit-progress-text"
FIT_STATUS = "fit-status"
FIT_RESULT = "fit-result"  # store: {"rows": [FitRow dicts], "model": str, "parallel": str}

#: World sizes offered (ranks; 1: one device).
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64)
FIT_GRAPH = "fit-graph"
FIT_ANSWER = "fit-answer"

CARD = "fit-card"


def card() -> html.Div:
    """The What-fits card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "What fits: peak against batch size",
                          "open: sweep a zoo model's batch sizes against GPU memory sizes")


def body(models: Sequence[str]) -> list[Component]:
    """The What-fits controls, answer and chart (mounted when opened)."""
    models = list(models)
    default = "tiny_gpt" if "tiny_gpt" in models else (models[0] if models else None)
    return [
        html.Details([html.Summary("How to read this"), html.Div(
            "Each line is the memory one training step needs at each batch size: PyTorch "
            "eager (the caching allocator's reserved bytes), roam, and roam allowed to "
            "recompute up to 5% or 25% extra time (estimated per op on the device profile: "
            "compute or memory bandwidth, whichever is slower). Where a line "
            "crosses a GPU size, the batch stops fitting. The y axis is logarithmic. "
            "Transformers are traced in bf16 mixed precision unless you pick another. "
            "\"Merge autocast's repeated casts\" (mixed precisions only) plans roam's lines "
            "for the step with each activation cast once; eager's line stays the step as "
            "PyTorch runs it, every copy made.",
            className="muted")]),
        html.Div([
            html.Label(["model", dcc.Dropdown(id=FIT_MODEL, options=models, value=default,
                                              clearable=False,
                                              placeholder="no zoo (torch missing)")],
                       className="field"),
            html.Label(["batch sizes", dcc.Input(id=FIT_BATCHES, type="text", value="1 2 4",
                                                 debounce=True)], className="field"),
            html.Label(["sequence lengths (blank: the model's)",
                        dcc.Input(id=FIT_SEQS, type="text", value="", debounce=True)],
                       className="field"),
            html.Label(["your GPU (GiB)", dcc.Input(id=FIT_MEMORY, type="number", value=16,
                                                    min=0.001, step="any", debounce=True)],
                       className="field"),
            html.Label(["precision", dcc.Dropdown(
                id=FIT_PRECISION, clearable=False, value=AUTO,
                options=[{"label": "bf16-mixed for transformers, else fp32", "value": AUTO},
                         *["fp32", "bf16-mixed", "bf16", "fp16-mixed"]])],
                className="field"),
            merge_casts_field(FIT_MERGE, default_precision(default)),  # "auto", one device
            html.Label(["data parallel (memory per rank)",
                        dcc.Dropdown(id=FIT_PARALLEL, clearable=False, value="none",
                                     options=[{"label": "none (one device)", "value": "none"},
                                              {"label": "FSDP2 (fully_shard per block)",
                                               "value": "fsdp"},
                                              {"label": "DDP", "value": "ddp"}])],
                       className="field"),
            html.Label(["world size (ranks)",
                        dcc.Dropdown(id=FIT_WORLD, options=list(WORLD_SIZES), value=1,
                                     clearable=False)], className="field"),
        ], className="grid2"),
        html.Div([html.Button("Sweep", id=FIT_BTN, className="primary", disabled=not models),
                  html.Button("Cancel", id=FIT_CANCEL, disabled=True)], className="buttons"),
        html.Progress(id=FIT_PROGRESS, value="0", max="1"),
        html.Div(id=FIT_PROGRESS_TEXT, className="status"),
        html.Div(id=FIT_STATUS, className="status"),
        html.Ul(id=FIT_ANSWER, className="fit-answer"),
        dcc.Graph(id=FIT_GRAPH, figure=fit_figure([]), config={"displaylogo": False},
                  style={"height": "440px"}),
    ]


def stores() -> list[dcc.Store]:
    """The view's stores."""
    return [lazy.store(FIT_RESULT)]


def fit_job(set_progress: Callable[[tuple[int, int, str]], None], n: int | None,
            model: str | None, batches: str | float | None, seqs: str | float | None,
            precision: str | None, kind: str | None, world: int | str | None,
            tl: FormNumber, nl: FormNumber, w: FormNumber, al: FormNumber,
            session: str | None = None, merge: Sequence[str] | None = None,
            ) -> tuple[dict[str, Any] | dash.NoUpdate, str]:
    """Background: the sweep, with progress (``precision`` ``"auto"``: bf16-mixed for
    transformers, fp32 otherwise, and the status says so; per rank with a data-parallel
    setting, where ``"auto"`` is fp32 when the rank does not trace in bf16-mixed: DDP).
    ``merge`` ticked (autocast precisions only): roam's rows plan the step with autocast's
    repeated casts made once, eager's stay the step as eager runs it (``roam fit
    --merge-casts``).

    Cancel is cooperative (:func:`cancel_fit`): the sweep stops between configurations and
    keeps the rows measured.
    """
    if not n or not model:
        raise PreventUpdate
    cancel = cancel_requests.cancel_flag(session, n, "fit") if session else None
    try:
        par = parallel_choice(kind, world)
        prec, how = _precision_choice(model, precision, par)
        merged = merge_casts_choice(merge, prec)
        s = settings_from_form("roam", tl, nl, w, al)
        bs = parse_ints(batches, "batch sizes")
        ts: list[int | None] = list(parse_ints(seqs, "sequence lengths")) or [None]
        done = sweep(model, bs, ts, s, lambda d, t, msg: set_progress((d, t, msg)),
                     cancel=cancel, precision=prec, parallel=par, merge_casts=merged)
    except RoamError as e:
        return dash.no_update, f"Sweep failed: {e}"
    except Exception as e:  # a trace/planner failure must reach the user, not kill the app
        _logger.exception("fit sweep failed")
        return dash.no_update, f"Sweep failed: {type(e).__name__}: {e}"
    where = f" per rank ({par.describe()})" if par.active else ""
    how += ", casts merged for roam" if merged else ""
    out = {"model": model, "precision": prec, "settings": s.as_dict(),
           "rows": [r.to_dict() for r in done.rows], "parallel": par.to_dict(),
           "where": where + (", roam with repeated casts made once" if merged else ""),
           "merge_casts": merged}
    if done.cancelled:
        return out, (f"cancelled: {len(done.rows)} of {done.total} configurations measured "
                     "(kept; the answer uses every configuration measured so far)")
    return out, f"swept {model}{where} in {how}: {len(done.rows)} configurations"


def _precision_choice(model: str, precision: str | None,
                      par: ParallelSetting) -> tuple[str, str]:
    """The sweep's precision and how the status names it (``auto``: the model's default, or
    fp32 where a rank does not trace in it)."""
    if precision not in (None, AUTO):
        return str(precision), str(precision)
    prec = default_precision(model)
    if par.active and prec not in PARALLEL_PRECISIONS[par.kind]:
        return "fp32", f"fp32 ({par.kind} ranks trace in fp32 only)"
    return prec, f"{prec} (the default for {'transformers' if prec != 'fp32' else 'this model'})"


def merge_casts_for(model: str | None, precision: str | None, kind: str | None,
                    world: int | str | None, value: Sequence[str] | None
                    ) -> tuple[list[dict[str, Any]], list[str], str]:
    """The merge-casts checkbox for the precision the sweep would trace in (``auto``
    resolved for the model and data-parallel setting)."""
    try:
        prec = _precision_choice(model or "", precision, parallel_choice(kind, world))[0]
    except RoamError:  # a world size without a data parallelism: the sweep says so
        prec = precision if precision not in (None, AUTO) else default_precision(model)
    return merge_casts_state(prec, value)


def cancel_fit(n: int | None, session: str | None, run: int | None) -> tuple[str, str]:
    """Cancel pressed: ask this page's sweep to stop after the configuration it measures."""
    if not n or not session or not run:
        raise PreventUpdate
    cancel_requests.request_cancel(session, run, "fit")
    return ("cancelling: the sweep stops after the configuration it is measuring and keeps "
            "the rows measured…", "cancelling…")


def parallel_choice(kind: str | None, world: int | str | None) -> ParallelSetting:
    """The setting of the two selectors; a world size above 1 needs FSDP or DDP.

    >>> parallel_choice("fsdp", 8).describe()
    'fsdp, world size 8, reshard after forward, wrap blocks'
    >>> parallel_choice("none", 1).active
    False
    """
    w = int(world or 1)
    if (kind or "none") == "none":
        if w != 1:
            raise ConfigError(f"world size {w}: choose FSDP2 or DDP as the data parallelism")
        return ParallelSetting()
    return ParallelSetting(str(kind), w)


def render_fit(result: Mapping[str, Any] | None, memory: float | str | None
               ) -> tuple[go.Figure, list[Component]]:
    """Chart and answer of every configuration measured for the last sweep's model, at the
    user's memory size."""
    rows = sweep_rows(result)
    try:
        mem = float(memory) if memory not in (None, "") else None
    except (TypeError, ValueError):
        mem = None
    if mem is not None and mem <= 0:
        mem = None
    answer: list[Component] = [html.Li(x) for x in fit_answer(rows, mem or GPU_SIZES_GIB[0])]
    if rows:
        where = (result or {}).get("where") or ""
        answer.insert(0, html.Li(f"Largest batch that fits {mem or GPU_SIZES_GIB[0]:g} GiB"
                                 f"{where} (of the {len(rows)} configurations of "
                                 f"{(result or {}).get('model', 'this model')} measured so far):",
                                 style={"fontWeight": "bold", "listStyle": "none"}))
    return fit_figure(rows, mem), answer


def register(app: dash.Dash, config: AppConfig) -> None:
    """Register the What-fits callbacks."""
    lazy.register_lazy(app, CARD, lambda: body(zoo_models()))
    settings = [State(i, "value") for i in ids.PLAN_FORM[1:]]  # no method: roam's sweep
    app.callback(
        Output(FIT_RESULT, "data"), Output(FIT_STATUS, "children"),
        Input(FIT_BTN, "n_clicks"), State(FIT_MODEL, "value"), State(FIT_BATCHES, "value"),
        State(FIT_SEQS, "value"), State(FIT_PRECISION, "value"), State(FIT_PARALLEL, "value"),
        State(FIT_WORLD, "value"), *settings, State(ids.SESSION, "data"),
        State(FIT_MERGE, "value"),
        background=True, prevent_initial_call=True, interval=500,
        running=[(Output(FIT_BTN, "disabled"), True, False),
                 (Output(FIT_CANCEL, "disabled"), False, True)],
        progress=[Output(FIT_PROGRESS, "value"), Output(FIT_PROGRESS, "max"),
                  Output(FIT_PROGRESS_TEXT, "children")])(fit_job)
    app.callback(Output(FIT_STATUS, "children", allow_duplicate=True),
                 Output(FIT_PROGRESS_TEXT, "children", allow_duplicate=True),
                 Input(FIT_CANCEL, "n_clicks"), State(ids.SESSION, "data"),
                 State(FIT_BTN, "n_clicks"), prevent_initial_call=True)(cancel_fit)
    app.callback(Output(FIT_GRAPH, "figure"), Output(FIT_ANSWER, "children"),
                 Input(FIT_RESULT, "data"), Input(FIT_MEMORY, "value"))(render_fit)
    app.callback(Output(FIT_MERGE, "options"), Output(FIT_MERGE, "value"),
                 Output(note_id(FIT_MERGE), "children"), Input(FIT_MODEL, "value"),
                 Input(FIT_PRECISION, "value"), Input(FIT_PARALLEL, "value"),
                 Input(FIT_WORLD, "value"), State(FIT_MERGE, "value"),
                 prevent_initial_call=True)(merge_casts_for)  # the body starts in step


VIEW = View("fit", "main", lambda _: [card()], register, stores=stores)
