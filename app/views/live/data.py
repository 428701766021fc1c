"""The live table of a stored graph and plan: the rows at a step and exact bytes on hover."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.core import state
from app.core.formatting import fmt_bytes, order_name
from app.services.plan_data import after_data, before_data
from app.services.view_graph import view_graph
from app.views.live.model import live_rows

__all__ = ["live_table", "live_tooltips"]


def live_table(graph_key: str, plan_key: str | None, base: str, step: int | None,
               side: str = "after") -> tuple[list[dict[str, str | int]], str]:
    """View 5: rows live at ``step`` (the peak when ``None``) of the plan's order, or of the
    "before" order (``side="before"``, or no plan), and a title."""
    if plan_key and side != "before":
        graph = view_graph(graph_key, plan_key)
        a = after_data(graph_key, plan_key)
        view, curve, what = a.view, a.curve, f"planned ({a.plan.method})"
    else:
        graph = state.get_graph(graph_key)
        b = before_data(graph_key, base)
        view, curve, what = b.view, b.curve, b.label
    peak = int(np.argmax(curve)) if len(curve) else 0
    s = peak if step is None else int(step)
    rows = live_rows(graph, view, s)
    tag = " (the peak)" if s == peak else ""
    total = fmt_bytes(int(curve[s])) if 0 <= s < len(curve) else "n/a"
    where = "its layout: the caching allocator's addresses" if what == (
        before_data(graph_key, base).label) else "the planned arena"
    return rows, (f"Live at step {s}{tag} in the {order_name(what)}: {total}, largest first "
                  f"(offsets in {where})")


def live_tooltips(rows: Sequence[Mapping[str, object]]) -> list[dict[str, dict[str, str]]]:
    """Exact bytes on demand: the live table's size and offset cells show them on hover.

    >>> live_tooltips([{"size_bytes": 1536, "offset_bytes": 2**20}])[0]["offset"]["value"]
    '1,048,576 B'
    """
    return [{"size": {"value": f"{r['size_bytes']:,} B", "type": "text"},
             "offset": {"value": f"{r['offset_bytes']:,} B", "type": "text"}} for r in rows]

