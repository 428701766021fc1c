"""PyTorch memory snapshots: export a plan as one, read a measured one back safely.

A *memory snapshot* is the pickle that ``torch.cuda.memory._dump_snapshot`` writes and
https://pytorch.org/memory_viz draws: a dict with

* ``segments``: the allocator's cudaMalloc'd segments, each with its ``blocks``;
* ``device_traces``: per device, a list of trace entries
  ``{"action", "addr", "size", "stream", "frames", "time_us"}`` where ``action`` is
  ``segment_alloc``, ``alloc``, ``free_requested``, ``free_completed``, ...

:func:`plan_snapshot` writes the plan in that format: one segment (the arena) and synthetic
events in plan order, ``addr = base + offset``: resident storages are allocated first, then
each step allocates the storages it creates and frees the ones whose lifetime ends with it.
Each event's frame names the op (``name``), its target (``filename``) and the step
(``line``), so memory_viz shows the plan's timeline next to a measured one.

:func:`load_snapshot` reads a snapshot with a **restricted unpickler**: it resolves no class
or function at all, so only plain containers, strings, numbers, booleans and ``None`` can
appear.  A file referring to any class (the classic ``os.system`` reduce payload) is refused
with :class:`~roam_core.base.errors.PlanFormatError` before anything runs.  Never load a
user's pickle with the standard unpickler.

This module needs no torch.
"""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roam_core.base.errors import PlanFormatError
from roam_core.model.graph import Graph, TensorId, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.simulate import lifetimes

__all__ = [
    "DEFAULT_BASE_ADDRESS",
    "MAX_SNAPSHOT_BYTES",
    "SnapshotCurve",
    "SnapshotEvent",
    "dumps_plan_snapshot",
    "load_snapshot",
    "loads_snapshot_dict",
    "plan_snapshot",
    "save_plan_snapshot",
]

_logger = logging.getLogger(__name__)

#: Address of the arena in an exported snapshot (any 512-aligned value works).
DEFAULT_BASE_ADDRESS = 0x7F00_0000_0000
#: Largest snapshot file :func:`load_snapshot` accepts by default (bytes).
MAX_SNAPSHOT_BYTES = 1 << 30


# ----------------------------------------------------------------- export
def plan_snapshot(graph: Graph, plan: Plan, *, base_address: int = DEFAULT_BASE_ADDRESS,
                  device: int = 0) -> dict[str, Any]:
    """The plan as a memory-snapshot dict (plain containers only).

    Parameters
    ----------
    graph : Graph
        The graph the plan was made for.
    plan : Plan
        Order and offsets.
    base_address : int
        Address of the arena (offset 0).
    device : int
        Device index the trace is filed under.

    Returns
    -------
    dict
        ``{"segments": [...], "device_traces": [[...], ...]}``.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> from roam_core.model.plan import Plan
    >>> g = chain3()
    >>> p = Plan(g.fingerprint(), "chain3", "eager", g.op_ids, {"a": 0, "b": 512, "c": 0},
    ...          512, 1024, 1024, 0, 1024, 0)
    >>> snap = plan_snapshot(g, p, base_address=0)
    >>> [(e["action"], e["addr"]) for e in snap["device_traces"][0]][:4]
    [('segment_alloc', 0), ('alloc', 0), ('alloc', 512), ('free_requested', 0)]
    """
    align = plan.alignment_bytes
    order = list(plan.order)
    lts = lifetimes(graph, order)
    events: list[dict[str, Any]] = []

    def frame(op_id: str | None, step: int) -> list[dict[str, Any]]:
        if op_id is None:
            return [{"filename": "resident", "line": 0, "name": "before the step"}]
        op = graph.op(op_id)
        return [{"filename": f"{op.phase.value}: {op.target}", "line": step, "name": op_id}]

    def entry(action: str, tid: TensorId, step: int, op_id: str | None) -> dict[str, Any]:
        t = graph.tensors[tid]
        return {"action": action, "addr": base_address + int(plan.offsets[tid]),
                "size": round_size(t.size_bytes, align), "stream": 0,
                "frames": frame(op_id, step), "time_us": step, "tensor": tid}

    arena = int(plan.arena_bytes)
    events.append({"action": "segment_alloc", "addr": base_address, "size": arena, "stream": 0,
                   "frames": frame(None, 0), "time_us": 0})
    sized = {tid for tid, t in graph.tensors.items() if round_size(t.size_bytes, align)}
    for tid, t in graph.tensors.items():
        if t.producer is None and tid in sized:
            events.append(entry("alloc", tid, 0, None))
    starts: dict[int, list[TensorId]] = {}
    ends: dict[int, list[TensorId]] = {}
    for tid, lt in lts.items():
        if tid in sized:
            starts.setdefault(lt.start, []).append(tid)
            ends.setdefault(lt.end, []).append(tid)
    for step, op_id in enumerate(order):
        for tid in sorted(starts.get(step, ()), key=lambda x: plan.offsets[x]):
            events.append(entry("alloc", tid, step, op_id))
        for tid in sorted(ends.get(step + 1, ()), key=lambda x: plan.offsets[x]):
            if step + 1 < len(order) or tid not in graph.outputs:
                events.append(entry("free_requested", tid, step, op_id))
                events.append(entry("free_completed", tid, step, op_id))
    live_at_end = [tid for tid, t in graph.tensors.items() if tid in sized and (
        t.producer is None or tid in graph.outputs)]
    blocks = _blocks(graph, plan, base_address, live_at_end)
    used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    segment = {"device": device, "address": base_address, "total_size": arena, "stream": 0,
               "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": used,
               "active_size": used, "requested_size": used, "is_expandable": False,
               "frames": [], "blocks": blocks}
    traces: list[list[dict[str, Any]]] = [[] for _ in range(device)] + [events]
    return {"segments": [segment], "device_traces": traces,
            "roam": {"graph_fingerprint": plan.graph_fingerprint, "graph_name": plan.graph_name,
                     "method": plan.method, "arena_bytes": arena,
                     "planned_peak_bytes": int(plan.planned_peak_bytes)}}


def _blocks(graph: Graph, plan: Plan, base: int, live: list[TensorId]
            ) -> list[dict[str, Any]]:
    """Segment blocks at the end of the step: live storages, the gaps are inactive."""
    align = plan.alignment_bytes
    spans = sorted((int(plan.offsets[t]), round_size(graph.tensors[t].size_bytes, align), t)
                   for t in live)
    out: list[dict[str, Any]] = []
    cur = 0
    for off, size, tid in spans:
        if off < cur:  # resident storages never overlap in a valid plan; keep going
            continue
        if off > cur:
            out.append({"address": base + cur, "size": off - cur, "requested_size": 0,
                        "state": "inactive", "frames": []})
        out.append({"address": base + off, "size": size,
                    "requested_size": graph.tensors[tid].size_bytes,
                    "state": "active_allocated",
                    "frames": [{"filename": "resident", "line": 0, "name": tid}]})
        cur = off + size
    if cur < plan.arena_bytes:
        out.append({"address": base + cur, "size": int(plan.arena_bytes) - cur,
                    "requested_size": 0, "state": "inactive", "frames": []})
    return out


def dumps_plan_snapshot(graph: Graph, plan: Plan, **kwargs: Any) -> bytes:
    """:func:`plan_snapshot` pickled (standard library pickle of plain containers)."""
    return pickle.dumps(plan_snapshot(graph, plan, **kwargs), protocol=4)


def save_plan_snapshot(path: str | Path, graph: Graph, plan: Plan, **kwargs: Any) -> Path:
    """Write the plan as a memory-snapshot pickle; returns the path."""
    p = Path(path)
    p.write_bytes(dumps_plan_snapshot(graph, plan, **kwargs))
    return p


# ----------------------------------------------------------------- import
class _PlainUnpickler(pickle.Unpickler):
    """Unpickler that resolves no global: only plain containers and scalars load."""

    def find_class(self, module: str, name: str) -> Any:
        raise PlanFormatError(
            f"refusing to load a snapshot that refers to {module}.{name}: memory snapshots "
            "contain only plain containers")

    def persistent_load(self, pid: Any) -> Any:
        raise PlanFormatError("refusing to load a snapshot with persistent ids")


def loads_snapshot_dict(data: bytes, *, max_bytes: int = MAX_SNAPSHOT_BYTES) -> dict[str, Any]:
    """Unpickle snapshot bytes with the restricted unpickler; check the top-level shape.

    Raises
    ------
    PlanFormatError
        Too big, not a pickle, any class reference, or not a snapshot dict.

    Examples
    --------
    >>> import pickle
    >>> loads_snapshot_dict(pickle.dumps({"segments": [], "device_traces": [[]]}))
    {'segments': [], 'device_traces': [[]]}
    >>> import os
    >>> class Evil:
    ...     def __reduce__(self):
    ...         return (os.getcwd, ())
    >>> loads_snapshot_dict(pickle.dumps(Evil()))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roam_core.base.errors.PlanFormatError: refusing to load a snapshot that refers to ...getcwd...
    """
    if len(data) > max_bytes:
        raise PlanFormatError(f"snapshot of {len(data):,} bytes exceeds the limit of "
                              f"{max_bytes:,} bytes")
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except PlanFormatError:
        raise
    except Exception as e:  # any unpickling failure is a format error
        raise PlanFormatError(f"not a memory snapshot pickle: {type(e).__name__}: {e}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("device_traces"), list):
        raise PlanFormatError("not a memory snapshot: expected a dict with 'device_traces' "
                              "(record it with torch.cuda.memory._record_memory_history)")
    return obj


@dataclass(frozen=True, slots=True)
class SnapshotEvent:
    """One allocator action of a trace."""

    action: str
    addr: int
    size: int
    name: str  # innermost frame's name ("" if none)


@dataclass(frozen=True, slots=True)
class SnapshotCurve:
    """Allocated bytes after each alloc/free event of one device's trace.

    Parameters
    ----------
    device : int
        Index of the trace in ``device_traces``.
    events : tuple of SnapshotEvent
        The ``alloc`` / ``free_completed`` events counted, in order.
    allocated_bytes : tuple of int
        Allocated bytes after each of ``events``, including the bytes allocated before
        recording started (worked out from the segments' allocated blocks at dump time;
        without them, the smallest shift that keeps the curve non-negative).
    peak_bytes : int
        ``max(allocated_bytes)`` (0 for an empty trace).
    baseline_bytes : int
        Bytes allocated before the trace started (the shift applied).
    reserved_bytes : int
        Sum of the segments' ``total_size`` at snapshot time.
    """

    device: int
    events: tuple[SnapshotEvent, ...]
    allocated_bytes: tuple[int, ...]
    peak_bytes: int
    baseline_bytes: int
    reserved_bytes: int

    @property
    def steps(self) -> tuple[int, ...]:
        """Event indices (x axis of the curve)."""
        return tuple(range(len(self.allocated_bytes)))


def load_snapshot(source: str | Path | bytes, *, device: int | None = None,
                  max_bytes: int = MAX_SNAPSHOT_BYTES) -> SnapshotCurve:
    """Read a memory snapshot (file or bytes) into its allocated-bytes curve.

    Parameters
    ----------
    source : path or bytes
        A ``.pickle`` written by ``torch.cuda.memory._dump_snapshot`` or
        :func:`save_plan_snapshot`.
    device : int, optional
        Which device trace; default: the one with the most events.
    max_bytes : int
        Size cap.

    Raises
    ------
    PlanFormatError
        Unreadable, too big, refers to a class, or has no usable trace.
    """
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        p = Path(source)
        try:
            size = p.stat().st_size
        except OSError as e:
            raise PlanFormatError(f"cannot read snapshot {p}: {e}") from e
        if size > max_bytes:
            raise PlanFormatError(f"snapshot {p} has {size:,} bytes, over the limit of "
                                  f"{max_bytes:,}")
        data = p.read_bytes()
    snap = loads_snapshot_dict(data, max_bytes=max_bytes)
    traces = snap["device_traces"]
    if not traces:
        raise PlanFormatError("snapshot has no device traces (was memory history recorded?)")
    if device is None:
        device = max(range(len(traces)), key=lambda i: len(traces[i] or ()))
    if not 0 <= device < len(traces):
        raise PlanFormatError(f"snapshot has no trace for device {device}")
    return _curve(device, traces[device] or [], snap.get("segments") or [])


def _curve(device: int, trace: list[Any], segments: list[Any]) -> SnapshotCurve:
    if not isinstance(trace, list):
        raise PlanFormatError(f"device trace {device} is not a list")
    has_completed = any(isinstance(e, Mapping) and e.get("action") == "free_completed"
                        for e in trace)
    free_action = "free_completed" if has_completed else "free_requested"
    events: list[SnapshotEvent] = []
    curve: list[int] = []
    cur = 0
    for e in trace:
        if not isinstance(e, Mapping):
            raise PlanFormatError(f"device trace {device} has a non-dict entry")
        action = e.get("action")
        if action not in ("alloc", free_action):
            continue
        size = e.get("size")
        addr = e.get("addr", 0)
        if not isinstance(size, int) or not isinstance(addr, int):
            raise PlanFormatError(f"trace entry {action!r} without an integer size/addr")
        frames = e.get("frames") or []
        name = frames[0].get("name", "") if frames and isinstance(frames[0], Mapping) else ""
        cur += size if action == "alloc" else -size
        events.append(SnapshotEvent("alloc" if action == "alloc" else "free", addr, size,
                                    str(name)))
        curve.append(cur)
    # Bytes allocated before recording started: the segments describe the state at dump
    # time, so start = (allocated at the end) - (net bytes the trace allocated).  Without
    # block states, or if that is negative, shift just enough to keep the curve >= 0.
    end_alloc = sum(int(b.get("size", 0))
                    for seg in segments if isinstance(seg, Mapping)
                    for b in seg.get("blocks") or () if isinstance(b, Mapping)
                    and b.get("state") == "active_allocated")
    start = end_alloc - (curve[-1] if curve else 0)
    low = -min(curve) if curve and min(curve) < 0 else 0
    shift = start if start >= low else low
    allocated = tuple(c + shift for c in curve)
    reserved = sum(int(s.get("total_size", 0)) for s in segments if isinstance(s, Mapping))
    return SnapshotCurve(device, tuple(events), allocated, max(allocated, default=0), shift,
                         reserved)
