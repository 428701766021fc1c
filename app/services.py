"""What the callbacks ask for: keys in, figures / rows / download payloads out.

This is the only app module that combines the cache (:mod:`app.state`), the planner door
(:mod:`app.planning`), the view models (:mod:`app.analysis`) and the figures.  It imports no
Dash, so every function is unit-tested with plain values.  Derived data (curves, layout
arrays) is memoised per process by cache key.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from app import analysis, data_dir, figures, planning, recompute_view, state
from app.memo import clear_caches, freeze_arrays, memoised
from roam_core.base import catalog
from roam_core.base.errors import GraphError, PlanFormatError, PlanInvalidError, RoamError
from roam_core.formats.graph_io import load_graph, loads_graph
from roam_core.formats.plan_io import dumps_plan, loads_plan, plan_to_csv
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import Plan
from roam_core.model.samples import SAMPLES
from roam_core.oracle.attribution import (
    PeakAttribution,
    bytes_at_peak_by_module,
    module_bytes_per_step,
)

__all__ = [
    "SAMPLE_DIR",
    "After",
    "Before",
    "PlanProgressTracker",
    "after_data",
    "before_data",
    "cancel_flag",
    "cancel_key",
    "clear_caches",
    "curves_dict",
    "curves_figure",
    "decode_upload",
    "explain_sections",
    "export_payload",
    "graph_from_upload",
    "import_plan",
    "layout_dicts",
    "layout_figures",
    "live_table",
    "live_tooltips",
    "load_choice",
    "module_attribution",
    "module_highlight_style",
    "module_view",
    "module_view_dict",
    "plan_graph",
    "plan_graph_job",
    "progress_values",
    "range_from_relayout",
    "range_of",
    "request_cancel",
    "sample_options",
    "summary_rows",
    "timeline_dict",
    "timeline_fig",
    "trace_zoo_graph",
    "validate_plan",
    "walkthrough_steps",
    "warm",
]

_logger = logging.getLogger(__name__)
SAMPLE_DIR = data_dir("sample_graphs")
#: A selected range shorter than this many steps is widened (so one op stays visible).
MIN_RANGE_STEPS = 8


# ------------------------------------------------------------------ loading
def sample_options(sample_dir: Path = SAMPLE_DIR) -> list[dict[str, str]]:
    """Dropdown options: committed sample graph files, then the hand-built samples."""
    files = sorted(sample_dir.glob("*.json.gz")) + sorted(sample_dir.glob("*.json"))
    opts = [{"label": f"{p.name.split('.')[0]} (sample_graphs)", "value": f"file:{p.name}"}
            for p in files]
    opts += [{"label": f"{n} (hand-built)", "value": f"hand:{n}"} for n in SAMPLES]
    return opts


def load_choice(value: str, sample_dir: Path = SAMPLE_DIR) -> str:
    """Load a dropdown choice into the cache; returns the graph key."""
    kind, _, name = value.partition(":")
    if kind == "hand" and name in SAMPLES:
        return state.put_graph(SAMPLES[name]())
    path = (sample_dir / name).resolve()
    if kind != "file" or path.parent != sample_dir.resolve() or not path.is_file():
        raise GraphError(f"unknown sample {value!r}")
    return state.put_graph(load_graph(path))


def decode_upload(contents: str, max_bytes: int) -> bytes:
    """Bytes of a ``dcc.Upload`` data URL, refusing files over ``max_bytes``."""
    head, _, b64 = (contents or "").partition(",")
    if not head.startswith("data:") or not b64:
        raise GraphError("the file arrived empty or damaged in the upload; drop it again")
    if len(b64) * 3 // 4 > max_bytes:
        raise GraphError(f"file is larger than the upload limit ({analysis.fmt_bytes(max_bytes)})")
    try:
        return base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError) as e:
        raise GraphError(f"upload is not valid base64: {e}") from e


def graph_from_upload(contents: str, filename: str | None, max_bytes: int) -> str:
    """Parse an uploaded graph (JSON or gzip JSON), store it, return its key.

    Raises
    ------
    GraphError
        With the parser's message, prefixed by the file name.
    """
    try:
        graph = loads_graph(decode_upload(contents, max_bytes))
    except GraphError as e:
        raise GraphError(f"{filename or 'upload'}: {e}") from e
    return state.put_graph(graph)


def trace_zoo_graph(model: str, batch_size: int, seq_len: int | None, optimizer: str | None,
                    setting: str) -> str:
    """Trace a zoo model (torch imported here, in the job process); returns the graph key."""
    from roam_core.zoo import trace_zoo

    traced = trace_zoo(model, int(batch_size), seq_len or None, setting, optimizer or None)
    return state.put_graph(traced.graph)


#: Zoo names offered by the app (teaching models first; torch-free, so that the web server
#: never imports torch).
ZOO_NAMES = catalog.ZOO_NAMES


def zoo_models() -> list[str]:
    """Zoo model names (empty when torch is not installed)."""
    import importlib.util

    return list(ZOO_NAMES) if importlib.util.find_spec("torch") is not None else []


# ------------------------------------------------------------------ planning
def validate_plan(graph: Graph, plan: Plan) -> None:
    """Raise ``PlanFormatError``/``PlanInvalidError`` unless ``plan`` fits ``graph``."""
    if plan.graph_fingerprint != graph.fingerprint():
        raise PlanFormatError(f"plan was made for graph '{plan.graph_name}', not for this "
                              f"graph '{graph.name}'")
    from roam_core.oracle import validate

    check = getattr(validate, "check_plan", None)
    violations = check(graph, plan) if check else validate.check_order(graph, plan.order)
    if violations:
        raise PlanInvalidError(violations)


def plan_graph(graph_key: str, settings: planning.PlanSettings,
               progress: Callable[[Any], None] | None = None) -> str:
    """Plan (or fetch the cached plan for) a stored graph; returns the plan key."""
    key = state.plan_key(graph_key, settings.as_dict())
    if state.has_plan(key):
        return key
    graph = state.get_graph(graph_key)
    plan = planning.run_planner(graph, settings, progress)
    validate_plan(graph, plan)
    return state.put_plan(plan, key)


def cached_plan_key(graph_key: str, settings: planning.PlanSettings) -> str | None:
    """The plan key for these settings when it is already cached."""
    key = state.plan_key(graph_key, settings.as_dict())
    return key if state.has_plan(key) else None


def progress_values(p: Any) -> tuple[int, int, str]:
    """``(done, total, text)`` for the progress bar from a ``PlanProgress``."""
    best = getattr(p, "best_peak_bytes", None)
    text = f"{p.stage}: {p.done}/{p.total} sub-tasks" if p.stage == "order" else p.stage
    if best is not None:
        text += f", best peak {analysis.fmt_bytes(best)}"
    if getattr(p, "message", ""):
        text += f" ({p.message})"
    return int(p.done), max(int(p.total), 1), text


#: Share of a planner run each stage takes (the order stage dominates), for the overall bar.
STAGE_SHARES: tuple[tuple[str, float], ...] = (
    ("baseline", 0.05), ("rewrite", 0.02), ("decompose", 0.03), ("order", 0.70),
    ("layout", 0.20))


class PlanProgressTracker:
    """Progress across the planner's stages: an overall percentage and the time left.

    Call it with each ``PlanProgress``; it returns ``(value, max, text)`` for the progress
    bar (value in thousandths).  The time left is extrapolated from the elapsed time and
    capped by the time limit (the planner stops there, then lays out the arena).

    Examples
    --------
    >>> from roam_core.planner import PlanProgress
    >>> now = iter([0.0, 2.0, 4.0]).__next__
    >>> track = PlanProgressTracker(10.0, clock=now)
    >>> track(PlanProgress("order", 1, 4, 3 * 2**20, "sub-task t1"))[2]
    '28 % · order: 1/4 sub-tasks, best peak 3.00 MiB (sub-task t1) · about 5 s left'
    >>> track(PlanProgress("done", 1, 1, 3 * 2**20))[:2]
    (1000, 1000)
    """

    def __init__(self, time_limit_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._t0 = clock()
        self._limit = time_limit_s
        self._fraction = 0.0

    def fraction(self, p: Any) -> float:
        """Overall fraction done (never goes back)."""
        if p.stage == "done":
            self._fraction = 1.0
            return 1.0
        start = 0.0
        for stage, share in STAGE_SHARES:
            if stage == p.stage:
                within = min(max(p.done / max(p.total, 1), 0.0), 1.0)
                self._fraction = max(self._fraction, start + share * within)
                break
            start += share
        return self._fraction

    def __call__(self, p: Any) -> tuple[int, int, str]:
        f = self.fraction(p)
        elapsed = self._clock() - self._t0
        _, _, text = progress_values(p)
        if f >= 1.0:
            what = f": {p.message}" if getattr(p, "message", "") else ""
            return 1000, 1000, f"100 % · planned in {elapsed:.1f} s{what}"
        left = elapsed * (1 - f) / f if f > 0.02 else None
        if self._limit:
            cap = max(self._limit - elapsed, 0.0) + 1.0
            left = cap if left is None else min(left, cap)
        eta = f" · about {left:.0f} s left" if left is not None else ""
        return int(1000 * f), 1000, f"{100 * f:.0f} % · {text}{eta}"


# ------------------------------------------------------------------ cancellation
def cancel_key(session: str, run: int) -> str:
    """Cache key of the cancel request of run ``run`` (Plan clicks) in page ``session``."""
    return f"cancel-{session}-{int(run)}"


def request_cancel(session: str, run: int) -> None:
    """Ask the planner job of that run to stop (it keeps the best plan found so far)."""
    state.put_json(cancel_key(session, run), True)


def cancel_flag(session: str, run: int, every_s: float = 0.25,
                clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:
    """A ``cancel()`` callable for the planner that reads the request at most every
    ``every_s`` seconds (it is polled by solver threads)."""
    key = cancel_key(session, run)
    last = {"t": -1e9, "v": False}

    def flag() -> bool:
        if not last["v"] and clock() - last["t"] >= every_s:
            last["t"], last["v"] = clock(), bool(state.get_json(key, False))
        return bool(last["v"])

    return flag


def plan_graph_job(graph_key: str, settings: planning.PlanSettings,
                   progress: Callable[[Any], None] | None = None,
                   cancel: Callable[[], bool] | None = None) -> tuple[str, bool]:
    """Like :func:`plan_graph`, cancellable: ``(plan key, cancelled)``.

    A cancelled run returns the best valid plan found so far; it is stored under its content
    hash, never under the settings' cache key (the next Plan press plans in full).
    """
    key = state.plan_key(graph_key, settings.as_dict())
    if state.has_plan(key):
        return key, False
    graph = state.get_graph(graph_key)
    plan = planning.run_planner(graph, settings, progress, cancel)
    validate_plan(graph, plan)
    if cancel is not None and cancel():
        return state.put_plan(plan), True
    return state.put_plan(plan, key), False


def import_plan(contents: str, filename: str | None, graph_key: str, max_bytes: int) -> str:
    """Parse, re-validate against the loaded graph, and store an uploaded plan."""
    graph = state.get_graph(graph_key)
    raw = decode_upload(contents, max_bytes)
    try:
        plan = loads_plan(raw, graph)
    except PlanFormatError as e:
        raise PlanFormatError(f"{filename or 'plan'}: {e}") from e
    validate_plan(graph, plan)
    return state.put_plan(plan)


# ------------------------------------------------------------------ derived data
@dataclass(frozen=True)
class Before:
    """The "before" side: a baseline order, its curve and its allocator layout."""

    method: str
    label: str
    order: tuple[OpId, ...]
    curve: np.ndarray
    view: analysis.LayoutView
    reserved_bytes: int


@dataclass(frozen=True)
class After:
    """The planned side."""

    plan: Plan
    curve: np.ndarray
    view: analysis.LayoutView
    alloc: np.ndarray
    freed: np.ndarray


@memoised(8)
def before_data(graph_key: str, method: str = "eager", alignment_bytes: int = 512) -> Before:
    """Baseline order, curve and simulated-allocator layout (memoised)."""
    graph = state.get_graph(graph_key)
    order, label = planning.baseline_order(graph, method)
    blocks, reserved, how = planning.baseline_layout(graph, order)
    view = analysis.layout_from_blocks(graph, blocks, len(order),
                                       label=f"{label} layout ({how})")
    return freeze_arrays(Before(method, label, order,
                                analysis.total_curve(graph, order, alignment_bytes), view,
                                reserved))


@memoised(8)
def after_data(graph_key: str, plan_key: str) -> After:
    """Planned curve, layout arrays and per-step bytes (memoised)."""
    graph = recompute_view.view_graph(graph_key, plan_key)
    plan = state.get_plan(plan_key)
    curve = np.asarray(plan.live_bytes, np.int64) + plan.resident_bytes
    if len(curve) != len(plan.order):
        curve = analysis.total_curve(graph, plan.order, plan.alignment_bytes)
    alloc, freed = analysis.step_bytes(graph, plan.order, plan.alignment_bytes)
    view = analysis.layout_from_plan(graph, plan, label=f"planned layout ({plan.method})")
    return freeze_arrays(After(plan, curve, view, alloc, freed))


def warm(graph_key: str, plan_key: str | None, base: str = "eager") -> None:
    """Compute (and memoise) the opening views of a graph and plan, as figures and as the
    JSON the page is sent."""
    curves_dict(graph_key, plan_key, base, None, None)
    timeline_dict(graph_key, plan_key, base, None, None)
    layout_dicts(graph_key, plan_key, base, None, None)
    module_view_dict(graph_key, plan_key, base, 2, "after")


# ------------------------------------------------------------------ views
def _hashable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    return x


def _copy_fig(fig: go.Figure) -> go.Figure:
    """A caller's own copy of a memoised figure (about 0.1 s for a GPT2-XL timeline).

    Not ``go.Figure(fig.to_dict(), _validate=False)``: that is twice as fast but leaves
    plotly's base64 typed-array dicts where arrays belong (``trace.y`` is no longer numbers).
    """
    return go.Figure(fig)


def _copy_pair(figs: tuple[go.Figure, go.Figure]) -> tuple[go.Figure, go.Figure]:
    return _copy_fig(figs[0]), _copy_fig(figs[1])


def _fig_json(fig: go.Figure) -> str:
    """The frozen form of a memoised figure: its JSON text (what Dash would send)."""
    return fig.to_json()


def _pair_json(figs: tuple[go.Figure, go.Figure]) -> tuple[str, str]:
    return _fig_json(figs[0]), _fig_json(figs[1])


def _fresh(text: str) -> dict[str, Any]:
    """A caller's own figure dict, parsed from a memo's JSON text (about 15 ms for a
    GPT2-XL timeline, against 0.2 s to copy the figure and 0.1 s more to serialise it)."""
    return json.loads(text)


def curves_figure(graph_key: str, plan_key: str | None, base: str,
                  x_range: Sequence[float] | None, step: int | None,
                  selection: Mapping[str, str] | None = None) -> go.Figure:
    """View 1: before/after live bytes (memoised; each call gets its own copy); a selected
    module adds its own bytes per step, before and after."""
    module = selection["id"] if selection and selection.get("kind") == "module" else None
    return _curves(graph_key, plan_key, base, _hashable(x_range), step, module)


def curves_dict(graph_key: str, plan_key: str | None, base: str,
                x_range: Sequence[float] | None, step: int | None,
                selection: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`curves_figure` as a fresh figure dict (what the page is sent; no copy of the
    stored figure, which is serialised once)."""
    module = selection["id"] if selection and selection.get("kind") == "module" else None
    return _fresh(_curves.frozen(graph_key, plan_key, base, _hashable(x_range), step, module))


@memoised(16, copy=_copy_fig, frozen=_fig_json)
def _curves(graph_key: str, plan_key: str | None, base: str,
            x_range: Sequence[float] | None, step: int | None,
            module: str | None = None) -> go.Figure:
    b = before_data(graph_key, base, state.get_plan(plan_key).alignment_bytes if plan_key else 512)
    graph = state.get_graph(graph_key)
    label = f"module {analysis.module_label(module or '')}"
    if not plan_key:
        extra = [] if module is None else [
            (f"{label} ({b.label})", module_bytes_per_step(graph, b.order, module), "#55a868")]
        return figures.memory_curves_figure(b.curve, None, after_label=b.label,
                                            x_range=x_range, step=step, extra_curves=extra,
                                            title="not planned yet: press Plan")
    a = after_data(graph_key, plan_key)
    extra = [] if module is None else [
        (f"{label} (before)", module_bytes_per_step(graph, b.order, module), "#8fb8de"),
        (f"{label} (planned)", module_bytes_per_step(
            recompute_view.view_graph(graph_key, plan_key), a.plan.order, module,
            alignment_bytes=a.plan.alignment_bytes), "#e89c9f")]
    after_label = f"planned ({a.plan.method})"
    g_after = recompute_view.view_graph(graph_key, plan_key)
    notes = {lbl: _peak_note(g, view, curve) for lbl, g, view, curve in (
        (b.label, graph, b.view, b.curve), (after_label, g_after, a.view, a.curve))}
    return figures.memory_curves_figure(
        a.curve, b.curve, arena_bytes=a.plan.arena_bytes,
        lower_bound_bytes=a.plan.lower_bound_bytes, after_label=after_label,
        before_label=b.label, x_range=x_range, step=step, extra_curves=extra,
        peak_notes=notes)


def _peak_note(graph: Graph, view: analysis.LayoutView, curve: np.ndarray) -> str:
    """The line under a peak: its top-3 modules (tensors when the graph has no modules)."""
    k = int(np.argmax(curve)) if len(curve) else 0
    if analysis.has_modules(graph):
        return analysis.peak_note(analysis.peak_modules(graph, view, k), "top modules")
    return analysis.peak_note(analysis.peak_contributors(graph, view, k))


def timeline_fig(graph_key: str, plan_key: str | None, base: str,
                 x_range: Sequence[float] | None, selection: Mapping[str, str] | None
                 ) -> go.Figure:
    """View 3: operator timeline (planned and baseline rows; memoised)."""
    return _timeline(graph_key, plan_key, base, _hashable(x_range), _hashable(selection))


def timeline_dict(graph_key: str, plan_key: str | None, base: str,
                  x_range: Sequence[float] | None, selection: Mapping[str, str] | None
                  ) -> dict[str, Any]:
    """:func:`timeline_fig` as a fresh figure dict (see :func:`curves_dict`)."""
    return _fresh(_timeline.frozen(graph_key, plan_key, base, _hashable(x_range),
                                   _hashable(selection)))


@memoised(16, copy=_copy_fig, frozen=_fig_json)
def _timeline(graph_key: str, plan_key: str | None, base: str, x_range: Any, sel: Any
              ) -> go.Figure:
    selection = dict(sel) if sel else None
    graph = state.get_graph(graph_key)
    b = before_data(graph_key, base)
    hl = _selected_op(graph, selection)
    if not plan_key:
        fig = figures.timeline_figure(graph, b.order, None, x_range=x_range, highlight_op=hl)
        _mark_module_ops(fig, graph_key, selection, [b.order])
        return fig
    a = after_data(graph_key, plan_key)
    graph = recompute_view.view_graph(graph_key, plan_key)
    fig = figures.timeline_figure(graph, a.plan.order, b.order, alloc_bytes=a.alloc,
                                  freed_bytes=a.freed, x_range=x_range, highlight_op=hl,
                                  before_label=b.label)
    recompute_view.mark_recompute(fig, a.plan, 1, 2)
    _mark_module_ops(fig, graph_key, selection, [b.order, a.plan.order])
    return fig


def layout_figures(graph_key: str, plan_key: str | None, base: str,
                   x_range: Sequence[float] | None, selection: Mapping[str, str] | None
                   ) -> tuple[go.Figure, go.Figure]:
    """View 4: planned layout and the baseline allocator layout (same window; memoised)."""
    return _layouts(graph_key, plan_key, base, _hashable(x_range), _hashable(selection))


def layout_dicts(graph_key: str, plan_key: str | None, base: str,
                 x_range: Sequence[float] | None, selection: Mapping[str, str] | None
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`layout_figures` as fresh figure dicts (see :func:`curves_dict`)."""
    lay, base_lay = _layouts.frozen(graph_key, plan_key, base, _hashable(x_range),
                                    _hashable(selection))
    return _fresh(lay), _fresh(base_lay)


@memoised(16, copy=_copy_pair, frozen=_pair_json)
def _layouts(graph_key: str, plan_key: str | None, base: str, x_range: Any, sel: Any
             ) -> tuple[go.Figure, go.Figure]:
    selection = dict(sel) if sel else None
    b = before_data(graph_key, base)
    tid = _selected_tensor(state.get_graph(graph_key), selection)
    base_fig = figures.layout_figure(b.view, x_range=x_range, highlight_id=tid)
    members = _module_tensors(graph_key, selection)
    if members:
        figures.outline_tensors(base_fig, b.view, members)
    if not plan_key:
        return figures.empty_figure("not planned yet: press Plan"), base_fig
    a = after_data(graph_key, plan_key)
    fig = figures.layout_figure(a.view, x_range=x_range, highlight_id=tid)
    if members:
        figures.outline_tensors(fig, a.view, members)
    return fig, base_fig


def live_table(graph_key: str, plan_key: str | None, base: str, step: int | None
               ) -> tuple[list[dict[str, Any]], str]:
    """View 5: rows live at ``step`` (the planned peak when ``None``) and a title."""
    graph = recompute_view.view_graph(graph_key, plan_key)
    if plan_key:
        a = after_data(graph_key, plan_key)
        view, curve, what = a.view, a.curve, "planned"
    else:
        b = before_data(graph_key, base)
        view, curve, what = b.view, b.curve, b.label
    peak = int(np.argmax(curve)) if len(curve) else 0
    s = peak if step is None else int(step)
    rows = analysis.live_rows(graph, view, s)
    tag = " (the peak)" if s == peak else ""
    total = analysis.fmt_bytes(int(curve[s])) if 0 <= s < len(curve) else "n/a"
    return rows, f"Live at step {s}{tag} in the {what} order: {total}, largest first"


def live_tooltips(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Exact bytes on demand: the live table's size and offset cells show them on hover.

    >>> live_tooltips([{"size_bytes": 1536, "offset_bytes": 2**20}])[0]["offset"]["value"]
    '1,048,576 B'
    """
    return [{"size": {"value": f"{r['size_bytes']:,} B", "type": "text"},
             "offset": {"value": f"{r['offset_bytes']:,} B", "type": "text"}} for r in rows]


def summary_rows(graph_key: str, plan_key: str | None, base: str) -> list[tuple[str, str]]:
    """View 7: the summary card."""
    graph = state.get_graph(graph_key)
    b = before_data(graph_key, base)
    head = [("graph", f"{graph.name}: {len(graph.ops)} ops, {len(graph.tensors)} storages")]
    if not plan_key:
        return [*head, (f"{b.label} peak", analysis.fmt_bytes(int(b.curve.max(initial=0)))),
                (f"{b.label} reserved", analysis.fmt_bytes(b.reserved_bytes)),
                ("plan", "not planned yet: press Plan")]
    a = after_data(graph_key, plan_key)
    # op by op against the baseline: the plan's re-runs left out of its order
    why = [("why", w) for w in analysis.why_notes(graph, recompute_view.without_reruns(a.plan),
                                                  b.order, b.label, b.curve, a.curve)]
    return head + analysis.summary_rows(a.plan, int(b.curve.max(initial=0)), b.label,
                                        b.reserved_bytes, show_eager=base != "eager") + why


@memoised(8)
def walkthrough_steps(graph_key: str, plan_key: str | None, base: str
                      ) -> tuple[bool, tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]]:
    """The guided walkthrough of this plan: ``(open by default, steps)`` (memoised, frozen)."""
    if not plan_key:
        return False, ()
    graph = state.get_graph(graph_key)
    a, b = after_data(graph_key, plan_key), before_data(graph_key, base)
    teach = graph.name.startswith(analysis.TEACHING_GRAPHS)
    steps = analysis.walkthrough(graph, recompute_view.without_reruns(a.plan),
                                 b.order, b.label, b.curve, b.view, a.view,
                                 b.reserved_bytes)
    return teach, tuple((t, x, tuple(links)) for t, x, links in steps)


def explain_sections(graph_key: str, plan_key: str | None, base: str,
                     selection: Mapping[str, str] | None) -> list[analysis.Section]:
    """View 8: why the selected op or tensor sits where it does."""
    if not selection or not plan_key:
        return [analysis.Section("Explain", ("click an op (timeline), a tensor (layout) or a "
                                             "search hit to see why it sits where it does",))]
    graph = state.get_graph(graph_key)
    plan = after_data(graph_key, plan_key).plan
    order = before_data(graph_key, base).order
    if selection.get("kind") == "module":
        return analysis.explain_module(
            graph, selection["id"], module_attribution(graph_key, plan_key, base),
            module_attribution(graph_key, None, base), f"planned ({plan.method})",
            before_data(graph_key, base).label)
    explain = analysis.explain_op if selection.get("kind") == "op" else analysis.explain_tensor
    extra = recompute_view.explain_recompute(graph, plan, selection.get("kind", ""),
                                             selection["id"])
    try:
        return explain(recompute_view.view_graph(graph_key, plan_key), plan, order,
                       selection["id"]) + extra
    except RoamError as e:
        return [analysis.Section("Explain", (str(e),))]


def tree_of(plan_key: str | None) -> Mapping[str, Any] | None:
    """The plan's task-tree summary (``None`` for baselines or no plan)."""
    return state.get_plan(plan_key).task_tree if plan_key else None


def _selected_op(graph: Graph, sel: Mapping[str, str] | None) -> str | None:
    if not sel:
        return None
    if sel.get("kind") == "op":
        return sel["id"]
    t = graph.tensors.get(sel["id"])
    return t.producer if t is not None else None


def _selected_tensor(graph: Graph, sel: Mapping[str, str] | None) -> str | None:
    return sel["id"] if sel and sel.get("kind") == "tensor" else None


@memoised(8)
def _members(graph_key: str, path: str) -> tuple[frozenset[str], frozenset[str]]:
    ops, tensors = analysis.module_members(state.get_graph(graph_key), path)
    return frozenset(ops), frozenset(tensors)


def _module_tensors(graph_key: str, sel: Mapping[str, str] | None) -> frozenset[str]:
    if not sel or sel.get("kind") != "module":
        return frozenset()
    return _members(graph_key, sel["id"])[1]


def _mark_module_ops(fig: go.Figure, graph_key: str, sel: Mapping[str, str] | None,
                     orders: Sequence[Sequence[OpId]]) -> None:
    if sel and sel.get("kind") == "module":
        figures.mark_ops(fig, orders, _members(graph_key, sel["id"])[0])


# ------------------------------------------------------------------ memory by module
@memoised(16)
def module_attribution(graph_key: str, plan_key: str | None, base: str = "eager"
                       ) -> PeakAttribution:
    """Bytes live at the peak by module: of the plan's order, or of the baseline's when
    ``plan_key`` is ``None`` (memoised)."""
    graph = state.get_graph(graph_key)
    if plan_key:
        plan = after_data(graph_key, plan_key).plan
        graph = recompute_view.view_graph(graph_key, plan_key)
        return bytes_at_peak_by_module(graph, plan.order, alignment_bytes=plan.alignment_bytes)
    return bytes_at_peak_by_module(graph, before_data(graph_key, base).order)


def module_view(graph_key: str, plan_key: str | None, base: str, depth: Any,
                side: str = "after", selection: Mapping[str, str] | None = None
                ) -> tuple[list[dict[str, Any]], go.Figure, str]:
    """Per-module memory: table rows, icicle and a title.

    ``depth`` groups module paths (an int, or ``"full"`` for every full path); ``side``
    picks whose kinds the table and the icicle show: ``"after"`` (the plan) or
    ``"before"`` (the baseline).  The icicle is memoised (each call gets its own copy).
    """
    rows, title = _module_rows(graph_key, plan_key, base, depth, side)
    return rows, _icicle(graph_key, plan_key, base, side, _module_of(selection)), title


def module_view_dict(graph_key: str, plan_key: str | None, base: str, depth: Any,
                     side: str = "after", selection: Mapping[str, str] | None = None
                     ) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """:func:`module_view` with the icicle as a fresh figure dict (see :func:`curves_dict`)."""
    rows, title = _module_rows(graph_key, plan_key, base, depth, side)
    fig = _fresh(_icicle.frozen(graph_key, plan_key, base, side, _module_of(selection)))
    return rows, fig, title


def _module_of(selection: Mapping[str, str] | None) -> str | None:
    return selection.get("id") if selection and selection.get("kind") == "module" else None


def _module_rows(graph_key: str, plan_key: str | None, base: str, depth: Any, side: str
                 ) -> tuple[list[dict[str, Any]], str]:
    """The module table's rows (fresh dicts) and the view's title."""
    graph = state.get_graph(graph_key)
    before = module_attribution(graph_key, None, base)
    b_label = before_data(graph_key, base).label
    after = module_attribution(graph_key, plan_key, base) if plan_key else None
    shown = after if after is not None and side != "before" else before
    d = None if depth in (None, "full") else max(int(depth), 1)
    if after is None:
        rows = analysis.module_rows(before, None, d)
    else:
        rows = analysis.module_rows(shown, before if shown is after else after, d)
        if shown is before:  # columns keep their meaning: before = baseline, after = plan
            for r in rows:
                r["before_mib"], r["after_mib"] = r["after_mib"], r["before_mib"]
                r["change_mib"] = None if r["change_mib"] is None else -r["change_mib"]
    if not analysis.module_depth(graph):
        title = ("This graph records no module paths (traced before module attribution): "
                 "re-trace it to see memory by module.")
    else:
        what = f"planned peak (step {after.step})" if after is not None else "no plan yet"
        title = (f"Bytes live at the peak by module: {b_label} peak (step {before.step}) "
                 f"vs {what}; kind columns of the "
                 f"{'plan' if shown is after else b_label}.  Click a module to highlight "
                 "its ops and tensors in every view.")
    return rows, title


@memoised(16, copy=_copy_fig, frozen=_fig_json)
def _icicle(graph_key: str, plan_key: str | None, base: str, side: str, sel: str | None
            ) -> go.Figure:
    """The module icicle (building it is most of the module view's time: 0.3 s on GPT2-XL,
    plotly validating a few thousand nodes)."""
    before = module_attribution(graph_key, None, base)
    b_label = before_data(graph_key, base).label
    after = module_attribution(graph_key, plan_key, base) if plan_key else None
    shown = after if after is not None and side != "before" else before
    other = before if shown is after else after
    return figures.module_icicle_figure(
        shown.kind_bytes(), other.kind_bytes() if other is not None else None, selected=sel,
        title=f"{'planned' if shown is after else b_label} peak by module: "
              f"{analysis.fmt_bytes(shown.total_bytes)} at step {shown.step}")


def module_highlight_style(selection: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """``style_data_conditional`` of a table with a ``module`` column: rows of the
    selected module (and its submodules) highlighted."""
    if not selection or selection.get("kind") != "module":
        return []
    label = analysis.module_label(selection["id"])
    query = f'{{module}} = "{label}"'
    if selection["id"]:
        query += f' or {{module}} contains "{selection["id"]}."'
    return [{"if": {"filter_query": query}, "backgroundColor": "#fff3c4"}]


# ------------------------------------------------------------------ linking
def range_from_relayout(data: Mapping[str, Any] | None) -> list[float] | str | None:
    """A step range from ``relayoutData``: ``[x0, x1]``, ``None`` (reset) or ``"keep"``."""
    if not data:
        return "keep"
    if data.get("xaxis.autorange"):
        return None
    if "xaxis.range[0]" in data and "xaxis.range[1]" in data:
        return [float(data["xaxis.range[0]"]), float(data["xaxis.range[1]"])]
    if isinstance(data.get("xaxis.range"), list):
        return [float(x) for x in data["xaxis.range"][:2]]
    return "keep"


def range_of(graph_key: str, plan_key: str | None, base: str, kind: str, ident: str
             ) -> list[float] | None:
    """Step window showing an op, a tensor's lifetime or a task-tree node (with a margin)."""
    n_steps = len(after_data(graph_key, plan_key).plan.order if plan_key
                  else before_data(graph_key, base).order)
    if kind == "node":
        node = analysis.find_node(tree_of(plan_key), ident)
        span = analysis.subtree_range(node) if node else None
        return None if span is None else _window(span, n_steps, margin=0.0)
    else:
        graph = state.get_graph(graph_key)
        view = after_data(graph_key, plan_key).view if plan_key else before_data(
            graph_key, base).view
        if kind in ("op", "module"):
            op_pos = {o: i for i, o in enumerate(
                after_data(graph_key, plan_key).plan.order if plan_key
                else before_data(graph_key, base).order)}
            if kind == "module":
                at = [op_pos[o] for o in _members(graph_key, ident)[0] if o in op_pos]
                span = (min(at), max(at) + 1) if at else None
            else:
                span = (op_pos[ident], op_pos[ident] + 1) if ident in op_pos else None
        else:
            idx = np.nonzero(view.ids == ident)[0]
            span = (int(view.start[idx[0]]), int(view.end[idx[0]])) if len(idx) else None
            if span is None and ident in graph.tensors:
                span = (0, view.n_steps)
    return None if span is None else _window(span, n_steps)


def _window(span: tuple[int, int], n_steps: int, margin: float = 0.05) -> list[float]:
    """Axis range showing steps ``[lo, hi)`` (at least ``MIN_RANGE_STEPS`` wide, ``margin``
    of its width on each side), never outside the step axis ``[0, n_steps]`` (step s spans
    ``[s, s + 1)``).

    >>> _window((0, 8000), 8000)
    [0.0, 8000.0]
    >>> _window((10, 12), 100, margin=0.0)
    [7.0, 15.0]
    """
    lo, hi = span
    pad = max(MIN_RANGE_STEPS - (hi - lo), 0) / 2 + margin * (hi - lo)
    a, b = lo - pad, hi + pad
    top = max(n_steps, 1)
    if b > top:
        a, b = a - (b - top), top
    if a < 0:
        a, b = 0, min(b - a, top)
    return [float(a), float(b)]


# ------------------------------------------------------------------ export
def export_payload(kind: str, graph_key: str, plan_key: str | None, base: str,
                   figure: str = "curves") -> dict[str, Any]:
    """``dcc.Download`` data for ``kind`` in ``{"json", "csv", "html", "png"}``."""
    if not plan_key:
        raise RoamError("nothing to export: plan the graph first")
    graph = state.get_graph(graph_key)
    plan = state.get_plan(plan_key)
    stem = f"{graph.name}-{plan.method}"
    if kind == "json":
        return {"content": dumps_plan(plan), "filename": f"{stem}.plan.json"}
    if kind == "csv":
        csv = plan_to_csv(plan, recompute_view.view_graph(graph_key, plan_key))
        return {"content": csv, "filename": f"{stem}.csv"}
    figs = report_figures(graph_key, plan_key, base)
    if kind == "html":
        from app.report import report_html

        rows, title = live_table(graph_key, plan_key, base, None)
        text = report_html(graph, plan, figs, summary_rows(graph_key, plan_key, base),
                           rows[:50], title)
        return {"content": text, "filename": f"{stem}.report.html"}
    if kind == "png":
        png = figs[figure].to_image(format="png", width=1400, height=700)
        return {"content": base64.b64encode(png).decode(), "filename": f"{stem}-{figure}.png",
                "base64": True}
    raise RoamError(f"unknown export kind {kind!r}")


def report_figures(graph_key: str, plan_key: str, base: str) -> dict[str, go.Figure]:
    """Every figure of the app for one plan (whole step axis)."""
    layout, base_layout = layout_figures(graph_key, plan_key, base, None, None)
    return {
        "curves": curves_figure(graph_key, plan_key, base, None, None),
        "timeline": timeline_fig(graph_key, plan_key, base, None, None),
        "layout": layout,
        "base_layout": base_layout,
        "tree": figures.task_tree_figure(tree_of(plan_key)),
        "modules": module_view(graph_key, plan_key, base, 2, "after")[1],
    }
