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
      "extra_flops": 0, "step_flops": 123456
    }

Every problem raises :class:`~roam_core.base.errors.PlanFormatError` naming the field.  With a
graph, a plan made for another graph is refused, naming both graphs ("plan was made for graph
'mlp', not for this graph 'tiny_gpt'").
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from typing import Any

from roam_core.base.errors import PlanFormatError
from roam_core.base.safe_gzip import gunzip_bounded
from roam_core.base.status import SolveStatus
from roam_core.formats.dsa_csv import dumps_problem
from roam_core.model.dsa import Buffer, Problem, Solution
from roam_core.model.graph import ControlEdge, EdgeReason, Graph, OpId, TensorId, round_size
from roam_core.model.plan import Plan, SolveRecord
from roam_core.model.recompute_ops import RecomputeOp, expand_graph
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

PLAN_SCHEMA_VERSION = 2
#: Versions this roam reads (1: no recomputation fields).
READABLE_PLAN_VERSIONS = (1, 2)
_FORMAT = "roam-plan"


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Plain-JSON dict of a plan (the inverse of :func:`plan_from_dict`)."""
    return {
        "format": _FORMAT,
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
    """Write a plan file; a name ending in ``.gz`` is gzip-compressed."""
    raw = dumps_plan(plan).encode()
    if os.fspath(path).endswith(".gz"):
        raw = gzip.compress(raw, compresslevel=6, mtime=0)
    with open(path, "wb") as f:
        f.write(raw)


def load_plan(path: str | os.PathLike[str], graph: Graph | None = None) -> Plan:
    """Read a plan file (JSON or gzip JSON); see :func:`loads_plan`."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PlanFormatError(f"cannot read plan file {os.fspath(path)!r}: {e.strerror}") from e
    return loads_plan(data, graph)


def loads_plan(data: bytes | str, graph: Graph | None = None) -> Plan:
    """Parse plan JSON (bytes may be gzip-compressed).

    Parameters
    ----------
    data : bytes or str
        The file contents.
    graph : Graph, optional
        When given, the plan must have been made for it (same fingerprint).

    Raises
    ------
    PlanFormatError
        Not JSON, wrong format or schema version, a missing or mistyped field (named), or a
        fingerprint that does not match ``graph``.
    """
    if isinstance(data, bytes):
        if data[:2] == b"\x1f\x8b":
            data = gunzip_bounded(data, PlanFormatError, "plan file")
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise PlanFormatError("plan file is not UTF-8 text") from None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as e:
        raise PlanFormatError(f"plan file is not JSON: {e}") from None
    plan = plan_from_dict(obj)
    if graph is not None and plan.graph_fingerprint != graph.fingerprint():
        same = plan.graph_name == graph.name
        raise PlanFormatError(
            f"plan was made for graph '{plan.graph_name}', not for this graph "
            f"'{graph.name}'" + (" (same name, different contents: another batch size, "
                                 "optimizer or version of it)" if same else ""))
    return plan


def _field(d: Mapping[str, Any], key: str, types: type | tuple[type, ...], *,
           default: Any = ...) -> Any:
    if key not in d:
        if default is ...:
            raise PlanFormatError(f"plan file: missing field {key!r}")
        return default
    v = d[key]
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise PlanFormatError(f"plan file: field {key!r} has type bool")
    if not isinstance(v, types):
        raise PlanFormatError(f"plan file: field {key!r} has type {type(v).__name__}")
    return v


def _int(d: Mapping[str, Any], key: str, *, default: Any = ...) -> int:
    v = _field(d, key, int, default=default)
    if v < 0:
        raise PlanFormatError(f"plan file: field {key!r} is negative ({v})")
    return int(v)


def plan_from_dict(obj: Any) -> Plan:
    """Build a :class:`Plan` from a parsed JSON object, checking every field."""
    if not isinstance(obj, dict):
        raise PlanFormatError("plan file: top level is not an object")
    if obj.get("format") != _FORMAT:
        raise PlanFormatError(f"plan file: field 'format' is {obj.get('format')!r}, "
                              f"expected {_FORMAT!r}")
    version = obj.get("schema_version")
    if version not in READABLE_PLAN_VERSIONS or isinstance(version, bool):
        raise PlanFormatError(f"plan file: field 'schema_version' is {version!r}, this roam "
                              f"reads {', '.join(map(str, READABLE_PLAN_VERSIONS))}")
    order = _field(obj, "order", list)
    if not all(isinstance(x, str) for x in order):
        raise PlanFormatError("plan file: field 'order' must list op ids (strings)")
    offsets = _field(obj, "offsets", dict)
    for k, v in offsets.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise PlanFormatError(f"plan file: field 'offsets' entry {k!r} is not an integer")
    live = _field(obj, "live_bytes", list, default=[])
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in live):
        raise PlanFormatError("plan file: field 'live_bytes' must list integers")
    tree = _field(obj, "task_tree", (dict, type(None)), default=None)
    task_of_op = _field(obj, "task_of_op", dict, default={})
    edges = []
    for i, e in enumerate(_field(obj, "extra_edges", list, default=[])):
        try:
            edges.append(ControlEdge(OpId(str(e["src"])), OpId(str(e["dst"])),
                                     EdgeReason(e["reason"])))
        except (KeyError, TypeError, ValueError):
            raise PlanFormatError(f"plan file: field 'extra_edges' entry {i} is malformed"
                                  ) from None
    prov = []
    for i, r in enumerate(_field(obj, "provenance", list, default=[])):
        if isinstance(r, dict) and SolveStatus.parse(r.get("status")) is None:
            raise PlanFormatError(f"plan file: field 'provenance' entry {i} has status "
                                  f"{r.get('status')!r}; known: "
                                  f"{', '.join(s.value for s in SolveStatus)}")
        try:
            prov.append(SolveRecord(
                str(r["stage"]), str(r["task_id"]), SolveStatus(r["status"]),
                None if r.get("objective") is None else int(r["objective"]),
                None if r.get("best_bound") is None else int(r["best_bound"]),
                float(r["wall_time_s"]), int(r.get("size", 0))))
        except (KeyError, TypeError, ValueError):
            raise PlanFormatError(f"plan file: field 'provenance' entry {i} is malformed"
                                  ) from None
    notes = _field(obj, "notes", list, default=[])
    rops = []
    for i, r in enumerate(_field(obj, "recompute", list, default=[])):
        try:
            lists = [r[k] for k in ("inputs", "outputs", "readers")]
            if not all(isinstance(x, list) and all(isinstance(y, str) for y in x)
                       for x in lists) or not isinstance(r["id"], str) \
                    or not isinstance(r["source"], str):
                raise TypeError
            rops.append(RecomputeOp(OpId(r["id"]), OpId(r["source"]), tuple(lists[0]),
                                    tuple(lists[1]), tuple(OpId(x) for x in lists[2])))
        except (KeyError, TypeError):
            raise PlanFormatError(f"plan file: field 'recompute' entry {i} is malformed"
                                  ) from None
    solve_s = _field(obj, "solve_seconds", (int, float), default=0.0)
    return Plan(
        graph_fingerprint=_field(obj, "graph_fingerprint", str),
        graph_name=_field(obj, "graph_name", str, default="graph"),
        method=_field(obj, "method", str),
        order=tuple(OpId(x) for x in order),
        offsets={TensorId(k): int(v) for k, v in offsets.items()},
        alignment_bytes=_int(obj, "alignment_bytes"),
        arena_bytes=_int(obj, "arena_bytes"),
        planned_peak_bytes=_int(obj, "planned_peak_bytes"),
        resident_bytes=_int(obj, "resident_bytes"),
        baseline_peak_bytes=_int(obj, "baseline_peak_bytes"),
        lower_bound_bytes=_int(obj, "lower_bound_bytes"),
        live_bytes=tuple(int(x) for x in live),
        solve_seconds=float(solve_s),
        task_tree=tree,
        task_of_op={OpId(str(k)): str(v) for k, v in task_of_op.items()},
        extra_edges=tuple(edges),
        provenance=tuple(prov),
        settings=_field(obj, "settings", dict, default={}),
        notes=tuple(str(x) for x in notes),
        recompute=tuple(rops),
        extra_flops=_int(obj, "extra_flops", default=0),
        step_flops=_int(obj, "step_flops", default=0),
    )


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
