"""What fits: peak memory against batch size (and sequence length) for a zoo model.

One background job traces the model at each batch size / sequence length (torch is
imported in the job process only), measures eager reserved, roam and roam with
recomputation (<= 5 % and <= 25 % extra FLOPs) with
:func:`roam_core.planner.whatfits.fit_row`, and caches every row (model + configuration +
planner settings), so a wider sweep re-uses what was measured.  The chart marks common GPU
sizes and a user-given one and answers "largest batch that fits".
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from app import ids, lazy, services, state
from app.analysis import fmt_bytes
from app.planning import PlanSettings, settings_from_form
from roam_core.base.errors import ConfigError, RoamError
from roam_core.planner.whatfits import FIT_METHODS, FitRow, largest_fitting, method_label

__all__ = ["GPU_SIZES_GIB", "card", "fit_answer", "fit_figure", "parse_ints", "register",
           "sweep"]

_logger = logging.getLogger(__name__)

FIT_MODEL = "fit-model"
FIT_BATCHES = "fit-batches"
FIT_SEQS = "fit-seqs"
FIT_MEMORY = "fit-memory-gib"
FIT_BTN = "fit-btn"
FIT_CANCEL = "fit-cancel-btn"
FIT_PROGRESS = "fit-progress"
FIT_PROGRESS_TEXT = "fit-progress-text"
FIT_STATUS = "fit-status"
FIT_RESULT = "fit-result"  # store: {"rows": [FitRow dicts], "model": str}
FIT_GRAPH = "fit-graph"
FIT_ANSWER = "fit-answer"

#: Horizontal lines: common accelerator memory sizes (GiB).
GPU_SIZES_GIB = (24, 40, 80, 141)
#: Most configurations one sweep traces (teaching models) and for the larger zoo models.
MAX_CONFIGS, MAX_CONFIGS_LARGE = 12, 3
#: Zoo models that trace and plan in seconds on a CPU.
SMALL_MODELS = frozenset({"mlp", "tiny_gpt", "residual_block", "teach_order", "teach_updates",
                          "teach_layout", "teach_recompute"})
_COLORS = {"eager_reserved": "#1f77b4", "roam": "#d62728", "roam_recompute_5pct": "#ff7f0e",
           "roam_recompute_25pct": "#2ca02c"}
_DASH = {"eager_reserved": "solid", "roam": "solid", "roam_recompute_5pct": "dash",
         "roam_recompute_25pct": "dot"}


def parse_ints(text: Any, what: str) -> list[int]:
    """``"1 2, 4"`` -> ``[1, 2, 4]`` (sorted, unique, positive).

    Raises
    ------
    ConfigError
        Naming ``what`` when an entry is not a positive whole number.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(int(text))
    out = set()
    for tok in re.split(r"[\s,;]+", str(text or "").strip()):
        if not tok:
            continue
        if not tok.isdigit() or int(tok) <= 0:
            raise ConfigError(f"{what}: {tok!r} is not a positive whole number")
        out.add(int(tok))
    return sorted(out)


def _row_key(model: str, b: int, t: int | None, settings: PlanSettings) -> str:
    blob = json.dumps([model, b, t, "steady", "adamw", settings.as_dict()], sort_keys=True)
    return "fit-" + hashlib.sha256(blob.encode()).hexdigest()[:32]


def sweep(model: str, batch_sizes: Sequence[int], seq_lens: Sequence[int | None],
          settings: PlanSettings,
          progress: Callable[[int, int, str], None] | None = None,
          trace: Callable[[str, int, int | None], Any] | None = None) -> list[FitRow]:
    """Measure every (batch, sequence length) of ``model`` (cached rows are re-used).

    ``trace(model, batch, seq_len)`` returns a graph (default: the zoo tracer, steady
    setting, AdamW).

    Raises
    ------
    ConfigError
        An empty sweep, or more configurations than allowed for this model.
    """
    from roam_core.planner.config import PlannerConfig
    from roam_core.planner.whatfits import fit_row

    configs = [(b, t) for t in (seq_lens or [None]) for b in sorted(batch_sizes)]
    if not configs:
        raise ConfigError("give at least one batch size")
    cap = MAX_CONFIGS if model in SMALL_MODELS else MAX_CONFIGS_LARGE
    if len(configs) > cap:
        raise ConfigError(
            f"{model}: {len(configs)} configurations is too many for one sweep (at most {cap}"
            + ("" if model in SMALL_MODELS else
               "; each configuration of this model is traced and planned, which takes "
               "minutes on a CPU") + ")")
    if trace is None:
        def trace(m: str, b: int, t: int | None) -> Any:
            from roam_core.zoo import trace_zoo

            return trace_zoo(m, b, t, "steady", "adamw").graph

    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    rows: list[FitRow] = []
    for i, (b, t) in enumerate(configs):
        what = f"{model} batch {b}" + (f", seq {t}" if t else "")
        if progress is not None:
            progress(i, len(configs), f"{i}/{len(configs)}: tracing and planning {what}")
        key = _row_key(model, b, t, settings)
        cached = state.get_json(key)
        if cached is not None:
            rows.append(FitRow.from_dict(cached))
            continue
        graph = trace(model, b, t)
        row = fit_row(graph, cfg, batch_size=b, seq_len=t or graph.origin.get("seq_len"))
        state.put_json(key, row.to_dict())
        rows.append(row)
    if progress is not None:
        progress(len(configs), len(configs), f"done: {len(configs)} configurations")
    return rows


def fit_figure(rows: Sequence[FitRow], memory_gib: float | None = None) -> go.Figure:
    """Peak (log scale) against batch size, one line per method (and sequence length), with
    horizontal lines at :data:`GPU_SIZES_GIB` and ``memory_gib``."""
    fig = go.Figure()
    if not rows:
        fig.update_layout(title="No sweep yet: pick a model and press “Sweep”", height=420,
                          xaxis={"visible": False}, yaxis={"visible": False})
        return fig
    seqs = sorted({r.seq_len for r in rows}, key=lambda t: t or 0)
    for t in seqs:
        group = sorted((r for r in rows if r.seq_len == t), key=lambda r: r.batch_size)
        for m in FIT_METHODS:
            pts = [r for r in group if m in r.peak_bytes]
            if not pts:
                continue
            name = method_label(m) + (f", seq {t}" if t and len(seqs) > 1 else "")
            fig.add_trace(go.Scatter(
                x=[r.batch_size for r in pts], y=[r.peak_bytes[m] / 2**30 for r in pts],
                mode="lines+markers", name=name,
                line={"color": _COLORS.get(m), "dash": _DASH.get(m, "solid")},
                text=[f"{name}<br>batch {r.batch_size}"
                      + (f", seq {r.seq_len}" if r.seq_len else "")
                      + f"<br>{fmt_bytes(r.peak_bytes[m])}"
                      + (f"<br>+{r.extra_flops_pct.get(m, 0):.1f}% FLOPs"
                         if m.startswith("roam_recompute") else "") for r in pts],
                hovertemplate="%{text}<extra></extra>"))
    sizes = [(g, f"{g} GiB", "#999", "dot") for g in GPU_SIZES_GIB]
    if memory_gib:
        sizes.append((float(memory_gib), f"yours: {memory_gib:g} GiB", "#000", "dash"))
    for g, label, color, dash_ in sizes:  # (annotations on a log axis take log10 positions)
        fig.add_hline(y=g, line={"color": color, "dash": dash_, "width": 1})
        fig.add_annotation(x=0, xref="paper", y=_log10(g), yref="y", text=label,
                           showarrow=False, xanchor="left", yanchor="bottom",
                           font={"size": 10, "color": color})
    lo = min(min(r.peak_bytes.values()) for r in rows) / 2**30
    hi = max(max(r.peak_bytes.values()) / 2**30 for r in rows)
    top = max(hi, *(s[0] for s in sizes))
    fig.update_yaxes(type="log", title="peak (GiB, log scale)",
                     range=[_log10(lo / 2), _log10(top * 1.6)])
    fig.update_xaxes(type="log", title="batch size", tickvals=sorted({r.batch_size for r in rows}))
    fig.update_layout(title=f"{rows[0].graph_name.split('-b')[0]}: peak memory against batch size",
                      height=440, margin={"l": 70, "r": 20, "t": 50, "b": 50},
                      template="plotly_white", legend={"font": {"size": 11}})
    return fig


def _log10(x: float) -> float:
    import math

    return math.log10(max(x, 1e-9))


def fit_answer(rows: Sequence[FitRow], memory_gib: float) -> list[str]:
    """"Largest batch that fits" per method, in words."""
    if not rows:
        return []
    mem = int(float(memory_gib) * 2**30)
    best = largest_fitting(rows, mem)
    biggest = max(rows, key=lambda r: r.tokens)
    out = []
    for m in FIT_METHODS:
        r = best.get(m)
        if r is None:
            what = "nothing in the sweep fits"
        else:
            what = f"batch {r.batch_size}" + (f", seq {r.seq_len}" if r.seq_len else "")
            what += f" ({fmt_bytes(r.peak_bytes[m])})"
            if r is biggest:
                what += ": the largest tried; sweep larger batches to find the limit"
        out.append(f"{method_label(m)}: {what}")
    return out


# ------------------------------------------------------------------ Dash pieces
CARD = "fit-card"


def card() -> html.Div:
    """The What-fits card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "What fits: peak against batch size",
                          "open: sweep a zoo model's batch sizes against GPU memory sizes")


def body(models: Sequence[str]) -> list[Any]:
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


def stores() -> list[Any]:
    """The view's stores."""
    return [lazy.store(FIT_RESULT)]


def fit_job(set_progress: Any, n: int | None, model: str | None, batches: Any, seqs: Any,
            tl: Any, nl: Any, w: Any, al: Any) -> tuple[Any, str]:
    """Background: the sweep, with progress."""
    if not n or not model:
        raise PreventUpdate
    try:
        s = settings_from_form("roam", tl, nl, w, al)
        bs = parse_ints(batches, "batch sizes")
        ts: list[int | None] = list(parse_ints(seqs, "sequence lengths")) or [None]
        rows = sweep(model, bs, ts, s, lambda d, t, msg: set_progress((d, t, msg)))
    except RoamError as e:
        return dash.no_update, f"Sweep failed: {e}"
    except Exception as e:  # a trace/planner failure must reach the user, not kill the app
        _logger.exception("fit sweep failed")
        return dash.no_update, f"Sweep failed: {type(e).__name__}: {e}"
    return ({"model": model, "rows": [r.to_dict() for r in rows]},
            f"swept {model}: {len(rows)} configurations")


def render_fit(result: dict | None, memory: Any) -> tuple[go.Figure, list[Any]]:
    """Chart and answer of the last sweep, at the user's memory size."""
    rows = [FitRow.from_dict(d) for d in (result or {}).get("rows") or []]
    try:
        mem = float(memory) if memory not in (None, "") else None
    except (TypeError, ValueError):
        mem = None
    if mem is not None and mem <= 0:
        mem = None
    answer = [html.Li(x) for x in fit_answer(rows, mem or GPU_SIZES_GIB[0])]
    if rows:
        answer.insert(0, html.Li(f"Largest batch that fits {mem or GPU_SIZES_GIB[0]:g} GiB:",
                                 style={"fontWeight": "bold", "listStyle": "none"}))
    return fit_figure(rows, mem), answer


def register(app: dash.Dash) -> None:
    """Register the What-fits callbacks."""
    lazy.register_lazy(app, CARD, lambda: body(services.zoo_models()))
    settings = [State(i, "value") for i in (ids.TIME_LIMIT, ids.NODE_LIMIT, ids.WORKERS,
                                            ids.ALIGNMENT)]
    app.callback(
        Output(FIT_RESULT, "data"), Output(FIT_STATUS, "children"),
        Input(FIT_BTN, "n_clicks"), State(FIT_MODEL, "value"), State(FIT_BATCHES, "value"),
        State(FIT_SEQS, "value"), *settings,
        background=True, prevent_initial_call=True, interval=500,
        running=[(Output(FIT_BTN, "disabled"), True, False),
                 (Output(FIT_CANCEL, "disabled"), False, True)],
        progress=[Output(FIT_PROGRESS, "value"), Output(FIT_PROGRESS, "max"),
                  Output(FIT_PROGRESS_TEXT, "children")],
        cancel=[Input(FIT_CANCEL, "n_clicks")])(fit_job)
    app.callback(Output(FIT_GRAPH, "figure"), Output(FIT_ANSWER, "children"),
                 Input(FIT_RESULT, "data"), Input(FIT_MEMORY, "value"))(render_fit)
