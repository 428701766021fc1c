"""Colours and the base layout of every figure, and the figure that says "nothing yet"."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

__all__ = ["BASE_LAYOUT", "KIND_COLORS", "PHASE_COLORS", "empty_figure"]

KIND_COLORS: dict[str, str] = {
    "parameter": "#4c72b0", "buffer": "#8172b3", "input": "#937860", "activation": "#dd8452",
    "gradient": "#55a868", "optimizer_state": "#c44e52", "temporary": "#da8bc3",
    "output": "#8c8c8c",
    # data-parallel staging (gathered parameters, all-gather / reduce-scatter / bucket buffers)
    "communication": "#17becf",
}


PHASE_COLORS: dict[str, str] = {
    "forward": "#4c72b0", "loss": "#937860", "backward": "#dd8452", "optimizer": "#55a868",
    "other": "#8c8c8c",
}


#: The layout every figure starts from.
BASE_LAYOUT: dict[str, Any] = {
    "template": "plotly_white", "margin": {"l": 70, "r": 20, "t": 64, "b": 40},
    "hovermode": "closest",
    "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
}


def empty_figure(message: str = "nothing to show yet") -> go.Figure:
    """A blank figure carrying a centred message."""
    fig = go.Figure(layout=BASE_LAYOUT)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font={"size": 14, "color": "#666"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
