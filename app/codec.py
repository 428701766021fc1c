"""Plan <-> JSON text for the app: ``roam_core.plan_io`` when present, else a stand-in.

The stand-in keeps the app usable while ``plan_io`` is being written; both sides of the
cache go through :func:`dumps_plan` / :func:`loads_plan` so the switch is invisible.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from typing import Any

from roam_core.errors import PlanFormatError
from roam_core.graph import ControlEdge, EdgeReason, Graph, OpId, round_size
from roam_core.plan import Plan, SolveRecord

__all__ = ["dumps_plan", "has_plan_io", "loads_plan", "plan_to_csv"]

_logger = logging.getLogger(__name__)
_FORMAT = "roam-plan-app"


def has_plan_io() -> bool:
    """True when ``roam_core.plan_io`` is importable."""
    try:
        import roam_core.plan_io  # noqa: F401
    except ImportError:
        return False
    return True


def dumps_plan(plan: Plan) -> str:
    """Serialise a plan to JSON text."""
    if has_plan_io():
        from roam_core import plan_io

        return plan_io.dumps_plan(plan)
    body: dict[str, Any] = {
        "format": _FORMAT,
        "graph_fingerprint": plan.graph_fingerprint,
        "graph_name": plan.graph_name,
        "method": plan.method,
        "order": list(plan.order),
        "offsets": dict(plan.offsets),
        "alignment_bytes": plan.alignment_bytes,
        "arena_bytes": plan.arena_bytes,
        "planned_peak_bytes": plan.planned_peak_bytes,
        "resident_bytes": plan.resident_bytes,
        "baseline_peak_bytes": plan.baseline_peak_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "live_bytes": list(plan.live_bytes),
        "solve_seconds": plan.solve_seconds,
        "task_tree": plan.task_tree,
        "task_of_op": dict(plan.task_of_op),
        "extra_edges": [[e.src, e.dst, e.reason.value] for e in plan.extra_edges],
        "provenance": [
            [r.stage, r.task_id, r.status, r.objective, r.best_bound, r.wall_time_s, r.size]
            for r in plan.provenance
        ],
        "settings": dict(plan.settings),
        "notes": list(plan.notes),
    }
    return json.dumps(body, separators=(",", ":"))


def loads_plan(text: str | bytes, graph: Graph | None = None) -> Plan:
    """Parse plan JSON; with ``graph``, refuse a plan made for another graph.

    Raises
    ------
    PlanFormatError
        Unparseable text, wrong format, or a fingerprint mismatch.
    """
    if has_plan_io():
        from roam_core import plan_io

        return plan_io.loads_plan(text, graph)
    try:
        d = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlanFormatError(f"plan file is not valid JSON: {e}") from e
    if not isinstance(d, dict) or d.get("format") != _FORMAT:
        raise PlanFormatError("not a roam plan file (missing or wrong 'format')")
    try:
        plan = Plan(
            graph_fingerprint=d["graph_fingerprint"], graph_name=d["graph_name"],
            method=d["method"], order=tuple(OpId(o) for o in d["order"]),
            offsets={k: int(v) for k, v in d["offsets"].items()},
            alignment_bytes=int(d["alignment_bytes"]), arena_bytes=int(d["arena_bytes"]),
            planned_peak_bytes=int(d["planned_peak_bytes"]),
            resident_bytes=int(d["resident_bytes"]),
            baseline_peak_bytes=int(d["baseline_peak_bytes"]),
            lower_bound_bytes=int(d["lower_bound_bytes"]),
            live_bytes=tuple(int(x) for x in d["live_bytes"]),
            solve_seconds=float(d["solve_seconds"]), task_tree=d.get("task_tree"),
            task_of_op=dict(d.get("task_of_op", {})),
            extra_edges=tuple(ControlEdge(OpId(a), OpId(b), EdgeReason(r))
                              for a, b, r in d.get("extra_edges", [])),
            provenance=tuple(SolveRecord(*r) for r in d.get("provenance", [])),
            settings=dict(d.get("settings", {})), notes=tuple(d.get("notes", [])),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise PlanFormatError(f"plan file is malformed: {e!r}") from e
    if graph is not None and plan.graph_fingerprint != graph.fingerprint():
        raise PlanFormatError(
            f"plan was made for another graph (fingerprint {plan.graph_fingerprint[:12]}…, "
            f"loaded graph {graph.fingerprint()[:12]}…)")
    return plan


def plan_to_csv(plan: Plan, graph: Graph) -> str:
    """MiniMalloc CSV (``id,lower,upper,size,alignment,offset``) of the planned storages."""
    if has_plan_io():
        from roam_core import plan_io

        return plan_io.plan_to_csv(plan, graph)
    from roam_core.simulate import lifetimes

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "lower", "upper", "size", "alignment", "offset"])
    for tid, lt in lifetimes(graph, plan.order).items():
        size = round_size(graph.tensors[tid].size_bytes, plan.alignment_bytes)
        w.writerow([tid, lt.start, lt.end, size, plan.alignment_bytes,
                    plan.offsets.get(tid, 0)])
    return buf.getvalue()
