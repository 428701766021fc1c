"""Progress of a planner run across its stages: an overall bar and the time left."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.core.formatting import fmt_bytes

if TYPE_CHECKING:
    from roam_core.planner import PlanProgress

__all__ = ["STAGE_SHARES", "PlanProgressTracker", "progress_values"]


def progress_values(p: PlanProgress) -> tuple[int, int, str]:
    """``(done, total, text)`` for the progress bar from a ``PlanProgress``."""
    best = getattr(p, "best_peak_bytes", None)
    text = f"{p.stage}: {p.done}/{p.total} sub-tasks" if p.stage == "order" else p.stage
    if best is not None:
        text += f", best peak {fmt_bytes(best)}"
    if getattr(p, "message", ""):
        text += f" ({p.message})"
    return int(p.done), max(int(p.total), 1), text


#: Share of a planner run each stage takes (the order stage dominates), for the overall bar.
STAGE_SHARES: tuple[tuple[str, float], ...] = (
    ("baseline", 0.05), ("rewrite", 0.02), ("decompose", 0.03), ("order", 0.70),
    ("layout", 0.20))


class PlanProgressTracker:
    """Progress across the planner's stages: an overall percentage and the time left.

    Call it with each ``PlanProgress``; it returns ``(value, max, text)`` for the progress
    bar (value in thousandths).  The time left is extrapolated from the elapsed time and
    capped by the time limit (the planner stops there, then lays out the arena).

    Examples
    --------
    >>> from roam_core.planner import PlanProgress
    >>> now = iter([0.0, 2.0, 4.0]).__next__
    >>> track = PlanProgressTracker(10.0, clock=now)
    >>> track(PlanProgress("order", 1, 4, 3 * 2**20, "sub-task t1"))[2]
    '28 % · order: 1/4 sub-tasks, best peak 3.00 MiB (sub-task t1) · about 5 s left'
    >>> track(PlanProgress("done", 1, 1, 3 * 2**20))[:2]
    (1000, 1000)
    """

    def __init__(self, time_limit_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._t0 = clock()
        self._limit = time_limit_s
        self._fraction = 0.0

    def fraction(self, p: PlanProgress) -> float:
        """Overall fraction done (never goes back)."""
        if p.stage == "done":
            self._fraction = 1.0
            return 1.0
        start = 0.0
        for stage, share in STAGE_SHARES:
            if stage == p.stage:
                within = min(max(p.done / max(p.total, 1), 0.0), 1.0)
                self._fraction = max(self._fraction, start + share * within)
                break
            start += share
        return self._fraction

    def __call__(self, p: PlanProgress) -> tuple[int, int, str]:
        f = self.fraction(p)
        elapsed = self._clock() - self._t0
        _, _, text = progress_values(p)
        if f >= 1.0:
            what = f": {p.message}" if getattr(p, "message", "") else ""
            return 1000, 1000, f"100 % · planned in {elapsed:.1f} s{what}"
        left = elapsed * (1 - f) / f if f > 0.02 else None
        if self._limit:
            cap = max(self._limit - elapsed, 0.0) + 1.0
            left = cap if left is None else min(left, cap)
        eta = f" · about {left:.0f} s left" if left is not None else ""
        return int(1000 * f), 1000, f"{100 * f:.0f} % · {text}{eta}"

