"""The runtime, the top library layer: run a plan for real in one arena, next to eager.

* :mod:`~roam_core.runtime.execution`: :func:`execute_plan` / :func:`execute_traced`, one
  planned step next to an eager one (numerics, peaks, step times);
* :mod:`~roam_core.runtime.planned_step`: :class:`PlannedStep`, training with a plan;
* :mod:`~roam_core.runtime.arena_runner`, :mod:`~roam_core.runtime.program`: the replay;
* :mod:`~roam_core.runtime.device`, :mod:`~roam_core.runtime.plan_checks`: what is checked
  before anything runs.

This package imports torch; ``import roam_core`` does not import it.
"""

from roam_core.runtime.arena_runner import OUT_DENY, ArenaRunner, RunStats, out_variant
from roam_core.runtime.device import resolve_device
from roam_core.runtime.execution import execute_plan, execute_traced
from roam_core.runtime.plan_checks import check_fingerprint
from roam_core.runtime.planned_step import BatchMismatchError, PlannedStep
from roam_core.runtime.report import REQUIRED_KEYS, ExecutionReport

__all__ = [
    "OUT_DENY",
    "REQUIRED_KEYS",
    "ArenaRunner",
    "BatchMismatchError",
    "ExecutionReport",
    "PlannedStep",
    "RunStats",
    "check_fingerprint",
    "execute_plan",
    "execute_traced",
    "out_variant",
    "resolve_device",
]
