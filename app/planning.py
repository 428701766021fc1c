"""The app's one door to the planner and the baseline allocator model.

Everything here is pure Python over roam_core objects (no Dash): the settings record that
keys the plan cache, the planner call, a baseline's order and its simulated caching-allocator
layout.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import Plan
from roam_core.oracle.allocator_sim import Block

__all__ = [
    "BASELINE_METHODS",
    "PLAN_METHODS",
    "PlanSettings",
    "baseline_layout",
    "baseline_order",
    "run_planner",
    "settings_from_form",
]

_logger = logging.getLogger(__name__)

#: "before" choices (value, label) offered by the app (names of ``registry.ORDER_METHODS``).
BASELINE_METHODS: tuple[tuple[str, str], ...] = (
    ("eager", "eager (program order)"),
    ("inductor", "Inductor-style"),
    ("lescea", "LESCEA"),
    ("xla", "XLA-style"),
    ("eager_moved_state", "eager, optimizer state moved (paper's PyTorch)"),
)
#: methods the "Plan" button can run.
PLAN_METHODS: tuple[tuple[str, str], ...] = (("roam", "ROAM (full planner)"), *BASELINE_METHODS)


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """Planner settings chosen in the app (part of the plan cache key)."""

    method: str = "roam"
    time_limit_s: float = 10.0
    node_limit: int = 60
    workers: int = 1
    alignment_bytes: int = 512

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return dataclasses.asdict(self)

    def problems(self) -> list[str]:
        """What is wrong with these settings, in words (empty when they are usable).

        >>> PlanSettings(time_limit_s=-5, workers=0).problems()
        ['time limit must be more than 0 s (got -5 s)', 'workers must be at least 1 (got 0)']
        """
        out = []
        if not self.time_limit_s > 0:
            out.append(f"time limit must be more than 0 s (got {self.time_limit_s:g} s)")
        if self.node_limit < 1:
            out.append(f"node limit must be at least 1 (got {self.node_limit})")
        if self.workers < 1:
            out.append(f"workers must be at least 1 (got {self.workers})")
        if self.alignment_bytes < 1:
            out.append(f"alignment must be at least 1 byte (got {self.alignment_bytes})")
        return out


#: A number field of the plan-settings form as Dash sends it (empty: ``None`` or ``""``).
FormNumber = float | int | str | None


def settings_from_form(method: str | None, time_limit: FormNumber, node_limit: FormNumber,
                       workers: FormNumber, alignment: FormNumber) -> PlanSettings:
    """The plan-settings form as :class:`PlanSettings`: the one parser of that form.

    An empty field takes 1 (and an empty method ``"roam"``); the Plan card, the Budget view
    and What fits all read the form through this function.

    Raises
    ------
    ConfigError
        Saying, in words, what is wrong (:meth:`PlanSettings.problems`).

    Examples
    --------
    >>> settings_from_form("eager", 2.5, 60, None, "512")
    PlanSettings(method='eager', time_limit_s=2.5, node_limit=60, workers=1, alignment_bytes=512)
    >>> settings_from_form(None, 0, 60, 1, 512)
    Traceback (most recent call last):
    ...
    roam_core.base.errors.ConfigError: time limit must be more than 0 s (got 0 s)
    """
    def number(value: FormNumber) -> float:
        return 1.0 if value is None or value == "" else float(value)

    settings = PlanSettings(method or "roam", number(time_limit), int(number(node_limit)),
                            int(number(workers)), int(number(alignment)))
    bad = settings.problems()
    if bad:
        raise ConfigError("; ".join(bad))
    return settings


def run_planner(graph: Graph, settings: PlanSettings,
                progress: Callable[[Any], None] | None = None,
                cancel: Callable[[], bool] | None = None) -> Plan:
    """Plan ``graph`` with ``roam_core.planner.make_plan``.

    Parameters
    ----------
    graph : Graph
        The graph.
    settings : PlanSettings
        Method and limits.
    progress : callable, optional
        Receives ``PlanProgress(stage, done, total, best_peak_bytes, message)`` records.
    cancel : callable, optional
        Cooperative cancellation: once it returns True the planner stops and returns the
        best valid plan found so far.

    Returns
    -------
    Plan
    """
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    return make_plan(graph, config=cfg, method=settings.method, progress=progress,
                     cancel=cancel)


def baseline_order(graph: Graph, method: str) -> tuple[tuple[OpId, ...], str]:
    """The order of a baseline (``registry.ORDER_METHODS``) and its label."""
    from roam_core.ordering.registry import ORDER_METHODS

    label = dict(BASELINE_METHODS).get(method, method)
    if method not in ORDER_METHODS:
        _logger.warning("unknown baseline %r: using eager", method)
        return graph.op_ids, f"eager ({method} unknown)"
    return tuple(ORDER_METHODS[method](graph)), label


def baseline_layout(graph: Graph, order: Sequence[OpId]
                    ) -> tuple[list[Block], int, str]:
    """Addresses of every storage under the PyTorch caching-allocator model for ``order``.

    Returns
    -------
    blocks, peak_reserved_bytes, label

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> blocks, reserved, _ = baseline_layout(chain3(), chain3().op_ids)
    >>> [(b.tensor_id, b.start_step, b.end_step) for b in blocks], reserved
    ([('a', 0, 2), ('b', 1, 3), ('c', 2, 3)], 2097152)
    """
    from roam_core.oracle.allocator_sim import simulate_allocator

    res = simulate_allocator(graph, order)
    return list(res.blocks), int(res.peak_reserved_bytes), "simulated PyTorch caching allocator"
