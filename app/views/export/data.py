"""What the Export card downloads, and a plan file imported into the cache.

Every payload is ``dcc.Download`` data for one stored graph and plan: the plan's JSON, its
MiniMalloc CSV, the offline HTML report (every view's figure, the summary, the live table at
the peak, and the Compare card's two plans when two are compared) or one figure as a PNG
(kaleido drives Debian chromium).
"""

from __future__ import annotations

import base64

import plotly.graph_objects as go

from app.core import state
from app.figures.html_report import ReportTable, report_html
from app.services.planning import validate_plan
from app.services.view_graph import view_graph
from app.views.compare.data import Compared, compare_figure, compared_plans, comparison
from app.views.compare.model import LIFETIME_COLUMNS, METRIC_COLUMNS
from app.views.curves.data import curves_figure
from app.views.layouts.data import layout_figures
from app.views.live.data import live_table
from app.views.memory_by_module.data import module_view
from app.views.summary.data import summary_rows
from app.views.timeline.data import timeline_fig
from app.views.tree.data import tree_of
from app.views.tree.figure import task_tree_figure
from roam_core.base.errors import PlanFormatError, RoamError
from roam_core.formats.plan_io import dumps_plan, loads_plan, plan_to_csv

__all__ = ["Payload", "export_payload", "figure_png", "import_plan", "report_figures"]

#: ``dcc.Download`` data: ``content``, ``filename`` and, for binary content, ``base64``.
Payload = dict[str, str | bool]


def export_payload(kind: str, graph_key: str, plan_key: str | None, base: str,
                   figure: str = "curves", compared: dict[str, str] | None = None) -> Payload:
    """``dcc.Download`` data for ``kind`` in ``{"json", "csv", "html", "png"}``.

    ``compared`` is the Compare card's last comparison (its store's data): the report then
    has a compare section and the PNG export can draw the ``"compare"`` figure.
    """
    if not plan_key:
        raise RoamError("nothing to export: plan the graph first")
    graph = state.get_graph(graph_key)
    plan = state.get_plan(plan_key)
    stem = f"{graph.name}-{plan.method}"
    if kind == "json":
        return {"content": dumps_plan(plan), "filename": f"{stem}.plan.json"}
    if kind == "csv":
        csv = plan_to_csv(plan, view_graph(graph_key, plan_key))
        return {"content": csv, "filename": f"{stem}.csv"}
    pair = compared_plans(graph_key, compared)
    figs = report_figures(graph_key, plan_key, base, pair)
    if kind == "html":
        rows, title = live_table(graph_key, plan_key, base, None)
        text = report_html(graph, plan, figs, summary_rows(graph_key, plan_key, base),
                           rows[:50], title, compare_tables(graph_key, pair))
        return {"content": text, "filename": f"{stem}.report.html"}
    if kind == "png":
        if figure == "compare" and pair is None:
            raise RoamError("nothing compared: open \"Compare two plans\" and pick plans A "
                            "and B first")
        png = figure_png(figs[figure], width_px=1400, height_px=700)
        return {"content": base64.b64encode(png).decode(), "filename": f"{stem}-{figure}.png",
                "base64": True}
    raise RoamError(f"unknown export kind {kind!r}")


def figure_png(fig: go.Figure, *, width_px: int, height_px: int, attempts: int = 2) -> bytes:
    """``fig`` as PNG bytes (kaleido drives Debian chromium).

    On a loaded machine kaleido's first page load can fail before its scripts are defined
    ("kaleido_scopes is not defined"); the next render works, so a failed render is retried
    once. A second failure is a :class:`RoamError` naming the PNG export.
    """
    last: Exception | None = None
    for _ in range(max(1, attempts)):
        try:
            return bytes(fig.to_image(format="png", width=width_px, height=height_px))
        except Exception as e:  # kaleido raises plain exceptions (and chromium's own)
            last = e
    raise RoamError(f"PNG export failed: kaleido could not render the figure ({last})") from last


def report_figures(graph_key: str, plan_key: str, base: str,
                   compared: Compared | None = None) -> dict[str, go.Figure]:
    """Every figure of the app for one plan (whole step axis); with ``compared``, the
    Compare card's curves of its plans A and B too (key ``"compare"``)."""
    layout, base_layout = layout_figures(graph_key, plan_key, base, None, None)
    extra = {} if compared is None else {"compare": compare_figure(
        graph_key, compared.key_a, compared.a_label, compared.key_b, compared.b_label)}
    return {
        "curves": curves_figure(graph_key, plan_key, base, None, None),
        "timeline": timeline_fig(graph_key, plan_key, base, None, None),
        "layout": layout,
        "base_layout": base_layout,
        "tree": task_tree_figure(tree_of(plan_key)),
        "modules": module_view(graph_key, plan_key, base, 2, "after")[1],
        **extra,
    }


def compare_tables(graph_key: str, compared: Compared | None) -> list[ReportTable]:
    """The Compare card's metrics and lifetime changes for the report, headed by the names
    of plans A and B (none without a comparison)."""
    if compared is None:
        return []
    comp = comparison(graph_key, compared.key_a, compared.key_b)
    names = f"A: {compared.a_label} · B: {compared.b_label}"
    return [ReportTable(f"Compare two plans ({names}): B − A", comp.metrics, METRIC_COLUMNS,
                        comp.note),
            ReportTable(f"Largest lifetime changes ({names})", comp.lifetimes,
                        LIFETIME_COLUMNS)]


def import_plan(raw: bytes, filename: str | None, graph_key: str) -> str:
    """Parse an uploaded plan file's bytes, re-validate it against the loaded graph, and
    store it."""
    graph = state.get_graph(graph_key)
    try:
        plan = loads_plan(raw, graph)
    except PlanFormatError as e:
        raise PlanFormatError(f"{filename or 'plan'}: {e}") from e
    validate_plan(graph, plan)
    return state.put_plan(plan)
