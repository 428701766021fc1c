"""Time-indexed order variables for CP-SAT: the ``done`` ladder of ``k`` ops over ``k`` steps.

Private to roam_core.  The ordering ILP (:mod:`roam_core.ordering.order_model`) and the
restriction bound (:mod:`roam_core.oracle.bounds.restriction`) both model an order of ``k``
ops the way ROAM's "ss" mode does: a Boolean ``done[i, t]`` says that op ``i`` ran at or
before step ``t``.  It exists only inside op ``i``'s window ``[lo[i], hi[i])`` (before it the
op cannot have run, from its end on it must have), is monotone in ``t``, exactly ``t + 1`` ops
are done after step ``t``, and an op runs after each of its predecessors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # OR-Tools is imported by the modules that build a model
    from ortools.sat.python import cp_model

__all__ = ["StepLadder"]


class StepLadder:
    """The ``done`` variables of one order and its schedule constraints.

    Parameters
    ----------
    model : cp_model.CpModel
        The model the variables and constraints go into.
    lo, hi : sequence of int
        Op ``i``'s window: ``done[i, t]`` is 0 for ``t < lo[i]``, 1 for ``t >= hi[i]``.
    name_prefix : str
        Variable names are ``f"{name_prefix}{i}_{t}"`` (for reading a dumped model).

    Examples
    --------
    >>> from ortools.sat.python import cp_model
    >>> m = cp_model.CpModel()
    >>> ladder = StepLadder(m, lo=[0, 0], hi=[1, 1], name_prefix="d")
    >>> ladder.add_schedule(preds=[[], []])
    >>> ladder.lit(0, 1), ladder.lit(1, -1)
    (True, False)
    """

    __slots__ = ("_model", "done", "hi", "lo")

    def __init__(self, model: cp_model.CpModel, lo: Sequence[int], hi: Sequence[int],
                 name_prefix: str) -> None:
        self.lo, self.hi = lo, hi
        self.done: list[dict[int, cp_model.IntVar]] = [{} for _ in lo]
        for i in range(len(lo)):
            prev = None
            for t in range(lo[i], hi[i]):
                v = model.new_bool_var(f"{name_prefix}{i}_{t}")
                self.done[i][t] = v
                if prev is not None:
                    model.add_implication(prev, v)
                prev = v
        self._model = model

    def lit(self, i: int, t: int) -> cp_model.IntVar | bool:
        """``done[i, t]``: a model literal inside op ``i``'s window, else a Python bool."""
        if t < self.lo[i]:
            return False
        if t >= self.hi[i]:
            return True
        return self.done[i][t]

    def add_schedule(self, preds: Sequence[Sequence[int]]) -> None:
        """Exactly ``t + 1`` ops done after step ``t``; op ``b`` done at ``t`` only if each
        of its predecessors ``preds[b]`` was done at ``t - 1``."""
        m, done, lo, hi = self._model, self.done, self.lo, self.hi
        k = len(lo)
        for t in range(k):
            terms_t = [done[i][t] for i in range(k) if lo[i] <= t < hi[i]]
            fixed = sum(1 for i in range(k) if t >= hi[i])
            if terms_t:
                m.add(sum(terms_t) == t + 1 - fixed)
        for b in range(k):
            for a in preds[b]:
                for t in range(lo[b], hi[b]):
                    la = self.lit(a, t - 1)
                    if la is True:
                        continue
                    if la is False:
                        m.add(done[b][t] == 0)
                    else:
                        m.add_implication(done[b][t], la)
