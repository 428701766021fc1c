"""The frontier of a stored graph: roam at several memory budgets, every checkpointing recipe
and (for a zoo model's trace) torch's min-cut partitioner, planned in a background job.

Every plan is stored in the cache; the frontier is one JSON record cached by graph and
settings (:func:`frontier_key`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.analysis.settings import PlanSettings
from app.core import state
from app.core.formatting import fmt_bytes
from app.views.budget.model import OWN_SEARCH, FrontierRecord, method_label
from roam_core.base.cancel import CancelFlag
from roam_core.model.graph import Graph, TensorId
from roam_core.model.plan import Plan

__all__ = ["frontier", "frontier_key", "frontier_rows", "frontiers_made"]

#: ``progress(done, total, text)`` of the frontier job.
Progress = Callable[[int, int, str], None]


# ------------------------------------------------------------------ service (no Dash)
def frontier_key(graph_key: str, settings: PlanSettings, budgets: int,
                 min_cut: bool = True) -> str:
    """Cache key of a frontier: graph, planner settings, the number of budgets and whether
    torch's min-cut baseline was asked for."""
    blob = json.dumps([graph_key, settings.as_dict(), int(budgets), "time-v1"]
                      + ([] if min_cut else ["no-min-cut"]), sort_keys=True).encode()
    return "fr-" + hashlib.sha256(blob).hexdigest()[:32]


def _index_key(graph_key: str) -> str:
    return f"fr-index-{graph_key}"


def _remember(graph_key: str, key: str) -> None:
    index = _index_key(graph_key)
    keys = state.get_json(index, [])
    if key not in keys:
        state.put_json(index, [*keys, key])


def frontiers_made(graph_key: str) -> list[str]:
    """Keys of every frontier record of ``graph_key`` this session made or opened (any
    settings or number of budgets, on any page load; cancelled ones too), oldest first."""
    return list(state.get_json(_index_key(graph_key), []))


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
             min_cut: bool = True, cancel: CancelFlag | None = None) -> tuple[str, bool]:
    """Plan the frontier of a stored graph (or find it cached): ``(cache key, cancelled)``.

    With ``min_cut`` and a graph traced from the zoo, torch's min-cut partitioner
    (:mod:`roam_core.zoo.min_cut`) adds one baseline per ``activation_memory_budget``.
    ``cancel`` stops it between plans: the points made so far are stored (under a key of
    their own, never the settings' key) and returned with ``cancelled`` true.
    The stored record is ``{"graph", "graph_name", "step_flops", "step_seconds",
    "device_profile", "points": [{"method", "label", "peak_bytes", "extra_seconds",
    "extra_time_pct", "extra_flops", "extra_pct", "budget_bytes", "recomputed_ops",
    "extra_bytes_moved", "kept", "plan_key"}], "notes"}`` (``extra_pct``: FLOPs,
    ``extra_time_pct``: estimated time, both as % of the step); every plan is stored under
    its ``plan_key``.
    """
    from roam_core.planner.budget_frontier import recompute_frontier, step_time
    from roam_core.planner.config import PlannerConfig
    from roam_core.recompute.baselines import BASELINES

    key = frontier_key(graph_key, settings, budgets, min_cut)
    if state.get_json(key) is not None:
        _remember(graph_key, key)
        return key, False
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
                                           extra_baselines=extra, on_plan=counted,
                                           cancel=cancel)
    cancelled = cancel is not None and bool(cancel())
    if cancelled:  # a partial frontier is never the answer for these settings
        key = f"{key}-cancelled-{uuid.uuid4().hex[:8]}"
    keys = {label: state.put_plan(p) for label, p in plans.items()}
    ss, profile = step_time(graph, cfg)
    out = []
    for p in points:
        label = p.method if p.method != "roam" else (
            f"roam-flops@{p.budget_bytes}" if p.kept.endswith(", fewest FLOPs")
            else f"roam@{p.budget_bytes}")  # the fewest-FLOPs point beside the objective's
        out.append({"method": p.method, "label": label, "peak_bytes": int(p.peak_bytes),
                    "extra_seconds": float(p.extra_seconds),
                    "extra_time_pct": 100.0 * p.extra_seconds / max(ss, 1e-12),
                    "extra_flops": int(p.extra_flops),
                    "extra_pct": 100.0 * p.extra_flops / max(sf, 1),
                    "budget_bytes": p.budget_bytes, "recomputed_ops": int(p.recomputed_ops),
                    "extra_bytes_moved": int(p.extra_bytes_moved), "kept": p.kept,
                    "plan_key": keys.get(label)})
    state.put_json(key, {"graph": graph_key, "graph_name": graph.name, "step_flops": int(sf),
                         "step_seconds": ss, "device_profile": profile,
                         "points": out, "notes": list(notes) + mc_notes})
    _remember(graph_key, key)  # the Compare card lists its plans on later page loads too
    if progress is not None:
        progress(calls[0] if cancelled else total, total,
                 f"cancelled after {calls[0]} of ~{total} plans: showing the {len(out)} "
                 "points made" if cancelled else f"done: {len(out)} points")
    return key, cancelled


def frontier_rows(record: FrontierRecord) -> list[dict[str, Any]]:
    """Table rows of a frontier record (roam first, by peak; then the baselines)."""
    pts = sorted(record.get("points") or [],
                 key=lambda p: (p["method"] != "roam", -p["peak_bytes"]))
    return [{"method": "roam" if p["method"] == "roam" else method_label(p["method"]),
             "budget": fmt_bytes(p["budget_bytes"]) if p["budget_bytes"] is not None else "",
             "peak": fmt_bytes(p["peak_bytes"]),
             "extra_ms": round(1e3 * p.get("extra_seconds", 0.0), 4),
             "extra_time_pct": round(p.get("extra_time_pct", 0.0), 3),
             "extra_pct": round(p["extra_pct"], 3),
             "recomputed_ops": p["recomputed_ops"],
             "moved": fmt_bytes(p.get("extra_bytes_moved") or 0),
             "kept": "" if p["method"] != "roam" or p.get("kept") in (None, "roam") else
             ("started from " if p["kept"].removesuffix(", fewest FLOPs") not in OWN_SEARCH
              else "") + method_label(p["kept"])
             + (" (fewest FLOPs)" if p["kept"].endswith(", fewest FLOPs") else ""),
             "plan_key": p["plan_key"]} for p in pts]

