"""Planning into the cache: a plan per graph and settings, stored under a key made of both.

The planner itself is :func:`app.analysis.planner.run_planner` (called through its module,
so that tests can put a double in its place); every plan is checked by the validator before
it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from app.analysis import planner
from app.analysis.settings import PlanSettings
from app.core import state
from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.errors import PlanFormatError, PlanInvalidError
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.oracle.validate import check_plan

if TYPE_CHECKING:
    from roam_core.planner import PlanProgress

__all__ = ["CANCELLED_NOTE", "cached_plan_key", "plan_graph", "plan_graph_job", "validate_plan"]

#: The note a plan cut short by Cancel carries.
CANCELLED_NOTE = ("cancelled: this is the best plan found before the cancel, not the "
                  "planner's full result (press Plan again for it)")


def validate_plan(graph: Graph, plan: Plan) -> None:
    """Raise ``PlanFormatError``/``PlanInvalidError`` unless ``plan`` fits ``graph``."""
    if plan.graph_fingerprint != graph.fingerprint():
        raise PlanFormatError(f"plan was made for graph '{plan.graph_name}', not for this "
                              f"graph '{graph.name}'")
    violations = check_plan(graph, plan)
    if violations:
        raise PlanInvalidError(violations)


def _cached(graph_key: str, settings: PlanSettings) -> str | None:
    """The key of a stored plan of this graph with these settings that this session may
    read: its own, else the public one (the start-up plan)."""
    s = settings.as_dict()
    for key in (state.plan_key(graph_key, s), state.public_plan_key(graph_key, s)):
        if state.has_plan(key):
            return key
    return None


def plan_graph(graph_key: str, settings: PlanSettings,
               progress: Callable[[PlanProgress], None] | None = None) -> str:
    """Plan (or fetch the cached plan for) a stored graph; returns the plan key."""
    cached = _cached(graph_key, settings)
    if cached is not None:
        return cached
    key = state.plan_key(graph_key, settings.as_dict())
    graph = state.get_graph(graph_key)
    plan = planner.run_planner(graph, settings, progress)
    validate_plan(graph, plan)
    return state.put_plan(plan, key)


def cached_plan_key(graph_key: str, settings: PlanSettings) -> str | None:
    """The plan key for these settings when it is already cached (for this session)."""
    return _cached(graph_key, settings)


def plan_graph_job(graph_key: str, settings: PlanSettings,
                   progress: Callable[[PlanProgress], None] | None = None,
                   cancel: CancelToken = None) -> tuple[str, bool]:
    """Like :func:`plan_graph`, cancellable: ``(plan key, cancelled)``.

    A cancelled run returns the best valid plan found so far; it is stored under its content
    hash, never under the settings' cache key (the next Plan press plans in full).
    """
    cached = _cached(graph_key, settings)
    if cached is not None:
        return cached, False
    key = state.plan_key(graph_key, settings.as_dict())
    graph = state.get_graph(graph_key)
    plan = planner.run_planner(graph, settings, progress, cancel)
    validate_plan(graph, plan)
    if is_cancelled(cancel):  # the plan says so itself: the summary, exports and reports
        return state.put_plan(replace(plan, notes=(*plan.notes, CANCELLED_NOTE))), True
    return state.put_plan(plan, key), False
