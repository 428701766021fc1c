"""The step axis every view shares, and binary-aligned byte ticks.

Step s occupies ``[s, s + 1)`` on every step axis, and the whole axis is ``[0, n_steps]``.
The curves, the timeline and the layouts use the same fixed margins (no automargin), so step
s sits at the same x on screen in every view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app.core.formatting import byte_unit

__all__ = ["STEP_AXIS_MARGIN", "apply_range", "binary_ticks", "step_axis"]

#: Left/right margins of every figure with a step axis (curves, timeline, layouts).
STEP_AXIS_MARGIN: dict[str, int] = {"l": 84, "r": 20}


def binary_ticks(max_bytes: float, target: int = 6) -> tuple[list[float], list[str]]:
    """Tick positions (bytes) on binary-aligned values, with labels like ``'1.5 GiB'``.

    Examples
    --------
    >>> binary_ticks(3 * 2**20)[1]
    ['0 B', '512 KiB', '1 MiB', '1.5 MiB', '2 MiB', '2.5 MiB', '3 MiB']
    """
    if max_bytes <= 0:
        return [0.0], ["0 B"]
    raw = max_bytes / target
    step = 2.0 ** np.ceil(np.log2(raw))  # power of two
    if max_bytes / (step / 2) <= target + 1 and step >= 2:
        step /= 2
    vals = list(np.arange(0, max_bytes + step * 0.999, step))
    texts = []
    for v in vals:
        if v == 0:
            texts.append("0 B")
            continue
        div, name = byte_unit(v)
        texts.append(f"{v / div:g} {name}")
    return [float(v) for v in vals], texts


def step_axis(fig: go.Figure, n_steps: int) -> None:
    """The shared step axis: fixed margins, whole range ``[0, n_steps]``."""
    fig.update_layout(margin=STEP_AXIS_MARGIN)
    fig.update_yaxes(automargin=False)
    fig.update_xaxes(range=[0, max(n_steps, 1)], autorange=False)


def apply_range(fig: go.Figure, x_range: Sequence[float] | None) -> None:
    """Show the window ``x_range`` of the step axis (the whole axis when ``None``)."""
    if x_range is not None:
        fig.update_xaxes(range=[float(x_range[0]), float(x_range[1])], autorange=False)
