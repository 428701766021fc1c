"""Exception hierarchy and validation records shared by every roam_core module.

User mistakes (bad files, plans that do not match their graph, impossible settings) raise a
subclass of :class:`RoamError`; ``assert`` is kept for internal invariants only.  Checkers
never raise: they return a list of :class:`Violation` records, one per broken rule, and a
caller that needs an exception wraps them in :class:`PlanInvalidError`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "BudgetInfeasibleError",
    "ConfigError",
    "ExecutorError",
    "GraphError",
    "InfeasibleError",
    "OutputError",
    "PlanFormatError",
    "PlanInvalidError",
    "RoamError",
    "SnapshotError",
    "TraceError",
    "Violation",
    "ViolationKind",
]


class RoamError(Exception):
    """Base class of every error roam raises on purpose; the app and CLI catch this one."""


class GraphError(RoamError):
    """A graph that is malformed or inconsistent (cycle, dangling id, bad size, bad file)."""


class ConfigError(RoamError):
    """A setting that is not allowed: an unknown method or policy name, a negative time limit,
    a number of workers below one, a budget of the wrong kind."""


class TraceError(RoamError):
    """A model could not be traced into a training-step graph."""


class PlanFormatError(RoamError):
    """A plan or problem file that does not parse, or has the wrong schema version."""


class SnapshotError(PlanFormatError):
    """A memory snapshot that cannot be read: not a pickle, a class reference, a field of the
    wrong type or range (named), too big, or no usable trace.  A :class:`PlanFormatError`, so
    code that caught those before still catches these."""


class OutputError(RoamError):
    """A file roam was asked to write cannot be written: a missing directory, a directory,
    no permission, a full disk.  Checked before any work starts where possible."""


class PlanInvalidError(RoamError):
    """A plan that fails the independent validator.

    Parameters
    ----------
    violations : list of Violation
        Every broken rule, in the order the validator found them.
    """

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = list(violations)
        head = "; ".join(v.message for v in self.violations[:5])
        more = f" (+{len(self.violations) - 5} more)" if len(self.violations) > 5 else ""
        super().__init__(f"plan is invalid: {head}{more}")


class InfeasibleError(RoamError):
    """A solver proved that no solution exists within the given limits (e.g. capacity)."""


class ExecutorError(RoamError):
    """Executing a plan failed: no device, address mismatch, or results differ from eager."""


class ViolationKind(enum.Enum):
    """Which rule a plan or graph breaks (mirrors minimalloc's validator enum)."""

    MISSING_OP = "missing_op"  # an op of the graph is absent from the order
    DUPLICATE_OP = "duplicate_op"  # an op appears twice in the order
    UNKNOWN_OP = "unknown_op"  # the order names an op the graph does not have
    PRECEDENCE = "precedence"  # a data edge runs backwards in the order
    MUTATION_ORDER = "mutation_order"  # an in-place write moved across a read of its storage
    RNG_ORDER = "rng_order"  # two random ops swapped their relative order
    COLLECTIVE_ORDER = "collective_order"  # two collectives swapped: ranks would disagree
    MISSING_OFFSET = "missing_offset"  # a planned tensor has no offset
    UNKNOWN_TENSOR = "unknown_tensor"  # an offset for a tensor the graph does not have
    NEGATIVE_OFFSET = "negative_offset"  # offset below zero
    OUT_OF_ARENA = "out_of_arena"  # offset + size beyond the arena
    MISALIGNED = "misaligned"  # offset not a multiple of the alignment
    OVERLAP = "overlap"  # two co-live tensors share bytes
    WRONG_HEIGHT = "wrong_height"  # the declared arena size disagrees with the layout
    FINGERPRINT = "fingerprint"  # the plan was made for another graph
    FIXED_OFFSET = "fixed_offset"  # a buffer with a fixed offset was moved (DSA problems)
    # recomputation (plans with recompute ops)
    RECOMPUTE_INPUT = "recompute_input"  # a recompute op reads a value not available then
    READ_DROPPED = "read_dropped"  # an op reads a dropped value before its recomputation
    RECOMPUTE_MISMATCH = "recompute_mismatch"  # the recomputed value can differ from the original
    # the figures a plan states (peak, arena, bounds, alignment, FLOPs)
    WRONG_FIGURE = "wrong_figure"  # a stated figure disagrees with the one recomputed


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule.

    Parameters
    ----------
    kind : ViolationKind
        The rule that is broken.
    subject_id : str
        The op or tensor id the violation is about (the first one, for pairs).
    message : str
        A one-line human-readable description naming every id involved.
    """

    kind: ViolationKind
    subject_id: str
    message: str


class BudgetInfeasibleError(InfeasibleError):
    """No plan (with or without recomputation) fits the memory budget.

    Parameters
    ----------
    message : str
        What was asked and the smallest reachable peak, in people's units.
    budget_bytes : int
        The budget asked for.
    smallest_peak_bytes : int
        The lowest arena the planner reached (recomputing everything it may).
    """

    def __init__(self, message: str, budget_bytes: int, smallest_peak_bytes: int) -> None:
        super().__init__(message)
        self.budget_bytes = budget_bytes
        self.smallest_peak_bytes = smallest_peak_bytes
