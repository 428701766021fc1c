"""Dynamic storage allocation (DSA) problems: buffers with fixed lifetimes, offsets to find.

A :class:`Problem` is a set of :class:`Buffer` records, each live on a half-open step interval
``[lower, upper)`` and needing ``size`` bytes.  A :class:`Solution` gives every buffer a byte
offset so that two buffers whose lifetimes overlap never share a byte; its ``height`` is
``max(offset + size)``.  The live-set lower bound (:meth:`Problem.lower_bound`) is the largest
sum of sizes live at one step.  The CSV interchange format lives in
:mod:`roam_core.formats.dsa_csv`.

Examples
--------
>>> p = Problem((Buffer("x", 0, 2, 4), Buffer("y", 1, 3, 4)), capacity=8)
>>> p.lower_bound(), Solution.from_offsets(p, (0, 4)).height
(8, 8)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from roam_core.base.errors import PlanFormatError

__all__ = ["Buffer", "Problem", "Solution", "solution_from_problem"]


@dataclass(frozen=True, slots=True)
class Buffer:
    """One allocation request.

    Parameters
    ----------
    id : str
        Stable name (a tensor id, or the CSV ``id`` cell).
    lower, upper : int
        Lifetime, the half-open step interval ``[lower, upper)``; ``lower < upper``.
    size : int
        Bytes needed (``>= 0``; a 0-byte buffer never conflicts).
    alignment : int
        The offset must be a multiple of this (``>= 1``).
    offset : int or None
        If given, the buffer's offset is fixed there.
    """

    id: str
    lower: int
    upper: int
    size: int
    alignment: int = 1
    offset: int | None = None

    def overlaps(self, other: Buffer) -> bool:
        """True when the two lifetimes share a step (sizes are not considered)."""
        return self.lower < other.upper and other.lower < self.upper


@dataclass(frozen=True, slots=True)
class Problem:
    """A set of buffers and an optional capacity (the arena size that must not be exceeded)."""

    buffers: tuple[Buffer, ...]
    capacity: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffers", tuple(self.buffers))
        seen: set[str] = set()
        for b in self.buffers:
            if b.id in seen:
                raise PlanFormatError(f"duplicate buffer id {b.id!r}")
            seen.add(b.id)
            if b.upper <= b.lower:
                raise PlanFormatError(f"buffer {b.id!r}: empty lifetime [{b.lower}, {b.upper})")
            if b.size < 0:
                raise PlanFormatError(f"buffer {b.id!r}: negative size {b.size}")
            if b.alignment < 1:
                raise PlanFormatError(f"buffer {b.id!r}: alignment {b.alignment} < 1")
            if b.offset is not None and b.offset < 0:
                raise PlanFormatError(f"buffer {b.id!r}: negative fixed offset {b.offset}")
        if self.capacity is not None and self.capacity < 0:
            raise PlanFormatError(f"negative capacity {self.capacity}")

    def lower_bound(self) -> int:
        """Largest total size live at one step (a lower bound on any solution's height)."""
        events: dict[int, int] = {}
        for b in self.buffers:
            if b.size:
                events[b.lower] = events.get(b.lower, 0) + b.size
                events[b.upper] = events.get(b.upper, 0) - b.size
        best = run = 0
        for t in sorted(events):
            run += events[t]
            best = max(best, run)
        return best

    def with_capacity(self, capacity: int | None) -> Problem:
        """The same buffers with another capacity."""
        return Problem(self.buffers, capacity)

    def __len__(self) -> int:
        return len(self.buffers)


@dataclass(frozen=True, slots=True)
class Solution:
    """Offsets for a problem's buffers, in the problem's buffer order, and the height."""

    offsets: tuple[int, ...]
    height: int

    @classmethod
    def from_offsets(cls, problem: Problem, offsets: Sequence[int]) -> Solution:
        """Build a solution, computing its height from the problem's sizes."""
        offs = tuple(int(o) for o in offsets)
        height = max((o + b.size for o, b in zip(offs, problem.buffers) if b.size), default=0)
        return cls(offs, height)


def solution_from_problem(problem: Problem) -> Solution | None:
    """The solution given by the fixed offsets, when every buffer has one; else ``None``."""
    offsets = [b.offset for b in problem.buffers if b.offset is not None]
    if len(offsets) < len(problem.buffers):
        return None
    return Solution.from_offsets(problem, offsets)
