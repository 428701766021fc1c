"""Layout baselines: how other systems place tensors once the order is fixed.

:data:`LAYOUT_METHODS` maps each name to ``function(problem) -> Solution`` (all on
:class:`~roam_core.model.dsa.Problem`, all checked by the same validator);
:func:`baseline_layout` runs one on a graph in an order.

``greedy_size``
    TFLite's / XLA's greedy by size (:func:`~roam_core.layout.dsa_heuristics.greedy_by_size`):
    decreasing size, each into the smallest gap between the already placed time-neighbours
    that holds it (best fit), else on top.
``llfb``
    ROAM's long-lived-first baseline (:mod:`roam_core.layout.llfb`).
``inductor``
    The idea of torch inductor's pool planner (:mod:`roam_core.layout.inductor_pool`).

Adding a layout heuristic
-------------------------
Write it as ``function(problem: Problem) -> Solution`` in its own module
``roam_core/layout/<name>.py`` (import only ``roam_core.model`` and, if needed,
:mod:`roam_core.layout.dsa_heuristics`), then add one line to :data:`LAYOUT_METHODS` below.
Nothing else changes: the tests (``tests/roam_core/layout/test_layout_baselines.py``), the
benchmarks (``benchmarks/layout_bench.py``, ``benchmarks/dsa_bench.py``) and
:func:`baseline_layout` iterate the registry.

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> p = Problem((Buffer("a", 0, 4, 2), Buffer("b", 0, 2, 1), Buffer("c", 2, 4, 1)))
>>> {name: fn(p).height for name, fn in sorted(LAYOUT_METHODS.items())}
{'greedy_size': 3, 'inductor': 3, 'llfb': 3}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from roam_core.base.errors import ConfigError
from roam_core.layout.arena_layout import arena_layout, layout_problem
from roam_core.layout.dsa_heuristics import greedy_by_size
from roam_core.layout.inductor_pool import inductor_pool
from roam_core.layout.llfb import llfb
from roam_core.model.dsa import Problem, Solution
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId

__all__ = ["LAYOUT_METHODS", "BaselineLayout", "baseline_layout"]


#: Layout baselines by name: ``function(problem) -> Solution``.
LAYOUT_METHODS: dict[str, Callable[[Problem], Solution]] = {
    "greedy_size": greedy_by_size,
    "llfb": llfb,
    "inductor": inductor_pool,
}


@dataclass(frozen=True, slots=True)
class BaselineLayout:
    """A baseline's arena layout (same convention as
    :class:`roam_core.layout.arena_layout.ArenaLayout`)."""

    method: str
    offsets: Mapping[TensorId, int]
    arena_bytes: int
    alignment_bytes: int
    resident_bytes: int
    wall_time_s: float


def baseline_layout(graph: Graph, order: Sequence[OpId], method: str, *,
                    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> BaselineLayout:
    """Lay out ``graph`` in ``order`` with a baseline: resident storages at the bottom.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> baseline_layout(chain3(), chain3().op_ids, "llfb").arena_bytes
    1024
    """
    if method not in LAYOUT_METHODS:
        raise ConfigError(f"unknown layout method {method!r}; known: {sorted(LAYOUT_METHODS)}")
    t0 = time.perf_counter()
    a = max(1, alignment_bytes)
    problem = layout_problem(graph, order, a)
    lay = arena_layout(graph, problem, LAYOUT_METHODS[method](problem).offsets, a)
    return BaselineLayout(method, lay.offsets, lay.arena_bytes, a, lay.resident_bytes,
                          time.perf_counter() - t0)
