"""Versioned JSON plan files (gzip accepted) and MiniMalloc CSV export of a plan's layout.

Format (``schema_version`` 2; version 1 files, without recomputation, load too)::

    {
      "format": "roam-plan", "schema_version": 2,
      "graph_fingerprint": "3fa4...", "graph_name": "mlp", "method": "roam",
      "order": ["a", "b", ...],
      "offsets": {"a": 0, "w": 4096, ...},
      "alignment_bytes": 512, "arena_bytes": 8192, "planned_peak_bytes": 8192,
      "resident_bytes": 4096, "baseline_peak_bytes": 9216, "lower_bound_bytes": 8192,
      "live_bytes": [512, ...], "solve_seconds": 1.5,
      "task_tree": {...} | null, "task_of_op": {"a": "t0", ...},
      "extra_edges": [{"src": "a", "dst": "b", "reason": "weight_update"}],
      "provenance": [{"stage": "layout", "task_id": "global", "status": "optimal",
                      "objective": 8192, "best_bound": 8192, "wall_time_s": 0.1, "size": 3}],
      "settings": {...}, "notes": ["..."],
      "recompute": [{"id": "relu@r", "source": "relu", "inputs": ["mm"],
                     "outputs": ["relu@r"], "readers": ["threshold_backward"]}],
      "extra_flops": 0, "step_flops": 123456,
      "extra_seconds": 0.0, "step_seconds": 0.0012, "device_profile": "h100-sxm",
      "stages": [{"stage": "layout.greedy", "wall_s": 0.1, "cpu_s": 0.1,
                  "gained_bytes": 0, "work_done": 1, "work_limit": 0,
                  "work_unit": "passes", "stopped": "at_bound"}]
    }

The three time fields (the cost model's estimates) and ``stages`` (what each planner stage
spent and gained) are optional: plans written before them load with 0, ``""`` and none.

Every problem raises :class:`~roam_core.base.errors.PlanFormatError` naming the field.  With a
graph, a plan made for another graph is refused, naming both graphs ("plan was made for graph
'mlp', not for this graph 'tiny_gpt'").
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

from roam_core.base.atomic import atomic_write
from roam_core.base.checks import require_type
from roam_core.base.errors import PlanFormatError
from roam_core.base.safe_gzip import gunzip_bounded, is_gzip
from roam_core.base.user_files import read_user_bytes
from roam_core.formats.dsa_csv import dumps_problem
from roam_core.formats.json_scan import decode_text, loads_bounded
from roam_core.formats.limits import FileLimits
from roam_core.formats.plan_fields import PLAN_FORMAT, PLAN_SCHEMA_VERSION, PlanReader
from roam_core.model.dsa import Buffer, Problem, Solution
from roam_core.model.graph import Graph, round_size
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import expand_graph
from roam_core.oracle.simulate import lifetimes

__all__ = [
    "PLAN_SCHEMA_VERSION",
    "dumps_plan",
    "load_plan",
    "loads_plan",
    "plan_from_dict",
    "plan_to_csv",
    "plan_to_dict",
    "problem_from_plan",
    "save_plan",
]



def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Plain-JSON dict of a plan (the inverse of :func:`plan_from_dict`)."""
    require_type(plan, Plan, "plan_to_dict: plan", PlanFormatError)
    return {
        "format": PLAN_FORMAT,
        "schema_version": PLAN_SCHEMA_VERSION,
        "graph_fingerprint": plan.graph_fingerprint,
        "graph_name": plan.graph_name,
        "method": plan.method,
        "order": list(plan.order),
        "offsets": {str(k): int(v) for k, v in plan.offsets.items()},
        "alignment_bytes": plan.alignment_bytes,
        "arena_bytes": plan.arena_bytes,
        "planned_peak_bytes": plan.planned_peak_bytes,
        "resident_bytes": plan.resident_bytes,
        "baseline_peak_bytes": plan.baseline_peak_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "proven_gap": plan.proven_gap,
        "live_bytes": [int(x) for x in plan.live_bytes],
        "solve_seconds": plan.solve_seconds,
        "task_tree": None if plan.task_tree is None else dict(plan.task_tree),
        "task_of_op": {str(k): str(v) for k, v in plan.task_of_op.items()},
        "extra_edges": [{"src": e.src, "dst": e.dst, "reason": e.reason.value}
                        for e in plan.extra_edges],
        "provenance": [
            {"stage": r.stage, "task_id": r.task_id, "status": r.status,
             "objective": r.objective, "best_bound": r.best_bound,
             "wall_time_s": r.wall_time_s, "size": r.size}
            for r in plan.provenance
        ],
        "settings": dict(plan.settings),
        "notes": list(plan.notes),
        "recompute": [
            {"id": r.id, "source": r.source, "inputs": list(r.inputs),
             "outputs": list(r.outputs), "readers": list(r.readers)}
            for r in plan.recompute
        ],
        "extra_flops": int(plan.extra_flops),
        "step_flops": int(plan.step_flops),
        "extra_seconds": float(plan.extra_seconds),
        "step_seconds": float(plan.step_seconds),
        "device_profile": plan.device_profile,
        "stages": [
            {"stage": c.stage, "wall_s": c.wall_s, "cpu_s": c.cpu_s,
             "gained_bytes": int(c.gained_bytes), "work_done": int(c.work_done),
             "work_limit": int(c.work_limit), "work_unit": c.work_unit, "stopped": c.stopped}
            for c in plan.stages
        ],
    }


def dumps_plan(plan: Plan, *, indent: int | None = None) -> str:
    """Serialise a plan to JSON text.

    Examples
    --------
    >>> from roam_core.model.plan import Plan
    >>> p = Plan("f" * 64, "g", "eager", ("a",), {"a": 0}, 512, 512, 512, 0, 512, 512)
    >>> loads_plan(dumps_plan(p)) == p
    True
    """
    return json.dumps(plan_to_dict(plan), indent=indent, separators=None if indent else
                      (",", ":"), default=_json_default)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def save_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write a plan file atomically; a name ending in ``.gz`` is gzip-compressed.

    Raises
    ------
    OutputError
        The file cannot be written (the previous file, if any, is kept).
    """
    if not isinstance(plan, Plan):
        raise PlanFormatError(f"save_plan needs a Plan, not {type(plan).__name__}")
    raw = dumps_plan(plan).encode()
    if os.fspath(path).endswith(".gz"):
        raw = gzip.compress(raw, compresslevel=6, mtime=0)
    atomic_write(path, raw, what="plan file")


def load_plan(path: str | os.PathLike[str], graph: Graph | None = None, *,
              limits: FileLimits | None = None) -> Plan:
    """Read a plan file (JSON or gzip JSON, a regular file within ``limits``); see
    :func:`loads_plan`."""
    if not isinstance(path, (str, os.PathLike)):
        raise PlanFormatError(f"load_plan needs a path, not {type(path).__name__}")
    lim = limits if limits is not None else FileLimits.from_env()
    data = read_user_bytes(path, PlanFormatError, "plan file",
                           max_file_bytes=lim.max_file_bytes,
                           max_decompressed_bytes=lim.max_json_bytes)
    return loads_plan(data, graph, limits=lim)


def loads_plan(data: bytes | str, graph: Graph | None = None, *,
               limits: FileLimits | None = None) -> Plan:
    """Parse plan JSON (bytes may be gzip-compressed).

    Parameters
    ----------
    data : bytes or str
        The file contents.
    graph : Graph, optional
        When given, the plan must have been made for it (same fingerprint).
    limits : FileLimits, optional
        Size limits (default: :meth:`FileLimits.from_env`).

    Raises
    ------
    PlanFormatError
        Not JSON, wrong format or schema version, a missing or mistyped field (named), an
        integer out of range, or a fingerprint that does not match ``graph``.
    """
    if not isinstance(data, (bytes, bytearray, str)):
        raise PlanFormatError(f"loads_plan needs bytes or str, not {type(data).__name__}")
    if graph is not None and not isinstance(graph, Graph):
        raise PlanFormatError(f"loads_plan: graph must be a Graph, not {type(graph).__name__}")
    lim = limits if limits is not None else FileLimits.from_env()
    if not isinstance(data, str) and is_gzip(data):
        data = gunzip_bounded(bytes(data), PlanFormatError, "plan file", lim.max_json_bytes)
    if len(data) > lim.max_json_bytes:
        raise PlanFormatError(f"plan file has {len(data):,} bytes of JSON, over the limit of "
                              f"{lim.max_json_bytes:,}")
    obj = loads_bounded(decode_text(data, PlanFormatError, "plan file"), PlanFormatError,
                        "plan file")
    plan = plan_from_dict(obj, limits=lim)
    if graph is not None and plan.graph_fingerprint != graph.fingerprint():
        same = plan.graph_name == graph.name
        raise PlanFormatError(
            f"plan was made for graph '{plan.graph_name}', not for this graph "
            f"'{graph.name}'" + (" (same name, different contents: another batch size, "
                                 "optimizer or version of it)" if same else ""))
    return plan


def plan_from_dict(obj: Any, *, limits: FileLimits | None = None) -> Plan:
    """Build a :class:`Plan` from a parsed JSON object, checking every field (type, range,
    Unicode); every problem is a :class:`PlanFormatError` naming the field."""
    return PlanReader(limits if limits is not None else FileLimits.from_env()).plan(obj)


# ------------------------------------------------------------------ CSV export
def problem_from_plan(plan: Plan, graph: Graph) -> tuple[Problem, Solution]:
    """The plan's planned (non-resident) storages as a DSA problem and its solution.

    Lifetimes come from the plan's order; sizes are rounded to ``plan.alignment_bytes``;
    offsets are relative to the plan's arena (resident storages sit below, so they are
    not buffers here).  Zero-byte storages are left out.

    Raises
    ------
    PlanFormatError
        The plan lacks an offset for a planned storage.
    """
    graph = expand_graph(graph, plan.recompute)
    lts = lifetimes(graph, plan.order)
    buffers: list[Buffer] = []
    offs: list[int] = []
    for tid, lt in lts.items():
        size = round_size(graph.tensors[tid].size_bytes, plan.alignment_bytes)
        if not size:
            continue
        if tid not in plan.offsets:
            raise PlanFormatError(f"plan has no offset for storage {tid!r}")
        buffers.append(Buffer(str(tid), lt.start, lt.end, size, plan.alignment_bytes))
        offs.append(int(plan.offsets[tid]))
    problem = Problem(tuple(buffers), plan.arena_bytes)
    return problem, Solution.from_offsets(problem, offs)


def plan_to_csv(plan: Plan, graph: Graph) -> str:
    """MiniMalloc CSV (``id,lower,upper,size,alignment,offset``) of the planned storages."""
    problem, solution = problem_from_plan(plan, graph)
    return dumps_problem(problem, solution)
