"""A measured memory snapshot read for comparison with a plan: curves, segments, fragmentation.

:func:`analyze_snapshot` reads a ``torch.cuda.memory._dump_snapshot`` pickle with the
restricted unpickler of :mod:`roam_core.formats.snapshot` (it resolves no class) and returns

* the allocated-bytes curve per allocator event (from
  :func:`~roam_core.formats.snapshot.load_snapshot`) and the **reserved** curve beside it
  (dump-time segments, with the trace's ``segment_alloc`` / ``segment_free`` undone backwards);
* the **peak**: the event with the most allocated bytes, its reserved bytes and the
  fragmentation ``reserved - allocated`` there;
* the **segments at the peak** with the blocks live in them, to draw beside the planned arena;
* each event's step when the frames carry one (a snapshot exported by
  :func:`~roam_core.formats.snapshot.plan_snapshot` names the step in ``line``), so the
  measured curve can sit on the plan's step axis; otherwise events are spread evenly.

This module needs no torch.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roam_core.base.errors import SnapshotError
from roam_core.formats.snapshot import (
    MAX_SNAPSHOT_BYTES,
    SnapshotCurve,
    curve_of,
    frame_field,
    loads_snapshot_dict,
    read_snapshot_bytes,
    snapshot_int,
)

__all__ = ["MeasuredBlock", "MeasuredMemory", "MeasuredSegment", "analyze_snapshot"]


@dataclass(frozen=True, slots=True)
class MeasuredBlock:
    """One allocation live at the peak: its address, size and innermost frame name."""

    addr: int
    size_bytes: int
    name: str = ""


@dataclass(frozen=True, slots=True)
class MeasuredSegment:
    """One allocator segment (a ``cudaMalloc``) present at the peak, with its live blocks."""

    addr: int
    size_bytes: int
    blocks: tuple[MeasuredBlock, ...]

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the live blocks."""
        return sum(b.size_bytes for b in self.blocks)


@dataclass(frozen=True, slots=True)
class MeasuredMemory:
    """What a memory snapshot measured.

    Parameters
    ----------
    device : int
        The device trace read.
    allocated_bytes, reserved_bytes : tuple of int
        After each alloc/free event.
    event_steps : tuple of int or None
        Step of each event (``None`` when the frames carry none).
    peak_index : int
        Event index of the allocated peak.
    peak_allocated_bytes, peak_reserved_bytes : int
        At that event.
    segments : tuple of MeasuredSegment
        Segments present at the peak, by address.
    """

    device: int
    allocated_bytes: tuple[int, ...]
    reserved_bytes: tuple[int, ...]
    event_steps: tuple[int, ...] | None
    peak_index: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    segments: tuple[MeasuredSegment, ...]

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved minus allocated at the peak (never negative)."""
        return max(self.peak_reserved_bytes - self.peak_allocated_bytes, 0)

    @property
    def n_events(self) -> int:
        """Alloc/free events counted."""
        return len(self.allocated_bytes)

    def steps_on(self, n_steps: int) -> list[float]:
        """x positions of the events on a plan's step axis of ``n_steps`` steps: the frames'
        steps when recorded and in range, else the events spread evenly over the axis."""
        n = self.n_events
        if self.event_steps is not None and all(0 <= s < max(n_steps, 1)
                                                for s in self.event_steps):
            return [float(s) for s in self.event_steps]
        if n <= 1:
            return [0.0] * n
        return [i * (max(n_steps, 1) - 1) / (n - 1) for i in range(n)]


def analyze_snapshot(source: str | Path | bytes, *, device: int | None = None,
                     max_bytes: int = MAX_SNAPSHOT_BYTES) -> MeasuredMemory:
    """Read a memory snapshot (path or bytes) for comparison with a plan.

    Parameters
    ----------
    source : path or bytes
        A ``torch.cuda.memory._dump_snapshot`` pickle (or one exported by roam).
    device : int, optional
        Which device trace (default: the one with the most events).
    max_bytes : int
        Size cap of the file.

    Raises
    ------
    SnapshotError
        Unreadable, too big, refers to any class, a field of the wrong type or range, no
        usable trace, or no alloc events.

    Notes
    -----
    Linear in the snapshot's events, segments and blocks (up to a sort): a few seconds for
    millions of events.

    Examples
    --------
    >>> import pickle
    >>> seg = {"address": 0, "total_size": 4096, "blocks": [
    ...     {"address": 0, "size": 1024, "state": "active_allocated"}]}
    >>> trace = [{"action": "alloc", "addr": 0, "size": 1024, "frames": []},
    ...          {"action": "alloc", "addr": 1024, "size": 2048, "frames": []},
    ...          {"action": "free_completed", "addr": 1024, "size": 2048, "frames": []}]
    >>> m = analyze_snapshot(pickle.dumps({"segments": [seg], "device_traces": [trace]}))
    >>> m.peak_allocated_bytes, m.peak_reserved_bytes, m.fragmentation_bytes
    (3072, 4096, 1024)
    >>> [(b.addr, b.size_bytes) for b in m.segments[0].blocks]
    [(0, 1024), (1024, 2048)]
    """
    snap = loads_snapshot_dict(read_snapshot_bytes(source, max_bytes), max_bytes=max_bytes)
    curve = curve_of(snap, device)
    if not curve.allocated_bytes:
        raise SnapshotError("the snapshot's trace has no alloc/free events (was memory "
                            "history recorded while the step ran?)")
    trace = [e for e in snap["device_traces"][curve.device] or [] if isinstance(e, Mapping)]
    segs_end = [s for s in snap.get("segments") or [] if isinstance(s, Mapping)
                and (s.get("device", curve.device) == curve.device)]
    from_roam = isinstance(snap.get("roam"), Mapping)  # exported by plan_snapshot: steps known
    seg_events, steps = _walk_trace(trace, from_roam)
    n = len(curve.allocated_bytes)
    allocated = curve.allocated_bytes
    peak = max(range(n), key=lambda i: allocated[i])
    reserved = _reserved_curve(allocated, sum(
        snapshot_int(s.get("total_size"), "segment field 'total_size'") for s in segs_end),
        seg_events)
    return MeasuredMemory(curve.device, allocated, reserved,
                          tuple(steps) if from_roam and len(steps) == n else None, peak,
                          allocated[peak], reserved[peak],
                          _segments_at(peak, curve, segs_end, seg_events))


#: ``(index of the last counted alloc/free event before it, action, address, size)``
_SegmentEvent = tuple[int, str, int, int]


def _walk_trace(trace: list[Mapping[str, Any]],
                from_roam: bool) -> tuple[list[_SegmentEvent], list[int]]:
    """The segment events in order, and each counted (alloc/free) event's step when a
    roam-exported snapshot's frames name it."""
    has_completed = any(e.get("action") == "free_completed" for e in trace)
    free_name = "free_completed" if has_completed else "free_requested"
    seg_events: list[_SegmentEvent] = []
    counted = -1
    steps: list[int] = []
    for e in trace:
        a = e.get("action")
        if a in ("alloc", free_name):
            counted += 1
            line = frame_field(e, "line", None)
            if from_roam and isinstance(line, int) and not isinstance(line, bool):
                steps.append(line)
        elif a in ("segment_alloc", "segment_free", "segment_map", "segment_unmap"):
            seg_events.append((counted, a, snapshot_int(e.get("addr"), f"{a} field 'addr'"),
                               snapshot_int(e.get("size"), f"{a} field 'size'")))
    return seg_events, steps


def _reserved_curve(allocated: tuple[int, ...], reserved_end: int,
                    seg_events: list[_SegmentEvent]) -> tuple[int, ...]:
    """Reserved bytes after each counted event: the dump-time segments less the segment
    bytes added after that event (never below allocated: a trace may miss segment events)."""
    n = len(allocated)
    bucket = [0] * (n + 1)
    for idx, a, _addr, size in seg_events:
        if idx >= 0:
            bucket[min(idx, n)] += size if a in ("segment_alloc", "segment_map") else -size
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + bucket[i]
    return tuple(max(reserved_end - suffix[i], a) for i, a in enumerate(allocated))


def _segments_at(peak: int, curve: SnapshotCurve, segs_end: list[Mapping[str, Any]],
                 seg_events: list[_SegmentEvent]) -> tuple[MeasuredSegment, ...]:
    """The segments present at event ``peak`` with the blocks live in them."""
    # blocks live at the peak: replay the counted events up to it, over the blocks that were
    # live before recording started (dump-time blocks never allocated in the trace)
    traced_addrs = {ev.addr for ev in curve.events if ev.action == "alloc"}
    live: dict[int, MeasuredBlock] = {}
    for s in segs_end:
        for b in s.get("blocks") or ():
            if isinstance(b, Mapping) and b.get("state") == "active_allocated":
                addr = snapshot_int(b.get("address"), "block field 'address'")
                if addr not in traced_addrs:
                    live[addr] = MeasuredBlock(addr, snapshot_int(b.get("size"),
                                                                  "block field 'size'"))
    for ev in curve.events[:peak + 1]:
        if ev.action == "alloc":
            live[ev.addr] = MeasuredBlock(ev.addr, ev.size, ev.name)
        else:
            live.pop(ev.addr, None)
    # segments present at the peak: dump-time ones, with later segment events undone
    segs: dict[int, int] = {
        snapshot_int(s.get("address"), "segment field 'address'"):
            snapshot_int(s.get("total_size"), "segment field 'total_size'") for s in segs_end}
    for idx, a, addr, size in reversed(seg_events):
        if idx < peak:
            break
        if a in ("segment_alloc", "segment_map"):
            segs.pop(addr, None)
        else:
            segs[addr] = size
    blocks = sorted(live.values(), key=lambda b: b.addr)
    starts = [b.addr for b in blocks]
    out: list[MeasuredSegment] = []
    for addr, size in sorted(segs.items()):  # the blocks inside: one slice (bisect), not a scan
        lo = bisect.bisect_left(starts, addr)
        hi = bisect.bisect_left(starts, addr + size, lo)
        out.append(MeasuredSegment(addr, size, tuple(blocks[lo:hi])))
    if not out and blocks:  # a trace without segments: one pseudo-segment over the blocks
        lo = blocks[0].addr
        hi = max(b.addr + b.size_bytes for b in blocks)
        out.append(MeasuredSegment(lo, hi - lo, tuple(blocks)))
    return tuple(out)
