"""Arena layout of a graph in a fixed order: one byte offset for every storage.

Arena convention (see :mod:`roam_core.model.plan`): resident storages are stacked at the bottom,
``[0, R)``; planned storages live above on their lifetimes in the order
(:func:`roam_core.oracle.simulate.lifetimes`); offsets are multiples of ``alignment_bytes`` and
sizes are rounded up to it; ``arena_bytes = max(offset + rounded size)``.

Method (ROAM's stage 2 and merge, with a DSA portfolio beside it).  :func:`plan_arena` runs
the steps in turn, one function each in :mod:`roam_core.layout.arena_stages`.  Every step
after the first passes only polishes, so it runs only while the lowest candidate is above
the **value contract**: within ``max(good_enough_gap x planned peak, good_enough_bytes)``
(0.01 %, 64 KiB by default; ``docs/planning_time.md``) of the planned peak, nothing more is
worth buying.  Each step is cut by a count of work, not by the clock.

0. **First greedy passes.** Largest section first, best fit, then (when that one is above
   the live-set bound) greedy by size (TFLite / XLA), so the layout is never worse than
   greedy by size.  On training steps the first one is usually at the bound (GPT-2 steady
   steps at 24-360 layers, most ``sample_graphs/`` CNNs at batch 32), so a large graph's
   layout costs one ``O(n x overlap)`` pass.
0b. **Promotion** (iterated greedy): the buffers of the pass with the fewest of them above
   the contract move to the front of its order, and everything is placed again, at most
   ``promote_passes`` times (Llama-style steps reach the bound in 5-6).
1. **Activation stack** (steps 1-3: :mod:`roam_core.layout.subtask_layout`).  Activations
   (created before the loss step, freed after it) are stacked from offset 0 of the planned
   area, the one freed last at the bottom (LIFO, as ROAM does): they are all live at the
   loss, so this stack wastes nothing there.
2. **Sub-task layouts.** The other storages are grouped by the sub-task that produces them
   (``task_tree``; without one, by chronological chunks).  Each group is placed by a CP-SAT
   model (:mod:`roam_core.layout.group_placement`: time intervals fixed, offset intervals
   variable, ``add_no_overlap_2d``) against the storages already placed as fixed boxes,
   hinted by a best-fit greedy placement, minimising the arena height, with
   ``task_time_limit_s`` deterministic seconds.
3. **Compaction.** Every storage, lowest first, drops to the lowest offset where it fits.
3b. **Restart** (when still above the contract): the promotion once more from the
   chronological order, since the first run can settle in a cycle (MoE steps).
4. **Portfolio.** :func:`roam_core.layout.dsa_solver.solve_dsa` also lays out the whole problem
   (greedy orders, and the canonical search under ``search_nodes`` nodes when the problem
   has at most ``search_max_buffers`` buffers and ``search_max_cells`` cells).
5. **Flip-compact** (:mod:`roam_core.layout.flip_compact`): candidates mirrored top-to-bottom
   and re-dropped first-fit while that lowers them.  Then the **peak repair** of the lowest
   candidates (:func:`roam_core.layout.dsa_repair.repair_from_starts`): the buffers live
   where the load is near the bound are re-placed by the exact search, everything else
   fixed, the window narrowed until it holds ``search_max_buffers`` buffers and
   ``search_max_cells`` cells.  Then the **shake** of the lowest few candidates (seeded
   random promotions), ``shake_rounds`` greedy passes in all.
6. **Polish** (:func:`~roam_core.layout.group_placement.polish_top_band`): the buffers
   reaching the top band of the winner are re-placed by CP-SAT under a lower ceiling.

The lowest candidate wins.  ``ArenaLayout.stats["stages"]`` holds one
:class:`~roam_core.model.stage_cost.StageCost` per step that ran (seconds, arena bytes
gained, work against budget, why it stopped).  ``time_limit_s`` is a safety limit only, in
CPU seconds of the calling thread (:mod:`roam_core.base.cpu_clock`): the same graph, order
and settings give the same layout on an idle or a loaded machine unless it cuts a step
short, and the load does not make it cut sooner.

Examples
--------
>>> from roam_core.model.samples import diamond
>>> g = diamond()
>>> lay = plan_arena(g, g.op_ids, config=ArenaConfig(time_limit_s=2))
>>> lay.arena_bytes, sorted(lay.offsets) == sorted(g.tensors)
(1536, True)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from roam_core.base.cancel import CancelToken
from roam_core.base.checks import require_type
from roam_core.base.errors import ConfigError
from roam_core.base.status import SolveStatus
from roam_core.layout.arena_stages import STEPS, ArenaStages, first_passes, make_roam
from roam_core.layout.config import ArenaConfig
from roam_core.layout.dsa_heuristics import greedy_by_size
from roam_core.layout.subtask_layout import SubtaskTree
from roam_core.model.dsa import Buffer, Problem
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.plan import SolveRecord
from roam_core.oracle.simulate import Lifetime, lifetimes

__all__ = ["ArenaConfig", "ArenaLayout", "arena_layout", "greedy_arena", "layout_problem",
           "plan_arena"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArenaLayout:
    """An arena layout.

    Parameters
    ----------
    offsets : Mapping of TensorId to int
        Byte offset of every storage (resident ones included).
    arena_bytes : int
        ``max(offset + rounded size)``.
    alignment_bytes : int
        Granularity used.
    resident_bytes : int
        Rounded bytes of the resident storages (stacked at ``[0, resident_bytes)``).
    provenance : tuple of SolveRecord
        Every solver call (stage ``"layout"`` or ``"merge"``).
    stats : Mapping
        ``method`` (the winning candidate), ``planned_peak_bytes`` (resident + live peak),
        ``fragmentation`` (arena / peak - 1), ``candidates`` (name -> arena bytes),
        ``stages`` (a tuple of :class:`~roam_core.model.stage_cost.StageCost`, one per step
        that ran), ``good_enough_bytes`` (the arena at or below which no step runs).
    """

    offsets: Mapping[TensorId, int]
    arena_bytes: int
    alignment_bytes: int
    resident_bytes: int
    provenance: tuple[SolveRecord, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ problem
def layout_problem(graph: Graph, order: Sequence[OpId], alignment_bytes: int,
                   lts: Mapping[TensorId, Lifetime] | None = None) -> Problem:
    """The planned storages as a DSA problem in units of ``alignment_bytes`` (size > 0 only)."""
    lts = lts if lts is not None else lifetimes(graph, order)
    a = max(1, alignment_bytes)
    bufs = []
    for tid, lt in lts.items():
        units = round_size(graph.tensors[tid].size_bytes, a) // a
        if units:
            bufs.append(Buffer(str(tid), lt.start, lt.end, units))
    return Problem(tuple(bufs))


def arena_layout(graph: Graph, problem: Problem, units: Sequence[int], alignment_bytes: int,
                 provenance: Sequence[SolveRecord] = (),
                 stats: Mapping[str, Any] | None = None) -> ArenaLayout:
    """The arena of a solved :func:`layout_problem`: resident storages stacked at the bottom
    (graph order), each buffer at ``resident + offset * alignment_bytes``, zero-byte storages
    at 0.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> g = chain3()
    >>> p = layout_problem(g, g.op_ids, 512)
    >>> arena_layout(g, p, [0, 1, 0], 512).offsets
    {'a': 0, 'b': 512, 'c': 0}
    """
    a = alignment_bytes
    offsets: dict[TensorId, int] = {}
    base = 0
    for t in graph.tensors.values():
        if t.producer is None:
            offsets[t.id] = base
            base += round_size(t.size_bytes, a)
    resident = base
    for b, u in zip(problem.buffers, units):
        offsets[TensorId(b.id)] = resident + u * a
    for t in graph.tensors.values():
        offsets.setdefault(t.id, 0)  # zero-byte planned storages
    height = max((offsets[t.id] + round_size(t.size_bytes, a) for t in graph.tensors.values()
                  if round_size(t.size_bytes, a)), default=0)
    return ArenaLayout(offsets, height, a, resident, tuple(provenance), dict(stats or {}))


def greedy_arena(graph: Graph, order: Sequence[OpId], *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> ArenaLayout:
    """Greedy-by-size best-fit layout (TFLite/XLA style): fast, no solver.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> greedy_arena(chain3(), chain3().op_ids).arena_bytes
    1024
    """
    t0 = time.perf_counter()
    problem = layout_problem(graph, order, alignment_bytes)
    sol = greedy_by_size(problem)
    rec = SolveRecord("layout", "global", SolveStatus.HEURISTIC, sol.height * alignment_bytes, None,
                      time.perf_counter() - t0, len(problem))
    return arena_layout(graph, problem, sol.offsets, alignment_bytes, [rec],
                   {"method": "greedy:size:best"})


def plan_arena(graph: Graph, order: Sequence[OpId], *, task_tree: SubtaskTree | None = None,
               config: ArenaConfig = ArenaConfig(),  # noqa: B008 - frozen
               cancel: CancelToken = None) -> ArenaLayout:
    """Lay out every storage of ``graph`` for ``order`` in one arena.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        A valid order (lifetimes come from it).
    task_tree : TaskTree, optional
        ``roam_core.ordering.decompose.TaskTree``; its sub-tasks group the storages (by producer
        op).
    config : ArenaConfig
        Settings.
    cancel : threading.Event or callable, optional
        Stops the solvers early (the best layout so far is returned).

    Returns
    -------
    ArenaLayout
        ``stats["method"]`` names the candidate that won (``"roam"`` for steps 1-3, the DSA
        method otherwise).
    """
    require_type(graph, Graph, "plan_arena: graph", ConfigError)
    t0 = time.perf_counter()
    a = max(1, config.alignment_bytes)
    problem = layout_problem(graph, order, a, lifetimes(graph, order))
    st = ArenaStages(problem, config, cancel, t0, graph.resident_bytes(a))
    st.run("greedy", first_passes)
    for step in STEPS:
        if not step.on(config):
            continue
        if st.lowest() <= st.target or st.cancelled():
            break  # within the value contract (or at the bound), or cancelled
        st.run(step.name, step.run or make_roam(graph, order, task_tree))
    return _finish(st, graph)


def _finish(st: ArenaStages, graph: Graph) -> ArenaLayout:
    """The arena of the winner, with its stats."""
    a = st.a
    resident = graph.resident_bytes(a)
    peak = resident + st.lb * a
    stats = {
        "method": st.method,
        "planned_peak_bytes": peak,
        "lower_bound_bytes": peak,
        "good_enough_bytes": resident + st.target * a,
        "candidates": {k: resident + v.height * a for k, v in st.candidates.items()},
        "stages": tuple(st.costs),
        "wall_time_s": time.perf_counter() - st.t0,
    }
    lay = arena_layout(graph, st.problem, st.sol.offsets, a, st.records, stats)
    lay = replace(lay, stats={**lay.stats,
                              "fragmentation": lay.arena_bytes / peak - 1 if peak else 0.0})
    _logger.info("arena %s: %d bytes (peak %d, %s)", graph.name, lay.arena_bytes, peak,
                 st.method)
    return lay
