"""Arena layout of a graph in a fixed order: one byte offset for every storage.

Arena convention (see :mod:`roam_core.model.plan`): resident storages are stacked at the bottom,
``[0, R)``; planned storages live above on their lifetimes in the order
(:func:`roam_core.oracle.simulate.lifetimes`); offsets are multiples of ``alignment_bytes`` and
sizes are rounded up to it; ``arena_bytes = max(offset + rounded size)``.

Method (ROAM's stage 2 and merge, with a DSA portfolio beside it).  :func:`plan_arena` runs
the stages in turn, one function each (``_first_passes``, ``_roam``, ``_dsa``, ``_flip``,
``_peak_repair``, ``_shake``, ``_polish``); a stage runs only while the best candidate is
above the live-set bound.

0. **First greedy passes.** Largest section first, best fit, then (when that one is above
   the live-set bound) greedy by size (TFLite / XLA): a pass at the bound ends the layout,
   since nothing can be lower.  On training steps the first one usually is (GPT-2 steady
   steps at 24-360 layers, most ``sample_graphs/`` CNNs at batch 32), so a large graph's
   layout costs one ``O(n x overlap)`` pass.
1. **Activation stack** (steps 1-3: :mod:`roam_core.layout.subtask_layout`).  Activations
   (created before the loss step, freed after it) are stacked from offset 0 of the planned
   area, the one freed last at the bottom (LIFO, as ROAM does): they are all live at the
   loss, so this stack wastes nothing there.
2. **Sub-task layouts.** The other storages are grouped by the sub-task that produces them
   (``task_tree``; without one, by chronological chunks).  Each group is placed by a CP-SAT
   model (:mod:`roam_core.layout.group_placement`: time intervals fixed, offset intervals
   variable, ``add_no_overlap_2d``) against the storages already placed as fixed boxes,
   hinted by a best-fit greedy placement, minimising the arena height.  Placing groups
   against everything placed so far is the merge: there are no conflicts left to re-place.
3. **Compaction.** Every storage, lowest first, drops to the lowest offset where it fits.
4. **Portfolio.** :func:`roam_core.layout.dsa_solver.solve_dsa` also lays out the whole problem
   (greedy orders plus the canonical search); the lowest valid layout wins, so the result is
   never worse than greedy-by-size best fit.
5. **Flip-compact** (:mod:`roam_core.layout.flip_compact`).  Every candidate is mirrored
   top-to-bottom and re-dropped first-fit in its offset order, while that lowers it (cheap;
   often frees the top few hundred units).  Then the **peak repair** of the lowest
   candidates (:func:`roam_core.layout.dsa_repair.repair_from_starts`): the buffers live
   where the load is near the bound are re-placed by the exact search, everything else
   fixed, to within 0.01% of the bound; the searches of the starts and preorders run
   round-robin under doubling node limits (cut by search nodes: :func:`dsa_work_limit`).
   Then the lowest few candidates are *shaken*: the same move as the flip with a few random
   buffers dropped first (seeded), keeping the lowest layout.
6. **Polish** (:func:`~roam_core.layout.group_placement.polish_top_band`).  While time
   remains and the winner is above the live-set bound, the buffers reaching the top band
   are re-placed by CP-SAT under a lower ceiling (everything else fixed), widening the band
   while that fails.

Time: steps 1-3 get 35% of the budget, the DSA portfolio 50% of the rest, the shake 65% of
what is left then and the polish the remainder; a candidate that reaches the live-set bound
ends the search early, and one within the repair's tolerance of it (0.01%) skips the shake
and the polish (both cut by the clock).  The DSA candidate is cut by work (its fixed greedy
passes, stopped at the bound, and a node count), its clock limit (the time left plus its
share of the budget again) only a safety limit; the greedy layouts of step 0 are two of its
passes, not run twice.

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

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.checks import require_type
from roam_core.base.errors import ConfigError
from roam_core.base.status import SolveStatus
from roam_core.layout.config import ArenaConfig
from roam_core.layout.dsa_heuristics import greedy_by_size, named_order, place_in_order
from roam_core.layout.dsa_repair import repair_from_starts
from roam_core.layout.dsa_search import MAX_SEARCH_BUFFERS
from roam_core.layout.dsa_solver import NODES_PER_S, solve_dsa
from roam_core.layout.flip_compact import flip_compact, shake
from roam_core.layout.group_placement import polish_top_band
from roam_core.layout.subtask_layout import SubtaskTree, roam_candidate
from roam_core.model.dsa import Buffer, Problem, Solution
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.plan import SolveRecord
from roam_core.oracle.simulate import Lifetime, lifetimes

__all__ = ["ArenaConfig", "ArenaLayout", "arena_layout", "dsa_work_limit", "greedy_arena",
           "layout_problem", "plan_arena"]

_logger = logging.getLogger(__name__)

#: How many of the lowest candidates the shake starts from (each gets a share of its time).
_SHAKE_STARTS = 3


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
        ``fragmentation`` (arena / peak - 1), ``candidates`` (name -> arena bytes).
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


# ------------------------------------------------------------------- repair
#: Peak repair of the lowest candidates: the tolerance above the bound (a fraction of it) and
#: the peak window (the steps whose load is at least this fraction of the target).  The DSA
#: candidate already tried the bound itself in narrow windows
#: (:func:`~roam_core.layout.dsa_solver.solve_dsa`); here a layout within 0.01% of it in a
#: wide window (efficientnet_b0 b1: 913 nodes from its flipped greedy layout; the bound
#: itself was not reached in 8,000).
_REPAIR_TOLERANCE = 1e-4
_REPAIR_FRACTION = 0.6
#: Candidates (of distinct heights, lowest first) the repair starts from, searched
#: round-robin (:func:`~roam_core.layout.dsa_repair.repair_from_starts`).
_REPAIR_STARTS = 2


def _repair(problem: Problem, starts: Sequence[Solution], lb: int, budget: int,
            deadline: float, cancel: CancelToken) -> tuple[Solution | None, int, str, int]:
    """:func:`~roam_core.layout.dsa_repair.repair_from_starts` of ``starts`` to within
    :data:`_REPAIR_TOLERANCE` of ``lb``: the first layout found, the nodes spent, the
    method and the index of the start it came from (-1: none)."""
    target = lb + int(lb * _REPAIR_TOLERANCE)
    above = [k for k, s in enumerate(starts) if s.height > target]
    if not above:
        return None, 0, "repair", -1
    sol, nodes, how, k = repair_from_starts(problem, [starts[k] for k in above], target,
                                            node_budget=budget, deadline=deadline,
                                            cancel=cancel, fraction=_REPAIR_FRACTION)
    return sol, nodes, how, above[k] if k >= 0 else -1


# ------------------------------------------------------------------- driver
#: The first greedy passes (best fit), stopped once one reaches the live-set bound, and handed
#: to the DSA portfolio (whose passes they are) so that it does not run them again.  Largest
#: section first reaches the bound on training steps (GPT-2 steady steps at 24-360 layers:
#: then the layout is this one pass); greedy by size (TFLite / XLA) is the classic baseline
#: that the layout is never worse than, run whenever the first is above the bound.
_FIRST_ORDERS = ("total_length", "size")

#: The DSA candidate's clock limit is at least this many times the first greedy pass's wall
#: time: its large-problem path is at most 3 more portfolio passes and 4 promotion passes
#: (:data:`~roam_core.layout.dsa_solver.LARGE_ORDERS`, ``LARGE_PROMOTE_PASSES``), so a loaded
#: machine runs them all, later, instead of a load-dependent prefix.
_DSA_PASSES = 10


def dsa_work_limit(config: ArenaConfig) -> int:
    """Search nodes the DSA candidate may spend: its share of ``config.time_limit_s`` at
    :data:`~roam_core.layout.dsa_solver.NODES_PER_S` (a rate a loaded machine still reaches).

    >>> dsa_work_limit(ArenaConfig(time_limit_s=10.0))
    5000
    """
    share = 0.5 if config.use_cpsat else 1.0
    return max(1, int(config.time_limit_s * share * NODES_PER_S))


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
    t0 = time.monotonic()
    a = max(1, config.alignment_bytes)
    problem = layout_problem(graph, order, a, lifetimes(graph, order))
    st = _Stages(problem, config, cancel, t0)
    greedy_s = _first_passes(st)
    if st.above_bound() and config.use_cpsat and len(problem):
        _roam(st, graph, order, task_tree)
    if st.above_bound() and config.use_dsa and len(problem):
        _dsa(st, greedy_s)
    # after a cancel the improvement steps (5-6) are skipped: they only lower a valid
    # layout, and the shake alone runs until its share of the clock is spent
    if config.flip_compact and len(problem) and st.above_bound() and not st.stopped():
        _flip(st)
    st.method = min(st.candidates, key=lambda k: (st.candidates[k].height, k != "roam"))
    st.sol = st.candidates[st.method]
    if (st.sol.height > st.lb and config.peak_repair and config.use_dsa and config.dsa_exact
            and len(problem) <= MAX_SEARCH_BUFFERS and not st.stopped()):
        _peak_repair(st)  # (the search has its own size limit)
    # within the repair's tolerance of the bound (0.01%) the shake and the polish are not
    # run: they are cut by the clock, so they would make the layout depend on the load and
    # spend the rest of the budget (efficientnet_b0 b1: repaired to 0.0073%, neither ever
    # lowered it)
    close = config.peak_repair and st.sol.height <= st.lb + int(st.lb * _REPAIR_TOLERANCE)
    if (config.flip_compact and st.sol.height > st.lb and config.shake_rounds > 0 and not close
            and not st.stopped()):
        _shake(st)
    if (st.sol.height > st.lb and config.use_cpsat and len(problem) and not close
            and not st.stopped()):
        _polish(st)
    return _finish(st, graph)


class _Stages:
    """What the stages of :func:`plan_arena` share: the problem, the candidates by name,
    the winner so far (``method``, ``sol``) and the record of every solver call."""

    def __init__(self, problem: Problem, config: ArenaConfig, cancel: CancelToken,
                 t0: float) -> None:
        self.problem, self.config, self.cancel, self.t0 = problem, config, cancel, t0
        self.deadline = t0 + config.time_limit_s
        self.a = max(1, config.alignment_bytes)
        self.lb = problem.lower_bound()
        self.candidates: dict[str, Solution] = {}
        self.passes: dict[str, Solution] = {}  # the greedy passes of step 0
        self.records: list[SolveRecord] = []
        self.method = ""
        self.sol = Solution((), 0)

    def stopped(self) -> bool:
        """Whether the caller cancelled (the improvement steps are then skipped)."""
        return is_cancelled(self.cancel)

    def lowest(self) -> int:
        """The height of the lowest candidate."""
        return min(c.height for c in self.candidates.values())

    def above_bound(self) -> bool:
        """Whether every candidate is above the live-set bound."""
        return self.lowest() > self.lb

    def record(self, stage: str, task_id: str, height: int | None, started: float,
               size: int) -> None:
        """A heuristic stage's record, heights scaled to bytes."""
        self.records.append(SolveRecord(stage, task_id, SolveStatus.HEURISTIC,
                                        None if height is None else height * self.a,
                                        self.lb * self.a, time.perf_counter() - started, size))

    def by_height(self) -> list[str]:
        """Candidate names, lowest first (the winner first among equals, then by name)."""
        return sorted(self.candidates,
                      key=lambda k: (self.candidates[k].height, k != self.method, k))


def _first_passes(st: _Stages) -> float:
    """Step 0: the first greedy passes, stopped at the bound; a pass at the bound is the
    layout, otherwise greedy by size is the candidate (the other pass is one of the DSA
    portfolio's, handed to it: the later stages see the same candidates as without it).
    Returns the wall time of the slowest pass (the machine's present speed)."""
    greedy_s = 0.0
    problem, passes = st.problem, st.passes
    for oname in _FIRST_ORDERS:  # stopped at the bound: nothing can be lower
        if passes and min(c.height for c in passes.values()) <= st.lb:
            break
        t = time.perf_counter()
        first = place_in_order(problem, named_order(problem, oname), "best")
        assert first is not None
        greedy_s = max(greedy_s, time.perf_counter() - t)
        passes[f"greedy:{oname}:best"] = first
        st.record("layout", "greedy" if oname == "size" else f"greedy:{oname}", first.height,
                  t, len(problem))
    at_lb = [k for k, v in passes.items() if v.height <= st.lb]
    st.candidates.update({k: passes[k] for k in (at_lb[:1] or ["greedy:size:best"])})
    return greedy_s


def _roam(st: _Stages, graph: Graph, order: Sequence[OpId],
          task_tree: SubtaskTree | None) -> None:
    """Steps 1-3: the activation stack and the CP-SAT sub-task groups (35% of the budget
    when the DSA candidate runs too)."""
    cfg = st.config
    budget = st.deadline if not cfg.use_dsa else st.t0 + 0.35 * cfg.time_limit_s
    sol, recs = roam_candidate(graph, order, st.problem, task_tree, cfg, budget, st.cancel)
    st.candidates["roam"] = sol
    st.records.extend(_scale(r, st.a) for r in recs)


def _dsa(st: _Stages, greedy_s: float) -> None:
    """Step 4: the DSA portfolio and search on the whole problem, handed the greedy passes
    of step 0.

    The search is cut by a node count from the configured budget, not by the time left: the
    same graph and settings give the same candidate on a loaded machine.  The clock is only
    the outer safety limit: the time left plus the DSA's share of the budget again, and at
    least the time of _DSA_PASSES greedy passes as fast as the first one ran, so that a
    loaded machine still completes the fixed greedy passes of a large problem (they stop at
    the bound; GPT-2 96 / 192 layers at load 15: cut after the first pass, 1,536 B above the
    bound, where the second reaches it) and the node budget of a small one.
    """
    cfg = st.config
    share = 0.5 if cfg.use_cpsat else 1.0
    left = max(0.1, (st.deadline - time.monotonic()) * share)
    t = time.perf_counter()
    res = solve_dsa(st.problem, time_limit_s=max(left + cfg.time_limit_s * share,
                                                 _DSA_PASSES * greedy_s),
                    cancel=st.cancel, exact=cfg.dsa_exact, work_limit=dsa_work_limit(cfg),
                    known=st.passes)
    assert res.solution is not None
    st.candidates[res.method] = res.solution
    st.records.append(SolveRecord("layout", "dsa", res.status, res.solution.height * st.a,
                                  res.lower_bound * st.a, time.perf_counter() - t,
                                  len(st.problem)))


def _flip(st: _Stages) -> None:
    """Step 5: flip-compact every candidate (a lower result is a new candidate)."""
    t = time.perf_counter()
    for name, cand in list(st.candidates.items()):
        flipped = flip_compact(st.problem, cand, st.deadline)
        if flipped.height < cand.height:
            st.candidates[f"{name}+flip"] = flipped
    st.record("merge", "flip", st.lowest(), t, len(st.problem))


def _peak_repair(st: _Stages) -> None:
    """Step 5: the peak repair of the lowest candidates of distinct heights.

    Cut by nodes; the clock (twice the budget) only as a safety limit, so that a loaded
    machine gets the same layout, later.  Which start repairs well varies (on
    efficientnet_b0 b1 the task tree's candidate is lowest, but only the flipped greedy
    layout repairs to within 0.01%), so the lowest candidates of distinct heights are
    searched round-robin under one node budget.
    """
    names: list[str] = []
    for name in st.by_height():
        if len(names) < _REPAIR_STARTS and st.candidates[name].height not in {
                st.candidates[n].height for n in names}:
            names.append(name)
    t = time.perf_counter()
    repaired, nodes, how, k = _repair(st.problem, [st.candidates[n] for n in names], st.lb,
                                      dsa_work_limit(st.config),
                                      st.deadline + st.config.time_limit_s, st.cancel)
    st.record("merge", "repair", None if repaired is None else repaired.height, t, nodes)
    if repaired is not None and repaired.height < st.sol.height:
        st.method = f"{names[k]}+{how}"
        st.candidates[st.method] = st.sol = repaired


def _shake(st: _Stages) -> None:
    """Step 5: shake the lowest few candidates, each with a slice of 65% of the time left
    (which start shakes down best varies)."""
    t = time.perf_counter()
    shake_end = time.monotonic() + 0.65 * max(0.0, st.deadline - time.monotonic())
    starts = st.by_height()[:_SHAKE_STARTS]
    for k, name in enumerate(starts):
        if st.sol.height <= st.lb or st.stopped():
            break
        left = shake_end - time.monotonic()
        shaken = shake(st.problem, st.candidates[name],
                       time.monotonic() + left / (len(starts) - k),
                       st.config.seed + k, st.config.shake_rounds)
        if shaken.height < st.sol.height:
            st.method = f"{name}+shake"
            st.sol = shaken
    st.candidates.setdefault(st.method, st.sol)
    st.record("merge", "shake", st.sol.height, t, len(st.problem))


def _polish(st: _Stages) -> None:
    """Step 6: lower the top band with CP-SAT until the deadline, then flip-compact the
    polished layout once more."""
    polished, recs = polish_top_band(st.problem, st.sol, st.lb, st.config, st.deadline,
                                     st.cancel)
    st.records.extend(_scale(r, st.a) for r in recs)
    if polished.height < st.sol.height:
        st.method = f"{st.method}+polish"
        st.candidates[st.method] = st.sol = polished
        if st.config.flip_compact and st.sol.height > st.lb:
            flipped = flip_compact(st.problem, st.sol, st.deadline + 1.0)
            if flipped.height < st.sol.height:
                st.method = f"{st.method}+flip"
                st.candidates[st.method] = st.sol = flipped


def _finish(st: _Stages, graph: Graph) -> ArenaLayout:
    """The arena of the winner, with its stats."""
    a = st.a
    resident = graph.resident_bytes(a)
    peak = resident + st.lb * a
    stats = {
        "method": st.method,
        "planned_peak_bytes": peak,
        "lower_bound_bytes": peak,
        "candidates": {k: resident + v.height * a for k, v in st.candidates.items()},
        "wall_time_s": time.monotonic() - st.t0,
    }
    lay = arena_layout(graph, st.problem, st.sol.offsets, a, st.records, stats)
    lay = replace(lay, stats={**lay.stats,
                              "fragmentation": lay.arena_bytes / peak - 1 if peak else 0.0})
    _logger.info("arena %s: %d bytes (peak %d, %s)", graph.name, lay.arena_bytes, peak,
                 st.method)
    return lay


def _scale(r: SolveRecord, a: int) -> SolveRecord:
    return SolveRecord(r.stage, r.task_id, r.status,
                       None if r.objective is None else r.objective * a,
                       None if r.best_bound is None else r.best_bound * a, r.wall_time_s,
                       r.size)
