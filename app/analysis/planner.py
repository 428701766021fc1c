"""The app's one door to the planner and the baseline allocator model.

Everything here is pure Python over roam_core objects (no cache, no Dash): the planner
call, a baseline's order and its simulated caching-allocator layout.  Callers use
``planner.run_planner`` through this module, so that tests can put a double in its place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.analysis.settings import BASELINE_METHODS, PlanSettings
from roam_core.base.cancel import CancelToken
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import Plan
from roam_core.oracle.allocator_sim import Block

if TYPE_CHECKING:
    from roam_core.planner import PlanProgress

__all__ = ["baseline_layout", "baseline_order", "run_planner"]

_logger = logging.getLogger(__name__)


def run_planner(graph: Graph, settings: PlanSettings,
                progress: Callable[[PlanProgress], None] | None = None,
                cancel: CancelToken = None) -> Plan:
    """Plan ``graph`` with ``roam_core.planner.make_plan``.

    Parameters
    ----------
    graph : Graph
        The graph.
    settings : PlanSettings
        Method and limits.
    progress : callable, optional
        Receives ``PlanProgress(stage, done, total, best_peak_bytes, message)`` records.
    cancel : CancelToken
        Cooperative cancellation: once it says stop, the planner stops and returns the
        best valid plan found so far.

    Returns
    -------
    Plan
    """
    from roam_core.planner import make_plan  # the planner loads OR-Tools: only when planning
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
