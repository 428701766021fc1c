"""The storages live at one step, as table rows (largest first)."""

from __future__ import annotations

import numpy as np

from app.analysis.layout_view import LayoutView
from app.analysis.modules import tensor_module_label
from app.analysis.peaks import tensor_label
from app.core.formatting import fmt_bytes, kind_label
from roam_core.model.graph import Graph

__all__ = ["live_rows"]


def live_rows(graph: Graph, view: LayoutView, step: int, limit: int = 200
              ) -> list[dict[str, str | int]]:
    """Storages live at ``step`` (largest first) as table rows."""
    m = np.nonzero((view.start <= step) & (view.end > step))[0]
    m = m[np.argsort(-view.size[m], kind="stable")][:limit]
    rows: list[dict[str, str | int]] = []
    for i in m:
        t = graph.tensors[view.ids[i]]
        # a storage without a recorded name (a temporary, an activation) is named by its
        # module and role, as everywhere else in the app, never left blank
        rows.append({"id": t.id, "name": tensor_label(graph, t.id),
                     "module": tensor_module_label(graph, t),
                     "kind": kind_label(t.kind), "size": fmt_bytes(int(view.size[i])),
                     "size_bytes": int(view.size[i]), "offset": fmt_bytes(int(view.offset[i])),
                     "offset_bytes": int(view.offset[i]),
                     "lifetime": f"[{view.start[i]}, {view.end[i]})",
                     "producer": t.producer or "(resident)",
                     "source": graph.op(t.producer).source if t.producer else ""})
    return rows
