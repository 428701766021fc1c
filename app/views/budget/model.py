"""The frontier's methods in words (roam, the checkpointing recipes, torch's min-cut)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roam_core.recompute.baselines import BASELINES

__all__ = ["BASELINE_LABELS", "MIN_CUT", "OWN_SEARCH", "FrontierRecord", "method_label"]

#: A frontier as stored (JSON; see :func:`app.views.budget.data.frontier`).
FrontierRecord = Mapping[str, Any]

MIN_CUT = "torch_min_cut_"  # method prefix of torch's partitioner points


#: Words for the baseline policies (the registry of :mod:`roam_core.recompute.baselines`).
BASELINE_LABELS = {name: b.description for name, b in BASELINES.items()}


#: Where a roam point's drop set came from (``FrontierPoint.kept``), in words.
OWN_SEARCH = {"roam": "roam's own search", "roam+swap": "roam's own search, then swaps"}


def method_label(method: str) -> str:
    """A frontier method in words (``torch_min_cut_0.3`` -> ``torch min-cut, budget 0.3``).

    >>> method_label("roam+swap"), method_label("torch_min_cut_0.3")
    ("roam's own search, then swaps", 'torch min-cut, budget 0.3')
    """
    method = method.removesuffix(", fewest FLOPs")
    if method.startswith(MIN_CUT):
        return f"torch min-cut, budget {method[len(MIN_CUT):]}"
    return OWN_SEARCH.get(method) or BASELINE_LABELS.get(method, method)

