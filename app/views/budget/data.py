"""The frontier of a stored graph: roam at several memory budgets, every checkpointing recipe
and (for a zoo model's trace) torch's min-cut partitioner, planned in a background job.

Every plan is stored in the cache; the frontier is one JSON record cached by graph and
settings (:func:`frontier_key`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.analysis.settings import PlanSettings
from app.core import state
from app.core.formatting import fmt_bytes
from app.views.budget.model import FrontierRecord, method_label
from roam_core.model.graph import Graph, TensorId
from roam_core.model.plan import Plan

__all__ = ["frontier", "frontier_key", "frontier_rows"]

#: ``progress(done, total, text)`` of the frontier job.
Progress = Callable[[int, int, str], None]


# ------------------------------------------------------------------ service (no Dash)
def frontier_key(graph_key: str, settings: PlanSettings, budgets: int,
                 min_cut: bool = True) -> str:
    """Cache key of a frontier: graph, planner settings, the number of budgets and whether
    torch's min-cut baseline was asked for."""
    blob = json.dumps([graph_key, settings.as_dict(), int(budgets)]
                      + ([] if min_cut else ["no-min-cut"]), sort_keys=True).encode()
    return "fr-" + hashlib.sha256(blob).hexdigest()[:32]


def _min_cut_baselines(graph: Graph, progress: Progress | None, total: int
                       ) -> tuple[Mapping[str, Sequence[TensorId]], list[str]]:
    """torch's min-cut drop sets for a zoo model's trace (else none, with the reason)."""
    if (graph.origin or {}).get("source") != "zoo":
        return {}, ["baseline torch_min_cut: not applicable (the graph is not a zoo model's "
                    "trace: torch's partitioner needs the model)"]
    try:
        from roam_core.trace.min_cut import MIN_CUT_BUDGETS
        from roam_core.zoo.min_cut import min_cut_baselines
    except ImportError as e:
        return {}, [f"baseline torch_min_cut: not applicable (torch is not installed: {e})"]
    if progress is not None:
        progress(0, total, "torch's min-cut partitioner: tracing the model again with AOT "
                           "autograd")
    _, extra, notes = min_cut_baselines(graph, MIN_CUT_BUDGETS)
    return extra, notes


def frontier(graph_key: str, settings: PlanSettings, budgets: int = 8,
             progress: Progress | None = None,
             min_cut: bool = True) -> str:
    """Plan the frontier of a stored graph (or find it cached); returns its cache key.

    With ``min_cut`` and a graph traced from the zoo, torch's min-cut partitioner
    (:mod:`roam_core.zoo.min_cut`) adds one baseline per ``activation_memory_budget``.
    The stored record is ``{"graph", "graph_name", "step_flops", "points": [{"method",
    "label", "peak_bytes", "extra_flops", "extra_pct", "budget_bytes", "recomputed_ops",
    "extra_bytes_moved", "kept", "plan_key"}], "notes"}``; every plan is stored under its
    ``plan_key``.
    """
    from roam_core.planner.budget_frontier import recompute_frontier
    from roam_core.planner.config import PlannerConfig
    from roam_core.recompute.baselines import BASELINES

    key = frontier_key(graph_key, settings, budgets, min_cut)
    if state.get_json(key) is not None:
        return key
    graph = state.get_graph(graph_key)
    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    # one plain plan, one per baseline, one per budget (plus a roam point at each baseline's
    # memory): the count of planner calls is the progress bar
    total = 1 + 2 * len(BASELINES) + int(budgets)
    extra: Mapping[str, Sequence[TensorId]] = {}
    mc_notes: list[str] = []
    if min_cut:
        extra, mc_notes = _min_cut_baselines(graph, progress, total)
        total += 2 * len(extra)
    calls = [0]

    def counted(_graph: object) -> None:
        calls[0] += 1
        if progress is not None:
            what = "plan without recomputation" if calls[0] == 1 else (
                f"plan {calls[0]} (baselines, then roam at each budget)")
            progress(min(calls[0], total - 1), total, f"{what}: {calls[0]}/~{total}")

    plans: dict[str, Plan] = {}
    sf, points, notes = recompute_frontier(graph, cfg, budgets=int(budgets), plans=plans,
                                           extra_baselines=extra, on_plan=counted)
    keys = {label: state.put_plan(p) for label, p in plans.items()}
    out = []
    for p in points:
        label = p.method if p.method != "roam" else (
            f"roam-flops@{p.budget_bytes}" if p.kept.endswith(", fewest FLOPs")
            else f"roam@{p.budget_bytes}")  # the fewest-FLOPs point beside the objective's
        out.append({"method": p.method, "label": label, "peak_bytes": int(p.peak_bytes),
                    "extra_flops": int(p.extra_flops),
                    "extra_pct": 100.0 * p.extra_flops / max(sf, 1),
                    "budget_bytes": p.budget_bytes, "recomputed_ops": int(p.recomputed_ops),
                    "extra_bytes_moved": int(p.extra_bytes_moved), "kept": p.kept,
                    "plan_key": keys.get(label)})
    state.put_json(key, {"graph": graph_key, "graph_name": graph.name, "step_flops": int(sf),
                         "points": out, "notes": list(notes) + mc_notes})
    if progress is not None:
        progress(total, total, f"done: {len(out)} points")
    return key


def frontier_rows(record: FrontierRecord) -> list[dict[str, Any]]:
    """Table rows of a frontier record (roam first, by peak; then the baselines)."""
    pts = sorted(record.get("points") or [],
                 key=lambda p: (p["method"] != "roam", -p["peak_bytes"]))
    return [{"method": "roam" if p["method"] == "roam" else method_label(p["method"]),
             "budget": fmt_bytes(p["budget_bytes"]) if p["budget_bytes"] is not None else "",
             "peak": fmt_bytes(p["peak_bytes"]), "extra_pct": round(p["extra_pct"], 3),
             "recomputed_ops": p["recomputed_ops"],
             "moved": fmt_bytes(p.get("extra_bytes_moved") or 0),
             "kept": "" if p["method"] != "roam" or p.get("kept") in (None, "roam") else
             f"from {method_label(p['kept'])}",
             "plan_key": p["plan_key"]} for p in pts]

