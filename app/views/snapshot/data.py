"""A dropped PyTorch memory snapshot as the record the view stores, and the planned arena
at its peak.

The pickle (``torch.cuda.memory._dump_snapshot``) is read by
:func:`roam_core.formats.snapshot_analysis.analyze_snapshot` (the restricted unpickler: no
class is resolved; the upload is size-capped).
"""

from __future__ import annotations

import hashlib

import numpy as np

from app.core import state
from app.services.plan_data import after_data
from app.views.snapshot.model import SnapshotRecord
from roam_core.base.errors import RoamError

__all__ = ["MAX_SNAPSHOT_UPLOAD_BYTES", "measured_record", "planned_blocks", "snapshot_from_upload"]


#: Largest snapshot accepted by the upload.
MAX_SNAPSHOT_UPLOAD_BYTES = 64 * 2**20


#: Blocks drawn per segment column.
MAX_BLOCKS = 5000


def measured_record(data: bytes, name: str = "snapshot") -> SnapshotRecord:
    """The JSON record the view stores for a snapshot (curves decimated, segments at the peak).

    Raises
    ------
    PlanFormatError
        From the restricted reader (not a snapshot, a class reference, too big, no events).
    """
    from roam_core.formats.snapshot_analysis import analyze_snapshot

    m = analyze_snapshot(data, max_bytes=MAX_SNAPSHOT_UPLOAD_BYTES)
    idx = list(range(m.n_events))
    return {
        "name": name, "device": m.device, "n_events": m.n_events,
        "event_steps": list(m.event_steps) if m.event_steps is not None else None,
        "allocated": list(m.allocated_bytes), "reserved": list(m.reserved_bytes),
        "index": idx, "peak_index": m.peak_index,
        "peak_allocated_bytes": m.peak_allocated_bytes,
        "peak_reserved_bytes": m.peak_reserved_bytes,
        "fragmentation_bytes": m.fragmentation_bytes,
        "segments": [{"addr": s.addr, "size": s.size_bytes,
                      "blocks": [[b.addr - s.addr, b.size_bytes, b.name]
                                 for b in s.blocks[:MAX_BLOCKS]]} for s in m.segments],
    }


def snapshot_from_upload(raw: bytes, filename: str | None) -> str:
    """Read an uploaded snapshot's bytes and store its record; returns the cache key."""
    try:
        rec = measured_record(raw, filename or "snapshot")
    except RoamError as e:
        raise type(e)(f"{filename or 'snapshot'}: {e}") from e
    key = "snap-" + hashlib.sha256(raw).hexdigest()[:32]
    state.put_json(key, rec)
    return key


def planned_blocks(graph_key: str, plan_key: str) -> tuple[int, int, list[tuple[int, int, str]]]:
    """``(arena bytes, planned peak bytes, [(offset, size, id)])`` of the storages live at
    the planned peak."""
    a = after_data(graph_key, plan_key)
    peak = int(np.argmax(a.curve)) if len(a.curve) else 0
    v = a.view
    live = np.nonzero((v.start <= peak) & (v.end > peak))[0]
    blocks = [(int(v.offset[i]), int(v.size[i]), str(v.ids[i])) for i in live]
    return int(a.plan.arena_bytes), int(a.curve[peak]) if len(a.curve) else 0, blocks
