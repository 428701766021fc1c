"""What each planner stage spent and what it bought: :class:`StageCost`, and the value
contract that stops the stages that only polish (:func:`good_enough_bytes`).

A plan records one :class:`StageCost` per stage that ran or was skipped (``Plan.stages``):
seconds (wall and CPU), the bytes it gained (how much lower the planned peak, for the
ordering stages, or the arena, for the layout stages, was after it), the work it did in its
own unit against its budget, and why it stopped.  ``roam plan`` prints them on one line
(:func:`format_stages`); ``docs/planning_time.md`` explains the contract.

Examples
--------
>>> good_enough_bytes(10 * 2**30, 1e-4, 64 * 2**10)   # 0.01 % of 10 GiB is above 64 KiB
1073742
>>> good_enough_bytes(100 * 2**20, 1e-4, 64 * 2**10)  # 0.01 % of 100 MiB is below it
65536
>>> s = StageCost("layout.repair", 0.5, 0.4, 7680, 913, 5000, "nodes", "good_enough")
>>> format_stages((s,))
'layout.repair 0.50 s -7.5 KiB (913/5000 nodes, good_enough)'
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["STOP_REASONS", "StageClock", "StageCost", "format_stages", "good_enough_bytes",
           "worst_stop"]

#: Why a stage ended: ``"done"`` (it finished its own work), ``"good_enough"`` (the result
#: was within the value contract, so it stopped or was skipped), ``"at_bound"`` (nothing can
#: be lower), ``"work"`` (its work budget was spent), ``"time"`` (a wall-clock safety limit
#: or ``time_limit_s``), ``"cancelled"``, ``"skipped"`` (switched off or not applicable).
STOP_REASONS = ("done", "good_enough", "at_bound", "work", "time", "cancelled", "skipped")


@dataclass(frozen=True, slots=True)
class StageCost:
    """The cost and the gain of one planner stage.

    Parameters
    ----------
    stage : str
        ``"baselines"``, ``"rewrite"``, ``"decompose"``, ``"subtasks"``, ``"polish"``,
        ``"search"``, ``"bound"``, ``"layout.<step>"`` (``greedy``, ``promote``, ``roam``,
        ``restart``, ``dsa``, ``flip``, ``repair``, ``shake``, ``polish``), ``"validate"``,
        and, first in a plan with a budget, ``"recompute.windows"`` (the exact windows that
        chose its drop set; they gain no bytes, they lower the recomputation's cost).
    wall_s, cpu_s : float
        Seconds spent (CPU: this process, all threads).
    gained_bytes : int
        How much lower the planned peak (ordering stages) or the arena (layout stages) was
        after the stage than before it (0 when it changed nothing).
    work_done, work_limit : int
        The work the stage did and its budget, in ``work_unit`` (``work_limit`` 0: a fixed
        amount of work, no budget).
    work_unit : str
        ``"passes"``, ``"placements"``, ``"nodes"`` (search nodes), ``"evaluations"``
        (candidate orders scored), ``"dtime_ms"`` (CP-SAT deterministic milliseconds),
        ``"solves"``, ``"ops"`` or ``""``.
    stopped : str
        One of :data:`STOP_REASONS`.
    """

    stage: str
    wall_s: float
    cpu_s: float
    gained_bytes: int = 0
    work_done: int = 0
    work_limit: int = 0
    work_unit: str = ""
    stopped: str = "done"

    @property
    def within_budget(self) -> bool:
        """Whether the work done is within the budget (always, without one)."""
        return self.work_limit <= 0 or self.work_done <= self.work_limit


class StageClock:
    """Wall and CPU seconds since it was made, handed out as a :class:`StageCost`."""

    __slots__ = ("c0", "t0")

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def cost(self, stage: str, gained_bytes: int = 0, work_done: int = 0, work_limit: int = 0,
             work_unit: str = "", stopped: str = "done") -> StageCost:
        """The :class:`StageCost` of ``stage``, with the seconds since the clock was made."""
        return StageCost(stage, time.perf_counter() - self.t0, time.process_time() - self.c0,
                         int(gained_bytes), int(work_done), int(work_limit), work_unit, stopped)


#: How much a stop reason says about a stage made of several solves, least first: the
#: stage reports the reason of its solve that says most (a clock that cut one solve short
#: makes the whole stage's result depend on the machine's load).
_STOP_WEIGHT = {"skipped": 0, "done": 1, "good_enough": 2, "at_bound": 3, "work": 4,
                "time": 5, "cancelled": 6}


def worst_stop(reasons: Iterable[str], default: str = "done") -> str:
    """The stop reason of a stage from those of its solves (``default`` without any).

    Examples
    --------
    >>> worst_stop(["done", "work", "at_bound"]), worst_stop(["work", "time"]), worst_stop([])
    ('work', 'time', 'done')
    """
    return max(reasons, key=_STOP_WEIGHT.__getitem__, default=default)


def good_enough_bytes(reference_bytes: int, gap: float, floor_bytes: int) -> int:
    """The value contract's slack: ``max(ceil(gap * reference_bytes), floor_bytes)``.

    A polishing stage stops once its result is within this many bytes of the bound it
    polishes towards (the arena against the planned peak, the planned peak against the
    proven lower bound); ``reference_bytes`` is the bound.
    """
    return max(math.ceil(gap * max(0, reference_bytes)), floor_bytes)


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_stages(stages: Iterable[StageCost]) -> str:
    """One line: every stage with its seconds, bytes gained, work against budget and why it
    stopped (stages that were skipped are left out)."""
    parts = []
    for s in stages:
        if s.stopped == "skipped":
            continue
        text = f"{s.stage} {s.wall_s:.2f} s"
        if s.gained_bytes:
            text += f" -{_bytes(s.gained_bytes)}"
        extra = []
        if s.work_unit:
            extra.append(f"{s.work_done}/{s.work_limit} {s.work_unit}" if s.work_limit
                         else f"{s.work_done} {s.work_unit}")
        if s.stopped != "done":
            extra.append(s.stopped)
        if extra:
            text += f" ({', '.join(extra)})"
        parts.append(text)
    return "; ".join(parts)
