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
from app.views import lazy
from app.views.fit.data import sweep
from app.views.fit.figure import fit_figure
from app.views.fit.model import GPU_SIZES_GIB, fit_answer, parse_ints
from app.views.loading.data import zoo_models
from app.views.spec import View
from roam_core.base.errors import ConfigError, RoamError
from roam_core.model.parallel import ParallelSetting
from roam_core.planner.whatfits import FitRow

__all__ = ["CARD", "VIEW", "body", "card", "fit_job", "parallel_choice", "render_fit"]

_logger = logging.getLogger(__name__)

FIT_MODEL = "fit-model"
FIT_BATCHES = "fit-batches"
FIT_SEQS = "fit-seqs"
FIT_MEMORY = "fit-memory-gib"
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
            "recompute up to 5% or 25% extra FLOPs. Where a line crosses a GPU size, the batch "
            "stops fitting. The y axis is logarithmic.", className="muted")]),
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
            kind: str | None, world: int | str | None,
            tl: FormNumber, nl: FormNumber, w: FormNumber, al: FormNumber
            ) -> tuple[dict[str, Any] | dash.NoUpdate, str]:
    """Background: the sweep, with progress (per rank with a data-parallel setting)."""
    if not n or not model:
        raise PreventUpdate
    try:
        par = parallel_choice(kind, world)
        s = settings_from_form("roam", tl, nl, w, al)
        bs = parse_ints(batches, "batch sizes")
        ts: list[int | None] = list(parse_ints(seqs, "sequence lengths")) or [None]
        rows = sweep(model, bs, ts, s, lambda d, t, msg: set_progress((d, t, msg)),
                     parallel=par)
    except RoamError as e:
        return dash.no_update, f"Sweep failed: {e}"
    except Exception as e:  # a trace/planner failure must reach the user, not kill the app
        _logger.exception("fit sweep failed")
        return dash.no_update, f"Sweep failed: {type(e).__name__}: {e}"
    where = f" per rank ({par.describe()})" if par.active else ""
    return ({"model": model, "rows": [r.to_dict() for r in rows], "parallel": where},
            f"swept {model}{where}: {len(rows)} configurations")


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
    """Chart and answer of the last sweep, at the user's memory size."""
    rows = [FitRow.from_dict(d) for d in (result or {}).get("rows") or []]
    try:
        mem = float(memory) if memory not in (None, "") else None
    except (TypeError, ValueError):
        mem = None
    if mem is not None and mem <= 0:
        mem = None
    answer: list[Component] = [html.Li(x) for x in fit_answer(rows, mem or GPU_SIZES_GIB[0])]
    if rows:
        where = (result or {}).get("parallel") or ""
        answer.insert(0, html.Li(f"Largest batch that fits {mem or GPU_SIZES_GIB[0]:g} GiB"
                                 f"{where}:",
                                 style={"fontWeight": "bold", "listStyle": "none"}))
    return fit_figure(rows, mem), answer


def register(app: dash.Dash, config: AppConfig) -> None:
    """Register the What-fits callbacks."""
    lazy.register_lazy(app, CARD, lambda: body(zoo_models()))
    settings = [State(i, "value") for i in ids.PLAN_FORM[1:]]  # no method: roam's sweep
    app.callback(
        Output(FIT_RESULT, "data"), Output(FIT_STATUS, "children"),
        Input(FIT_BTN, "n_clicks"), State(FIT_MODEL, "value"), State(FIT_BATCHES, "value"),
        State(FIT_SEQS, "value"), State(FIT_PARALLEL, "value"), State(FIT_WORLD, "value"),
        *settings,
        background=True, prevent_initial_call=True, interval=500,
        running=[(Output(FIT_BTN, "disabled"), True, False),
                 (Output(FIT_CANCEL, "disabled"), False, True)],
        progress=[Output(FIT_PROGRESS, "value"), Output(FIT_PROGRESS, "max"),
                  Output(FIT_PROGRESS_TEXT, "children")],
        cancel=[Input(FIT_CANCEL, "n_clicks")])(fit_job)
    app.callback(Output(FIT_GRAPH, "figure"), Output(FIT_ANSWER, "children"),
                 Input(FIT_RESULT, "data"), Input(FIT_MEMORY, "value"))(render_fit)


VIEW = View("fit", "main", lambda _: [card()], register, stores=stores)
