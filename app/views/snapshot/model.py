"""The fragmentation at the measured peak, and the plan's, in words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.formatting import fmt_bytes

__all__ = ["SnapshotRecord", "source_word", "summary_lines"]

#: A snapshot as the view stores it (JSON; see :func:`app.views.snapshot.data.measured_record`).
SnapshotRecord = Mapping[str, Any]


def source_word(rec: SnapshotRecord) -> str:
    """``"measured"`` for a snapshot of a real run, ``"exported"`` for one roam wrote from a
    plan (``roam_core.formats.snapshot.plan_snapshot``: its events name their steps), which
    is the plan simulated, not a measurement.

    >>> source_word({"event_steps": None}), source_word({"event_steps": [0, 1]})
    ('measured', 'exported')
    """
    return "measured" if rec.get("event_steps") is None else "exported"


def summary_lines(rec: SnapshotRecord, arena_bytes: int | None,
                  planned_peak_bytes: int | None) -> list[str]:
    """The fragmentation at the snapshot's peak, and the plan's, in words."""
    a, r = rec["peak_allocated_bytes"], rec["peak_reserved_bytes"]
    f = rec["fragmentation_bytes"]
    src = source_word(rec)
    lines = [f"{rec.get('name', 'snapshot')}: {rec['n_events']} allocator events, "
             f"{len(rec.get('segments') or [])} segments at the peak"
             + ("; exported by roam from a plan: a simulation, not a measurement"
                if src == "exported" else ""),
             f"{src} peak: {fmt_bytes(a)} allocated, {fmt_bytes(r)} reserved "
             f"(event {rec['peak_index']})",
             f"fragmentation at the peak (reserved − allocated): {fmt_bytes(f)}"
             f" ({100 * f / max(r, 1):.1f}% of reserved)"]
    if arena_bytes and planned_peak_bytes is not None:
        pf = max(int(arena_bytes) - int(planned_peak_bytes), 0)
        lines.append(f"the plan: arena {fmt_bytes(arena_bytes)} for a peak of "
                     f"{fmt_bytes(planned_peak_bytes)} (fragmentation {fmt_bytes(pf)}); "
                     f"{src} reserved − planned arena: {fmt_bytes(r - int(arena_bytes))}"
                     if r >= int(arena_bytes) else
                     f"the plan: arena {fmt_bytes(arena_bytes)} for a peak of "
                     f"{fmt_bytes(planned_peak_bytes)} (fragmentation {fmt_bytes(pf)}); "
                     f"the {src} run reserved {fmt_bytes(int(arena_bytes) - r)} less")
    return lines
