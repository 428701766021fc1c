"""How a solve ended: one string enum shared by every result type.

:class:`SolveStatus` is a :class:`enum.StrEnum`: each member *is* its string value, so
``status == "optimal"`` holds, ``json.dumps`` writes ``"optimal"`` and plan files keep the
strings they always had (old files load unchanged).  It is the ``status`` of
:class:`~roam_core.model.plan.SolveRecord`, :class:`~roam_core.ordering.order_problem.OrderResult`,
:class:`~roam_core.ordering.monolithic.MonolithicResult`,
:class:`~roam_core.layout.dsa_solver.DsaResult` and :class:`~roam_core.base.cpsat.SolveOutcome`.

Examples
--------
>>> SolveStatus("optimal") is SolveStatus.OPTIMAL, SolveStatus.OPTIMAL == "optimal"
(True, True)
>>> import json; json.dumps({"status": SolveStatus.HINT})
'{"status": "hint"}'
"""

from __future__ import annotations

import enum

__all__ = ["SolveStatus"]


class SolveStatus(enum.StrEnum):
    """How one solve (or one stage that stands in for a solve) ended."""

    #: A solver proved the result optimal.
    OPTIMAL = "optimal"
    #: A solver found a solution better than its start, without proving it optimal.
    FEASIBLE = "feasible"
    #: A solver proved that no solution exists (e.g. a layout under a capacity).
    INFEASIBLE = "infeasible"
    #: CP-SAT rejected the model (a bug, never expected).
    INVALID = "invalid"
    #: CP-SAT stopped (time limit) without a solution.
    UNKNOWN = "unknown"
    #: A search with a capacity ran out of time without a layout (DSA solver).
    TIMEOUT = "timeout"
    #: Stopped by the caller's cancel; the warm start (or best so far) is kept.
    CANCELLED = "cancelled"
    #: The solver found nothing better than the warm start, which is kept.
    HINT = "hint"
    #: Nothing to permute (every range has at most one op); no model built.
    TRIVIAL = "trivial"
    #: Already at the global lower bound (the floor): no order can do better.
    BOUND = "bound"
    #: Not a solver: a heuristic (baseline order, rewrite, greedy layout, merge).
    HEURISTIC = "heuristic"
    #: No solve ran (a task-tree node with no ops of its own).
    NONE = "none"

    @classmethod
    def parse(cls, value: object) -> SolveStatus | None:
        """The member for ``value`` or ``None`` when no member has that value.

        Examples
        --------
        >>> SolveStatus.parse("bound"), SolveStatus.parse("nope")
        (<SolveStatus.BOUND: 'bound'>, None)
        """
        if not isinstance(value, str):  # no member has another type of value
            return None
        try:
            return cls(value)
        except ValueError:
            return None
