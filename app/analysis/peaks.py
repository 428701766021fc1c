"""What is live at a step: the largest storages and modules, and the line under a peak."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.analysis.layout_view import LayoutView
from app.analysis.modules import tensor_module_label
from app.core.formatting import byte_unit
from roam_core.model.graph import Graph, Phase, TensorId

__all__ = ["op_words", "peak_contributors", "peak_modules", "peak_note", "peak_tensors",
           "short_bytes", "tensor_label"]


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


def op_words(target: str) -> str:
    """An ATen target in a word or two (``aten._safe_softmax.default`` -> ``softmax``).

    >>> op_words("aten._safe_softmax.default"), op_words("aten.mm.default")
    ('softmax', 'mm')
    >>> op_words("aten.native_layer_norm_backward.default")
    'layer_norm_backward'
    """
    name = target.split(".")[1] if target.startswith("aten.") and "." in target[5:] else \
        target.rsplit(".", 1)[0].removeprefix("aten.")
    name = name.lstrip("_")
    for prefix in ("safe_", "native_", "unsafe_"):
        name = name.removeprefix(prefix)
    return name or target


def tensor_label(graph: Graph, tensor_id: str) -> str:
    """A storage for people: its recorded name (``Tensor.name``: a parameter, a gradient,
    an optimizer state), else the module that made it and its role there (what made it,
    and the pass when it is not the forward), as users think of a model: never an op id.

    >>> from roam_core.model.samples import tiny_train_step
    >>> tensor_label(tiny_train_step(), "relu")
    'top-level relu output'
    """
    t = graph.tensors.get(TensorId(tensor_id))
    if t is None:
        return tensor_id
    if t.name:
        return str(t.name)
    op = graph.op(t.producer) if t.producer else None
    if op is None:
        return tensor_id
    where = op.module or "top-level"
    phase = f" ({op.phase.value})" if op.phase in _TAGGED else ""
    return f"{where} {op_words(op.target)} output{phase}"


#: Passes named after a storage's role (the forward, the default, is not).
_TAGGED = frozenset({Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER})


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
    """``'top: a 2 MiB, b 1.5 MiB'`` (three significant digits; empty for none).

    >>> peak_note([("w.grad", 2**21), ("act", 1536 * 2**10)])
    'top: w.grad 2 MiB, act 1.5 MiB'
    """
    return (f"{what}: " + ", ".join(f"{n} {short_bytes(b)}" for n, b in contributors)
            if contributors else "")


def short_bytes(n: float) -> str:
    """Bytes in a binary unit, three significant digits (``'720 MiB'``, ``'1.02 GiB'``).

    >>> short_bytes(720 * 2**20), short_bytes(1.02 * 2**30), short_bytes(15.63 * 2**20)
    ('720 MiB', '1.02 GiB', '15.6 MiB')
    """
    div, unit = byte_unit(float(n))
    return f"{n / div:.3g} {unit}"
