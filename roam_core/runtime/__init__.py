"""The runtime, the top library layer: run a plan for real in one arena, next to eager.

* :mod:`~roam_core.runtime.execution`: :func:`execute_plan` / :func:`execute_traced`, one
  planned step next to an eager one (numerics, peaks, step times);
* :mod:`~roam_core.runtime.planned_step`: :class:`PlannedStep`, training with a plan;
  :mod:`~roam_core.runtime.step_context` (what a plan was made for, checked every call),
  :mod:`~roam_core.runtime.step_plans` (plans by batch shape, planned on first use),
  :mod:`~roam_core.runtime.resident_store` (the values the plans share),
  :mod:`~roam_core.runtime.absent_grads` (gradients a step does not keep),
  :mod:`~roam_core.runtime.buckets` (padding variable-length batches to a few shapes);
* :mod:`~roam_core.runtime.arena_runner`, :mod:`~roam_core.runtime.program`: the replay;
* :mod:`~roam_core.runtime.device`, :mod:`~roam_core.runtime.plan_checks`: what is checked
  before anything runs.

This package imports torch; ``import roam_core`` does not import it.
"""

from roam_core.runtime.absent_grads import AbsentGrad, GradientsNotKeptError
from roam_core.runtime.arena_runner import OUT_DENY, ArenaRunner, RunStats, out_variant
from roam_core.runtime.buckets import bucket_length, pad_to_bucket
from roam_core.runtime.device import resolve_device
from roam_core.runtime.execution import execute_plan, execute_traced
from roam_core.runtime.plan_checks import check_fingerprint
from roam_core.runtime.planned_step import PlannedStep
from roam_core.runtime.report import REQUIRED_KEYS, ExecutionReport
from roam_core.runtime.step_context import StepMismatchError
from roam_core.runtime.step_plans import BatchMismatchError, NewShapeWarning

__all__ = [
    "OUT_DENY",
    "REQUIRED_KEYS",
    "AbsentGrad",
    "ArenaRunner",
    "BatchMismatchError",
    "ExecutionReport",
    "GradientsNotKeptError",
    "NewShapeWarning",
    "PlannedStep",
    "RunStats",
    "StepMismatchError",
    "bucket_length",
    "check_fingerprint",
    "execute_plan",
    "execute_traced",
    "out_variant",
    "pad_to_bucket",
    "resolve_device",
]
