"""The registry of cheap operator orders (the baselines) and the best-of driver.

Problem
-------
Given a training-step :class:`~roam_core.model.graph.Graph`, find a valid order of its ops (data
edges and control edges honoured) whose simulated peak memory
(:func:`roam_core.oracle.simulate.simulate`) is small.  Every strategy here is cheap: the DFS and
BFS orders cost ``O(E log N)``; the greedy list schedulers keep the ready ops in priority
queues and update only the keys a step changes, ``O((N + E) log N)`` in all (under a second
each on a 100k-op graph).  The planner uses the best one as its
warm start and as the "never worse than the best baseline" guarantee.

Strategies (the registry :data:`ORDER_METHODS`)
-----------------------------------------------
1. ``eager``: program order (what PyTorch runs).
2. ``eager_moved_state``: program order with optimizer-state creation sunk to its first
   user (the paper's PyTorch baseline, :func:`roam_core.oracle.baseline.moved_state_order`).
3. ``lescea``: ROAM's heuristic baseline, a greedy list scheduler.  Among ready ops prefer
   one whose run does not raise the running peak (then the smallest live memory after it),
   otherwise the one with the smallest new peak; ties by op name.
4. ``lpmf``: inductor's "least peak memory first" (same greedy idea, inductor's
   bookkeeping: unused outputs are freed at once, ties by program index).
5. ``bfs``: inductor's FIFO order (ready op whose predecessors ran earliest first).
6. ``dfs``: inductor's DFS, visiting ops (and their unmet inputs) by ascending
   "output + input bytes".
7. ``xla_list``: XLA's list scheduler: highest ``bytes freed - bytes defined`` first, then
   most users, then the most recently readied; effective scalars are forced early.
8. ``xla_dfs``: XLA's DFS post-order from the sinks, operands with more "extra users" and
   larger cumulative sizes first.
9. ``xla_postorder``: a plain DFS post-order from the sinks, operands in input order.
10. ``lpmf_updates``: LPMF on forward + backward only, then each per-parameter update
    group (:mod:`roam_core.ordering.update_groups`) inserted, largest first, at the slot that
    minimises the
    profile peak (the strongest cheap order, see ``docs/design/calibration.md``); a few variants
    and plain LPMF are scored and the best is kept.

Composites ``inductor`` (best of 4-6) and ``xla`` (best of 7-9) score their members with
the one estimator, like inductor's ``reorder_for_peak_memory``.  :func:`best_heuristic_order`
runs a list of methods, logs each score, isolates per-method failures and returns the
minimum.

References
----------
inductor ``torch/_inductor/memory.py`` (LPMF, BFS, DFS); XLA ``hlo_memory_scheduler.cc``
(list, DFS and post-order schedulers); ROAM ``baselines/heuristics/LESCEA.py``.  Ideas only:
no code was copied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from roam_core.base.errors import ConfigError, GraphError, RoamError
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.oracle.baseline import moved_state_order
from roam_core.oracle.simulate import MemoryProfile, simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.list_schedulers import eager_order, lescea_order, lpmf_order, xla_list_order
from roam_core.ordering.searches import bfs_order, dfs_order, xla_dfs_order, xla_postorder_order
from roam_core.ordering.update_insertion import best_update_insertion

__all__ = [
    "COMPOSITE_METHODS",
    "DEFAULT_METHODS",
    "ORDER_METHODS",
    "HeuristicResult",
    "OrderMethod",
    "best_heuristic_order",
    "bfs_order",
    "dfs_order",
    "eager_order",
    "inductor_order",
    "lescea_order",
    "lpmf_order",
    "lpmf_updates_order",
    "run_method",
    "xla_dfs_order",
    "xla_list_order",
    "xla_order",
    "xla_postorder_order",
]

_logger = logging.getLogger(__name__)

class OrderMethod(Protocol):
    """A strategy: graph in, valid order out.

    ``alignment_bytes`` is the allocator granularity its memory keys round every storage up
    to (the planner passes ``PlannerConfig.alignment_bytes``).
    """

    def __call__(self, graph: Graph, *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order: ...


def _best_of(graph: Graph, names: Sequence[str], alignment_bytes: int) -> Order:
    res = best_heuristic_order(graph, names, alignment_bytes=alignment_bytes, validate=False)
    return res.order


def inductor_order(graph: Graph, *, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Best of ``lpmf``, ``bfs`` and ``dfs`` scored by
    :func:`~roam_core.oracle.simulate.simulate`."""
    return _best_of(graph, ("lpmf", "bfs", "dfs"), alignment_bytes)


def xla_order(graph: Graph, *, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Best of ``xla_list``, ``xla_dfs`` and ``xla_postorder`` (one estimator)."""
    return _best_of(graph, ("xla_list", "xla_dfs", "xla_postorder"), alignment_bytes)


def lpmf_updates_order(graph: Graph, *,
                       alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """LPMF on forward + backward, then cost-aware insertion of per-parameter updates.

    See :func:`roam_core.ordering.update_groups.insert_update_groups` and
    :func:`roam_core.ordering.update_groups.best_update_insertion`; never worse than plain LPMF
    (graphs
    without update groups get plain LPMF).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.oracle.validate import check_order
    >>> g = tiny_train_step()
    >>> check_order(g, lpmf_updates_order(g))
    []
    """
    return best_update_insertion(graph, alignment_bytes=alignment_bytes)


def _eager_moved_state(graph: Graph, *,
                       alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    return tuple(moved_state_order(graph))


#: Every registered strategy, by name.
ORDER_METHODS: dict[str, OrderMethod] = {
    "eager": eager_order,
    "eager_moved_state": _eager_moved_state,
    "lescea": lescea_order,
    "lpmf": lpmf_order,
    "bfs": bfs_order,
    "dfs": dfs_order,
    "inductor": inductor_order,
    "xla_list": xla_list_order,
    "xla_dfs": xla_dfs_order,
    "xla_postorder": xla_postorder_order,
    "xla": xla_order,
    "lpmf_updates": lpmf_updates_order,
}

#: Methods that are themselves best-of runs over other entries.
COMPOSITE_METHODS = ("inductor", "xla")

#: What :func:`best_heuristic_order` tries by default (no composite: no double work).
DEFAULT_METHODS = tuple(m for m in ORDER_METHODS if m not in COMPOSITE_METHODS)


# ------------------------------------------------------------------- the driver
@dataclass(frozen=True, slots=True)
class HeuristicResult:
    """The best cheap order found.

    Parameters
    ----------
    order : tuple of OpId
        The winning order.
    profile : MemoryProfile
        Its simulated profile.
    method : str
        The winning method's name.
    scores : Mapping of str to int
        Simulated peak bytes (incl. resident) of every method that succeeded.
    seconds : Mapping of str to float
        Wall time of every method tried.
    """

    order: Order
    profile: MemoryProfile
    method: str
    scores: Mapping[str, int]
    seconds: Mapping[str, float]


def run_method(graph: Graph, method: str, *, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
               validate: bool = True) -> Order:
    """Run one registered method at ``alignment_bytes``.

    Raises ``ConfigError`` for an unknown name and ``GraphError`` for an invalid order.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> run_method(diamond(), "xla_list")
    ('a', 'c', 'b', 'd')
    """
    try:
        fn = ORDER_METHODS[method]
    except KeyError:
        raise ConfigError(
            f"unknown ordering method {method!r}; known: {', '.join(ORDER_METHODS)}"
        ) from None
    order = tuple(fn(graph, alignment_bytes=alignment_bytes))
    if validate:
        bad = check_order(graph, order)
        if bad:
            raise GraphError(f"method {method!r} returned an invalid order: {bad[0].message}")
    return order


def best_heuristic_order(
    graph: Graph,
    methods: Sequence[str] | None = None,
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    validate: bool = True,
) -> HeuristicResult:
    """Run several cheap orders, score each with ``simulate``, return the best.

    Parameters
    ----------
    graph : Graph
        The graph.
    methods : sequence of str, optional
        Names from :data:`ORDER_METHODS`; default :data:`DEFAULT_METHODS`.
    alignment_bytes : int
        Rounding used for scoring.
    validate : bool
        Check every order with :func:`~roam_core.oracle.validate.check_order` (a method whose
        order is invalid counts as failed).

    Returns
    -------
    HeuristicResult
        Ties go to the method listed first.

    Raises
    ------
    ConfigError
        If a name is not in :data:`ORDER_METHODS`.
    RoamError
        If every method failed.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> r = best_heuristic_order(tiny_train_step(), ["eager", "lpmf"], alignment_bytes=1)
    >>> r.method, r.profile.peak_bytes, dict(r.scores)
    ('eager', 1504, {'eager': 1504, 'lpmf': 1504})
    """
    names = tuple(methods) if methods is not None else DEFAULT_METHODS
    unknown = [m for m in names if m not in ORDER_METHODS]
    if unknown:  # a typo is the caller's mistake, not a strategy failure to isolate
        raise ConfigError(f"unknown ordering method(s) {', '.join(map(repr, unknown))}; "
                          f"known: {', '.join(ORDER_METHODS)}")
    best: tuple[int, str, Order, MemoryProfile] | None = None
    scores: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            order = run_method(graph, name, alignment_bytes=alignment_bytes, validate=validate)
            prof = simulate(graph, order, alignment_bytes=alignment_bytes)
        except Exception as e:  # isolate one strategy's failure
            seconds[name] = time.perf_counter() - t0
            _logger.warning("ordering method %s failed on %s: %s", name, graph.name, e)
            continue
        seconds[name] = time.perf_counter() - t0
        scores[name] = prof.peak_bytes
        _logger.info("%s peak memory: %d bytes (%.2f s)", name, prof.peak_bytes,
                     seconds[name])
        if best is None or prof.peak_bytes < best[0]:
            best = (prof.peak_bytes, name, order, prof)
    if best is None:
        raise RoamError(f"every ordering method failed on graph {graph.name!r}: {names}")
    return HeuristicResult(order=best[2], profile=best[3], method=best[1], scores=scores,
                           seconds=seconds)
