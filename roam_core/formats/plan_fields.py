"""The plan file's fields, checked: :class:`PlanReader`.

Every field is checked for its type, its range (integers below 2**62, finite seconds,
``alignment_bytes >= 1``) and, for strings, valid Unicode; every problem is a
:class:`~roam_core.base.errors.PlanFormatError` naming the field (``"plan file: field
'offsets' entry 'relu' ..."``).  Whether the figures are *true* for the graph is the
validator's question (:func:`roam_core.oracle.validate.check_plan`), not the reader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roam_core.base.errors import PlanFormatError
from roam_core.base.status import SolveStatus
from roam_core.formats.fields import check_float, check_int, check_str, short
from roam_core.formats.json_scan import json_depth_ok
from roam_core.formats.limits import MAX_INT, FileLimits
from roam_core.model.graph import ControlEdge, EdgeReason, OpId, TensorId
from roam_core.model.plan import Plan, SolveRecord
from roam_core.model.recompute_ops import RecomputeOp
from roam_core.model.stage_cost import STOP_REASONS, StageCost

__all__ = ["PLAN_FORMAT", "PLAN_SCHEMA_VERSION", "READABLE_PLAN_VERSIONS", "PlanReader"]

PLAN_SCHEMA_VERSION = 2
#: Versions this roam reads (1: no recomputation fields).
READABLE_PLAN_VERSIONS = (1, 2)
PLAN_FORMAT = "roam-plan"
#: ``task_tree`` and ``settings`` nest at most this deep.
_MAX_DEPTH = 64
#: The byte figures a plan states (each a non-negative integer below 2**62).
_BYTE_FIELDS = ("alignment_bytes", "arena_bytes", "planned_peak_bytes", "resident_bytes",
                "baseline_peak_bytes", "lower_bound_bytes")
_E = PlanFormatError
#: A note is at most this long.
_NOTE_CHARS = 1 << 16


class PlanReader:
    """Checks a parsed plan file and builds the :class:`Plan`.

    Parameters
    ----------
    limits : FileLimits
        ``max_id_chars`` bounds every id.
    """

    def __init__(self, limits: FileLimits) -> None:
        self.n = limits.max_id_chars

    # ------------------------------------------------------------------ fields
    @staticmethod
    def _get(d: Mapping[str, Any], key: str, types: type | tuple[type, ...], *,
             default: Any = ...) -> Any:
        if key not in d:
            if default is ...:
                raise _E(f"plan file: missing field {key!r}")
            return default
        v = d[key]
        ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in (
            types if isinstance(types, tuple) else (types,)))
        if not ok:
            raise _E(f"plan file: field {key!r} has type {type(v).__name__}")
        return v

    def _str(self, v: Any, where: str, *, empty: bool = False) -> str:
        return check_str(v, f"plan file: {where}", _E, max_chars=self.n, empty=empty)

    def _strs(self, v: Any, where: str) -> tuple[str, ...]:
        if not isinstance(v, list):
            raise _E(f"plan file: {where} must be a list of strings, not {short(v)}")
        return tuple(self._str(x, f"{where} entry #{i}") for i, x in enumerate(v))

    @staticmethod
    def _int(v: Any, where: str, *, low: int = 0) -> int:
        return check_int(v, f"plan file: {where}", _E, low=low)

    def _str_map(self, v: Any, where: str) -> dict[str, str]:
        if not isinstance(v, dict):
            raise _E(f"plan file: field {where!r} has type {type(v).__name__}")
        return {self._str(k, f"field {where!r} key"): self._str(x, f"field {where!r} entry "
                                                               f"{short(k)}", empty=True)
                for k, x in v.items()}

    @staticmethod
    def _json(v: Any, where: str) -> Any:
        if not json_depth_ok(v, _MAX_DEPTH):
            raise _E(f"plan file: field {where!r} nests deeper than {_MAX_DEPTH} levels")
        return v

    # ------------------------------------------------------------------ records
    def _offsets(self, v: Any) -> dict[TensorId, int]:
        if not isinstance(v, dict):
            raise _E(f"plan file: field 'offsets' has type {type(v).__name__}")
        out: dict[TensorId, int] = {}
        for k, x in v.items():
            tid = self._str(k, "field 'offsets' key")
            if isinstance(x, bool) or not isinstance(x, int):
                raise _E(f"plan file: field 'offsets' entry {short(tid)} is not an integer")
            out[TensorId(tid)] = self._int(x, f"field 'offsets' entry {short(tid)}")
        return out

    def _edges(self, v: Any) -> tuple[ControlEdge, ...]:
        out = []
        for i, e in enumerate(v):
            where = f"field 'extra_edges' entry {i}"
            if not isinstance(e, dict) or e.get("reason") not in {r.value for r in EdgeReason}:
                raise _E(f"plan file: {where} is malformed")
            out.append(ControlEdge(OpId(self._str(e.get("src"), f"{where} 'src'")),
                                   OpId(self._str(e.get("dst"), f"{where} 'dst'")),
                                   EdgeReason(e["reason"])))
        return tuple(out)

    def _record(self, r: Any, i: int) -> SolveRecord:
        where = f"field 'provenance' entry {i}"
        if not isinstance(r, dict):
            raise _E(f"plan file: {where} is malformed")
        status = r.get("status")
        if not isinstance(status, str) or SolveStatus.parse(status) is None:
            raise _E(f"plan file: {where} has status {short(status)}; known: "
                      f"{', '.join(s.value for s in SolveStatus)}")
        if "stage" not in r or "task_id" not in r or "wall_time_s" not in r:
            raise _E(f"plan file: {where} is malformed")
        bounds = [None if r.get(k) is None else self._int(r[k], f"{where} {k!r}", low=-MAX_INT)
                  for k in ("objective", "best_bound")]
        return SolveRecord(self._str(r["stage"], f"{where} 'stage'"),
                           self._str(r["task_id"], f"{where} 'task_id'", empty=True),
                           SolveStatus(status), bounds[0], bounds[1],
                           check_float(r["wall_time_s"], f"plan file: {where} 'wall_time_s'",
                                       _E),
                           self._int(r.get("size", 0), f"{where} 'size'"))

    def _recompute(self, r: Any, i: int) -> RecomputeOp:
        where = f"field 'recompute' entry {i}"
        if not isinstance(r, dict) or any(k not in r for k in
                                          ("id", "source", "inputs", "outputs", "readers")):
            raise _E(f"plan file: {where} is malformed")
        return RecomputeOp(OpId(self._str(r["id"], f"{where} 'id'")),
                           OpId(self._str(r["source"], f"{where} 'source'")),
                           self._strs(r["inputs"], f"{where} 'inputs'"),
                           self._strs(r["outputs"], f"{where} 'outputs'"),
                           tuple(OpId(x) for x in self._strs(r["readers"],
                                                             f"{where} 'readers'")))

    def _stage(self, r: Any, i: int) -> StageCost:
        where = f"field 'stages' entry {i}"
        if not isinstance(r, dict) or "stage" not in r:
            raise _E(f"plan file: {where} is malformed")
        stopped = r.get("stopped", "done")
        if stopped not in STOP_REASONS:
            raise _E(f"plan file: {where} has stopped {short(stopped)}; known: "
                     f"{', '.join(STOP_REASONS)}")
        secs = [check_float(r.get(k, 0.0), f"plan file: {where} {k!r}", _E)
                for k in ("wall_s", "cpu_s")]
        ints = [self._int(r.get(k, 0), f"{where} {k!r}", low=low)
                for k, low in (("gained_bytes", -MAX_INT), ("work_done", 0), ("work_limit", 0))]
        return StageCost(self._str(r["stage"], f"{where} 'stage'"), secs[0], secs[1],
                         gained_bytes=ints[0], work_done=ints[1], work_limit=ints[2],
                         work_unit=self._str(r.get("work_unit", ""), f"{where} 'work_unit'",
                                             empty=True),
                         stopped=str(stopped))

    # ------------------------------------------------------------------ the plan
    def _header(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise _E("plan file: top level is not an object")
        if obj.get("format") != PLAN_FORMAT:
            raise _E(f"plan file: field 'format' is {short(obj.get('format'))}, expected "
                     f"{PLAN_FORMAT!r}")
        version = obj.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_PLAN_VERSIONS:
            raise _E(f"plan file: field 'schema_version' is {short(version)}, this roam "
                     f"reads {', '.join(map(str, READABLE_PLAN_VERSIONS))}")

    def plan(self, obj: Any) -> Plan:
        """The plan in ``obj`` (a parsed plan file)."""
        self._header(obj)
        g = self._get
        figures = {k: self._int(g(obj, k, int), f"field {k!r}") for k in _BYTE_FIELDS}
        if figures["alignment_bytes"] < 1:
            raise _E("plan file: field 'alignment_bytes' must be at least 1, not "
                     f"{figures['alignment_bytes']}")
        live = g(obj, "live_bytes", list, default=[])
        notes = g(obj, "notes", list, default=[])
        return Plan(
            graph_fingerprint=self._str(g(obj, "graph_fingerprint", str),
                                        "field 'graph_fingerprint'"),
            graph_name=self._str(g(obj, "graph_name", str, default="graph"),
                                 "field 'graph_name'", empty=True),
            method=self._str(g(obj, "method", str), "field 'method'"),
            order=tuple(OpId(x) for x in self._strs(g(obj, "order", list), "field 'order'")),
            offsets=self._offsets(g(obj, "offsets", dict)),
            **figures,
            live_bytes=tuple(self._int(x, f"field 'live_bytes' entry #{i}")
                             for i, x in enumerate(live)),
            solve_seconds=check_float(g(obj, "solve_seconds", (int, float), default=0.0),
                                      "plan file: field 'solve_seconds'", _E),
            task_tree=self._json(g(obj, "task_tree", (dict, type(None)), default=None),
                                 "task_tree"),
            task_of_op={OpId(k): v for k, v in self._str_map(
                g(obj, "task_of_op", dict, default={}), "task_of_op").items()},
            extra_edges=self._edges(g(obj, "extra_edges", list, default=[])),
            provenance=tuple(self._record(r, i) for i, r in
                             enumerate(g(obj, "provenance", list, default=[]))),
            settings=self._json(g(obj, "settings", dict, default={}), "settings"),
            notes=tuple(check_str(x, f"plan file: field 'notes' entry #{i}", _E,
                                  max_chars=_NOTE_CHARS, empty=True)
                        for i, x in enumerate(notes)),
            recompute=tuple(self._recompute(r, i) for i, r in
                            enumerate(g(obj, "recompute", list, default=[]))),
            extra_flops=self._int(g(obj, "extra_flops", int, default=0), "field 'extra_flops'"),
            step_flops=self._int(g(obj, "step_flops", int, default=0), "field 'step_flops'"),
            # the cost model's estimates: plans written before it load with 0 and ""
            extra_seconds=check_float(g(obj, "extra_seconds", (int, float), default=0.0),
                                      "plan file: field 'extra_seconds'", _E),
            step_seconds=check_float(g(obj, "step_seconds", (int, float), default=0.0),
                                     "plan file: field 'step_seconds'", _E),
            device_profile=self._str(g(obj, "device_profile", str, default=""),
                                     "field 'device_profile'", empty=True),
            # per-stage seconds and gains: plans written before them load with none
            stages=tuple(self._stage(r, i) for i, r in
                         enumerate(g(obj, "stages", list, default=[]))),
        )
