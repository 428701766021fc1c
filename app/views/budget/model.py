"""The frontier's methods in words (roam, the checkpointing recipes, torch's min-cut)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BASELINE_LABELS", "MIN_CUT", "FrontierRecord", "method_label"]

#: A frontier as stored (JSON; see :func:`app.views.budget.data.frontier`).
FrontierRecord = Mapping[str, Any]

MIN_CUT = "torch_min_cut_"  # method prefix of torch's partitioner points


#: Words for the baseline policies of :mod:`roam_core.recompute.baselines`.
BASELINE_LABELS = {
    "none": "no recomputation",
    "checkpoint_blocks": "checkpoint every block",
    "checkpoint_every_2": "checkpoint every 2nd block",
    "sqrt_segments": "sqrt(n) segments (Chen 2016)",
    "checkpoint_sequential": "checkpoint_sequential (4 segments)",
    "selective_attention": "selective attention core (Korthikanti 2022)",
}


def method_label(method: str) -> str:
    """A frontier method in words (``torch_min_cut_0.3`` -> ``torch min-cut, budget 0.3``)."""
    if method.startswith(MIN_CUT):
        return f"torch min-cut, budget {method[len(MIN_CUT):]}"
    return BASELINE_LABELS.get(method, method)

