"""A self-contained offline HTML report: every figure, plotly.js inlined exactly once."""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio

from roam_core.model.graph import Graph
from roam_core.model.plan import Plan

__all__ = ["ReportTable", "report_html"]

_logger = logging.getLogger(__name__)

_TITLES = {
    "curves": "Live bytes before and after planning",
    "timeline": "Operator timeline",
    "layout": "Planned tensor layout",
    "base_layout": "Baseline allocator layout",
    "tree": "Task division",
    "modules": "Bytes at the peak by module",
    "compare": "Compare two plans: memory of plan A and plan B",
}
_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
table{border-collapse:collapse}td{padding:2px 12px;border-bottom:1px solid #eee}
h2{margin-top:28px;font-size:18px}"""


@dataclass(frozen=True)
class ReportTable:
    """A table of the report: its heading, rows, ``(heading, row key)`` columns and a note
    under it."""

    title: str
    rows: Sequence[Mapping[str, object]]
    columns: Sequence[tuple[str, str]]
    note: str = ""


def _table(t: ReportTable) -> list[str]:
    out = [f"<h2>{html.escape(t.title)}</h2><table>",
           "<tr>" + "".join(f"<td><b>{html.escape(h)}</b></td>" for h, _ in t.columns) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{html.escape(str(r.get(k, '')))}</td>" for _, k in t.columns)
            + "</tr>" for r in t.rows]
    out.append("</table>")
    if t.note:
        out.append(f"<p>{html.escape(t.note)}</p>")
    return out


def report_html(graph: Graph, plan: Plan, figures: Mapping[str, go.Figure],
                summary: Sequence[tuple[str, str]],
                live_at_peak: Sequence[Mapping[str, object]] = (),
                live_title: str = "", tables: Sequence[ReportTable] = ()) -> str:
    """One HTML page with the summary table and every figure; works offline.

    Parameters
    ----------
    graph, plan : Graph, Plan
        What the report is about (names the page).
    figures : mapping of str to go.Figure
        Figures in display order (keys as in
        :func:`app.views.export.data.report_figures`).
    summary : sequence of (label, value)
        Rows of the summary card.
    live_at_peak : sequence of mapping
        Rows of the "live at the peak" table (:func:`app.views.live.model.live_rows`),
        largest first.
    live_title : str
        Its heading.
    tables : sequence of ReportTable
        More tables, after the figures (the Compare card's, when two plans are compared).

    Returns
    -------
    str
        The HTML text (about 5 MB: it embeds plotly.js).
    """
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>roam report: "
             f"{html.escape(graph.name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>roam plan for {html.escape(graph.name)} ({html.escape(plan.method)})</h1>",
             "<table>"]
    parts += [f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in summary]
    parts.append("</table>")
    first = True
    for key, fig in figures.items():
        parts.append(f"<h2>{html.escape(_TITLES.get(key, key))}</h2>")
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=first,
                                 config={"displaylogo": False}))
        first = False
    for t in tables:
        parts += _table(t)
    if live_at_peak:
        cols = tuple(c for c in ("id", "name", "module", "kind", "size", "offset",
                                 "lifetime", "producer") if c in live_at_peak[0])
        parts.append(f"<h2>{html.escape(live_title or 'Live at the peak')}</h2><table>")
        parts.append("<tr>" + "".join(f"<td><b>{c}</b></td>" for c in cols) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols)
                  + "</tr>" for r in live_at_peak]
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
