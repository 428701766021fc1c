"""What is live at a step: the largest storages and modules, and the line under a peak."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.analysis.layout_view import LayoutView
from app.analysis.modules import tensor_module_label
from app.core.formatting import fmt_bytes
from roam_core.model.graph import Graph, TensorId

__all__ = ["peak_contributors", "peak_modules", "peak_note", "peak_tensors", "tensor_label"]


def peak_tensors(view: LayoutView, step: int, k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` largest storages live at ``step``: ``(id, bytes)``, largest first."""
    m = np.nonzero((view.start <= step) & (view.end > step))[0]
    m = m[np.argsort(-view.size[m], kind="stable")][:k]
    return [(str(view.ids[i]), int(view.size[i])) for i in m]


def peak_contributors(graph: Graph, view: LayoutView, step: int, k: int = 3
                      ) -> list[tuple[str, int]]:
    """The ``k`` largest storages live at ``step``: ``(label, bytes)``, largest first.

    The label is the tensor's name where the graph records one (``Tensor.name``, a
    parameter's qualified name), else its id.
    """
    return [(tensor_label(graph, tid), b) for tid, b in peak_tensors(view, step, k)]


def tensor_label(graph: Graph, tensor_id: str) -> str:
    """A storage for people: its recorded name (``Tensor.name``) or else its id."""
    t = graph.tensors.get(TensorId(tensor_id))
    return str(getattr(t, "name", None) or tensor_id)


def peak_modules(graph: Graph, view: LayoutView, step: int, k: int = 3
                 ) -> list[tuple[str, int]]:
    """The ``k`` modules holding the most bytes live at ``step`` (``tensor_module``: a
    parameter's module, an activation's producing module), largest first."""
    m = np.nonzero((view.start <= step) & (view.end > step))[0]
    by: dict[str, int] = {}
    for i in m:
        t = graph.tensors.get(view.ids[i])
        if t is not None:
            label = tensor_module_label(graph, t)
            by[label] = by.get(label, 0) + int(view.size[i])
    return sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def peak_note(contributors: Sequence[tuple[str, int]], what: str = "top") -> str:
    """``'top: a 2.00 MiB, b 1.00 MiB'`` (empty for none).

    >>> peak_note([("w.grad", 2**21), ("act", 2**20)])
    'top: w.grad 2.00 MiB, act 1.00 MiB'
    """
    return (f"{what}: " + ", ".join(f"{n} {fmt_bytes(b)}" for n, b in contributors)
            if contributors else "")
