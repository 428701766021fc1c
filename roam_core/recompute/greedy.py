"""Which storages to drop: a greedy trajectory over a fixed base order, evaluated exactly.

:func:`greedy_trajectory` starts from ``D = {}`` and repeatedly drops the storage with the
best *bytes removed at the peak step per unit of recompute cost* (the evaluator's
objective, :mod:`roam_core.recompute.objective`: estimated seconds on a device profile by
default, so cheap elementwise re-runs cost their bytes at memory bandwidth), taking the first
of the best-scored candidates whose exact evaluation
(:class:`~roam_core.recompute.evaluator.JitEvaluator`: each recompute op just in time)
lowers ``(peak, steps at the peak)``.  Every prefix of the trajectory is a plan, with a
non-increasing peak and a non-decreasing cost, so one run gives the whole frontier and a
budget's answer is monotone in the budget.  :func:`prune` then re-admits dropped storages
that the budget no longer needs (costliest first); :func:`knee` picks the frontier's knee.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId
from roam_core.model.union_find import UnionFind
from roam_core.recompute.evaluator import Evaluation, JitEvaluator, KeepBound
from roam_core.recompute.objective import RerunCosts

__all__ = ["GROUP_MAX_STORAGES", "GreedyTrajectory", "TrajectoryPoint", "greedy_trajectory",
           "knee", "prune"]

#: Most storages one group move drops (besides its chain), see :class:`GreedyTrajectory`.
GROUP_MAX_STORAGES = 16

@dataclass(frozen=True, slots=True)
class TrajectoryPoint:
    """One prefix of the greedy trajectory: drop the first ``n_dropped`` storages
    (``extra_cost`` in the objective's unit, ``extra_seconds`` estimated)."""

    n_dropped: int
    peak_bytes: int
    extra_flops: int
    extra_bytes: int
    extra_cost: float = 0.0
    extra_seconds: float = 0.0


def _closure(ev: JitEvaluator, s: TensorId, dset: set[TensorId], running: set[OpId],
             live_at: Callable[[TensorId], bool]
             ) -> tuple[list[OpId], list[TensorId], list[TensorId]]:
    """What dropping ``s`` takes: ops newly re-run, kept storages they read, chain drops.

    An input of a re-run that is not live at the peak step anyway is itself rebuilt (a
    chain) when its producer may re-run, rather than kept alive across the peak.
    """
    new: list[OpId] = []
    kept: list[TensorId] = []
    chain: list[TensorId] = []
    drop = dset | {s}
    ix = ev.index
    tprod, vprod, op_ins = ix.tensor_producer, ix.value_producer, ix.op_inputs
    size, blockers, outputs = ev.size, ev.blockers, ev.outputs
    # views of s that forward ops made and late readers read are re-run too
    stack: list[OpId | None] = [tprod[s], *ev.late_view_producers(s)]
    seen: set[OpId] = set()
    while stack:
        p = stack.pop()
        if p is None or p in seen or p in running:
            continue
        seen.add(p)
        new.append(p)
        for u, su in op_ins[p]:
            if su in drop:
                stack.append(vprod[u])
                continue
            tp = tprod[su]
            if tp is None or not size[su]:
                continue
            if not live_at(su) and blockers[tp] is None and su not in outputs:
                drop.add(su)
                chain.append(su)
                stack.append(vprod[u])
            else:
                kept.append(su)
    return new, kept, chain


def _pinned_before(ev: JitEvaluator, new: Sequence[OpId], pos: Mapping[OpId, int],
                   step: int, drop: set[TensorId] | frozenset[TensorId] = frozenset()
                   ) -> bool:
    """Whether a re-run of ``new`` must run at or before ``step``: it reads a storage that
    an in-place write after its source (at or before ``step``) overwrites.  Storages in
    ``drop`` are read through their copies (an in-place built mask: its writers re-run on
    the copy), never overwritten."""
    op_ins = ev.index.op_inputs
    for o in new:
        src = -1
        for _, su in op_ins[o]:
            if su in drop:
                continue
            ws = ev.writers.get(su)
            if not ws:
                continue
            if src < 0:
                src = pos[o]
            for w in ws:
                if src < pos[w] <= step:
                    return True
    return False


class GreedyTrajectory:
    """The greedy drop trajectory as a resumable computation (see :func:`greedy_trajectory`).

    :meth:`run` advances it until a peak is reached or no candidate lowers the peak any
    more; a later call goes on from where the previous one stopped, so one budget only
    pays for the prefix it needs and the frontier extends the same run.

    Parameters
    ----------
    graph, base_order, alignment_bytes, costs, tries_per_step, evaluator
        As for :func:`greedy_trajectory`.
    start : sequence of TensorId, optional
        Start from this drop set instead of ``{}`` (a baseline's: the trajectory then goes
        on below it); the first point is that drop set's.
    """

    def __init__(self, graph: Graph, base_order: Sequence[OpId], *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
                 costs: RerunCosts | None = None,
                 tries_per_step: int = 8, evaluator: JitEvaluator | None = None,
                 group_moves: bool = True, max_group: int = GROUP_MAX_STORAGES,
                 start: Sequence[TensorId] = ()) -> None:
        self.evaluator = ev = evaluator or JitEvaluator(graph, base_order, alignment_bytes,
                                                        costs)
        #: added to a cost in the bytes-per-cost scores (keeps free re-runs finite)
        self.eps = ev.costs.epsilon
        self.tries_per_step = tries_per_step
        #: also score group moves (:func:`_group_moves`); ``False``: one storage at a time
        self.group_moves = group_moves
        self.max_group = max_group
        self._rejected_groups: set[frozenset[TensorId]] = set()
        #: the drop sequence so far
        self.dropped: list[TensorId] = list(start)
        self.current = c = ev.evaluate(self.dropped)
        #: one point per prefix (the first is ``start``'s, "drop nothing" by default)
        self.points: list[TrajectoryPoint] = [
            TrajectoryPoint(len(self.dropped), c.peak_bytes, c.extra_flops, c.extra_bytes,
                            c.extra_cost, c.extra_seconds)]
        #: True once no candidate lowers the peak (at once for a step without ops: no peak
        #: step to drop anything across)
        self.finished = self.current.live is not None and len(self.current.live) == 0
        self._rejected: set[TensorId] = set()
        self._last_peak = self.current.peak_bytes
        self._cand = [s for s in ev.droppable if ev.size[s]]
        ix = np.asarray([ev.index.index_of[s] for s in self._cand], dtype=np.int64)
        self._ix = ix
        self._first_late = ev.index.first_late_step[ix]
        self._last_early = ev.index.last_early_step[ix]
        g = ev.graph
        self._producer: dict[TensorId, OpId] = {
            s: g.tensors[s].producer for s in self._cand}  # type: ignore[misc]  # droppable: made
        #: storages no late op reads that a re-run may rebuild (forward intermediates):
        #: with group moves, one that re-runs hold across the peak is a candidate too
        self._held: list[TensorId] = []
        if group_moves:
            late, dr = ev.late, set(self._cand)
            self._held = [t for t in ev.planned if t not in dr and t not in ev.outputs
                          and ev.blockers[self._tp(t)] is None
                          and not any(r in late for r in ev.readers[t])]
            for t in self._held:
                self._producer[t] = self._tp(t)
        self._own_cost = {s: ev.cost[p] for s, p in self._producer.items()}

    def _tp(self, t: TensorId) -> OpId:
        p = self.evaluator.graph.tensors[t].producer
        assert p is not None
        return p

    def run(self, stop_at_bytes: int | None = None, max_steps: int | None = None
            ) -> GreedyTrajectory:
        """Advance until the peak is at most ``stop_at_bytes``, ``max_steps`` drops are made
        or the trajectory ends; returns ``self``."""
        while not self.finished:
            if stop_at_bytes is not None and self.current.peak_bytes <= stop_at_bytes:
                break
            if max_steps is not None and len(self.dropped) >= max_steps:
                break
            self._step()
        return self

    def _candidates(self) -> list[TensorId]:
        """Droppable storages live across the first peak step, read before it in the
        forward and after it in a late phase (in droppable order)."""
        cur = self.current
        assert cur.spans is not None
        assert cur.positions is not None
        assert cur.live is not None
        p = int(np.argmax(cur.live))
        epos = cur.positions.base_steps
        start, end = cur.spans.arrays()
        a, b = start[self._ix], end[self._ix]
        fl, le = self._first_late, self._last_early
        late_ok = (fl >= 0) & (epos[np.maximum(fl, 0)] > p)
        early_ok = np.where(le >= 0, epos[np.maximum(le, 0)] < p, a < p)
        keep = np.flatnonzero((a <= p) & (p < b) & late_ok & early_ok)
        return [self._cand[k] for k in keep]

    def _step(self) -> None:
        cur = self.current
        if cur.peak_bytes != self._last_peak:
            self._rejected.clear()
            self._rejected_groups.clear()
            self._last_peak = cur.peak_bytes
        assert cur.spans is not None
        assert cur.positions is not None
        assert cur.live is not None
        p = int(np.argmax(cur.live))
        dset = set(self.dropped)
        running = {r.source for r in cur.recompute}
        start, end = cur.spans.arrays()
        planned = self.evaluator.planned
        live_here = {planned[i] for i in np.flatnonzero((start <= p) & (p < end))}
        live_at = live_here.__contains__
        cands = self._candidates()
        if self._held:  # kept across the peak only for the re-runs that read them
            cands += [t for t in self._held if t in live_here and t not in dset]
        scored = self._score_singles(cands, dset, running, live_at, p)
        moves: list[tuple[float, str, tuple[TensorId, ...], tuple[TensorId, ...]]] = [
            (sc, s, chain, (s,)) for sc, s, chain in scored]
        if self.group_moves and (not scored or self._costs_flops(scored[0], dset, running,
                                                                 live_at)):
            groups = _group_moves(self.evaluator, [s for s in cands if s not in dset], dset,
                                  running, live_at, cur.positions, p,
                                  self.max_group)
            moves += [(sc, min(m), chain, m) for sc, chain, m in groups
                      if frozenset(m) not in self._rejected_groups]
            moves.sort(key=lambda x: (-x[0], x[1], len(x[3])))
        if not moves:
            self.finished = True
            return
        self._take_first_lowering(moves)

    def _score_singles(self, cands: Sequence[TensorId], dset: set[TensorId],
                       running: set[OpId], live_at: Callable[[TensorId], bool], p: int
                       ) -> list[tuple[float, TensorId, tuple[TensorId, ...]]]:
        """The single moves, best score first: ``(score, storage, chain)``.

        A candidate's score is at most its size over its own producer's cost (the re-runs
        always include the producer unless it already re-runs): candidates are scored in
        that bound's order, stopping once no bound reaches the k-th best score, so the k
        best are the same as when every candidate is scored.
        """
        ev, eps, pos = self.evaluator, self.eps, self.current.positions
        assert pos is not None
        k = self.tries_per_step
        bounds: list[tuple[float, TensorId]] = []
        for s in cands:
            if s in dset or s in self._rejected:
                continue
            own = 0.0 if self._producer[s] in running else self._own_cost[s]
            bounds.append((-(ev.size[s] / (own + eps)), s))
        bounds.sort()
        scored: list[tuple[float, TensorId, tuple[TensorId, ...]]] = []
        top: list[float] = []  # the k best scores so far (a min-heap)
        for neg_ub, s in bounds:
            if len(top) >= k and -neg_ub < top[0]:
                break
            new, kept, chain = _closure(ev, s, dset, running, live_at)
            if _pinned_before(ev, new, pos, p, dset | {s, *chain}):
                continue  # a re-run would have to run before the peak: no gain
            penalty = sum(ev.size[t] for t in set(kept) if not live_at(t))
            gain = ev.size[s] - penalty
            if gain <= 0:
                continue
            cost = sum(ev.cost[o] for o in new)
            score = gain / (cost + eps)
            scored.append((score, s, tuple(chain)))
            if len(top) < k:
                heapq.heappush(top, score)
            else:
                heapq.heappushpop(top, score)
        scored.sort(key=lambda x: (-x[0], x[1]))
        return scored

    def _take_first_lowering(self, moves: Sequence[tuple[float, str, tuple[TensorId, ...],
                                                         tuple[TensorId, ...]]]) -> None:
        """Evaluate the best ``tries_per_step`` moves exactly and take the first that lowers
        ``(peak, steps at the peak)``; the others are rejected until the peak changes (the
        next step then goes on with the next best ones)."""
        cur = self.current
        for _, _, chain, members in moves[:self.tries_per_step]:
            nxt = self.evaluator.evaluate([*self.dropped, *chain, *members])
            if (nxt.peak_bytes, nxt.peak_steps) < (cur.peak_bytes, cur.peak_steps):
                self.dropped.extend(chain)
                self.dropped.extend(members)
                self.current = nxt
                self.points.append(TrajectoryPoint(len(self.dropped), nxt.peak_bytes,
                                                   nxt.extra_flops, nxt.extra_bytes,
                                                   nxt.extra_cost, nxt.extra_seconds))
                return
            if len(members) == 1:
                self._rejected.add(members[0])
            else:
                self._rejected_groups.add(frozenset(members))

    def _costs_flops(self, best: tuple[float, TensorId, tuple[TensorId, ...]],
                     dset: set[TensorId], running: set[OpId],
                     live_at: Callable[[TensorId], bool]) -> bool:
        """Whether the best single move re-runs an op that costs FLOPs (then group moves
        of cheaper storages are scored beside it)."""
        ev = self.evaluator
        new, _, _ = _closure(ev, best[1], dset, running, live_at)
        return any(ev.flops[o] > 0 for o in new)


def _group_moves(ev: JitEvaluator, cands: Sequence[TensorId], dset: set[TensorId],
                 running: set[OpId], live_at: Callable[[TensorId], bool],
                 pos: Mapping[OpId, int], step: int, max_group: int
                 ) -> list[tuple[float, tuple[TensorId, ...], tuple[TensorId, ...]]]:
    """Drop sets that only pay off together: candidates whose re-runs need the same storage
    that is not live at the peak step.

    Dropping one storage may need an input that is not live at the peak anyway: the single
    move either holds it across the peak (no gain) or rebuilds it too (a chain, often a
    matmul).  GPT-2's dropout mask is rebuilt from the shape of the projection output, and
    so is the residual ``add`` after it: each alone frees 3 MiB and needs the projection's
    3 MiB output (or its ``addmm`` re-run).  Candidates that need the same such storage
    are joined (union-find over the storages they would hold or rebuild; at most
    ``max_group`` storages a group, the first in candidate order), and the group keeps each
    storage two or more members need (held once, not rebuilt), so together they free more
    than they hold, without the shared re-run.  A group is scored as one move -- bytes
    freed at the peak step less bytes held, per unit of the cost of the ops it re-runs
    (the evaluator's objective) -- beside the single moves, and evaluated
    exactly by the caller.

    Returns
    -------
    list of (score, chain, members)
        Groups of two or more members with a positive gain.
    """
    needs: dict[TensorId, set[TensorId]] = {}
    for s in cands:
        _, kept, chain = _closure(ev, s, dset, running, live_at)
        h = {t for t in kept if not live_at(t)} | set(chain)
        if h:
            needs[s] = h
    uf: UnionFind[TensorId] = UnionFind(needs)
    first_of: dict[TensorId, TensorId] = {}  # the first candidate needing each storage
    for s, h in needs.items():
        for t in h:
            uf.union(s, first_of.setdefault(t, s))
    groups = [m[:max_group] for m in uf.groups() if len(m) > 1]
    out: list[tuple[float, tuple[TensorId, ...], tuple[TensorId, ...]]] = []
    for members in groups:
        move = _group_move(ev, members, needs, dset, running, live_at, pos, step)
        if move is not None:
            out.append(move)
    return out


def _group_move(ev: JitEvaluator, members: Sequence[TensorId],
                needs: Mapping[TensorId, set[TensorId]], dset: set[TensorId],
                running: set[OpId], live_at: Callable[[TensorId], bool],
                pos: Mapping[OpId, int], step: int
                ) -> tuple[float, tuple[TensorId, ...], tuple[TensorId, ...]] | None:
    """One group as a move ``(score, chain, members)``: each storage two or more members
    need is held once; ``None`` when a re-run is pinned before the peak or nothing is
    gained."""
    ms = set(members)
    shared = {t for t in set().union(*(needs.get(s, set()) for s in members))
              if t not in ms and sum(t in needs.get(s, ()) for s in members) > 1}

    def live_or_shared(t: TensorId) -> bool:
        return t in shared or live_at(t)

    d = set(dset)
    run = set(running)
    new_all: list[OpId] = []
    kept_all: set[TensorId] = set()
    chain_all: list[TensorId] = []
    for s in members:
        new, kept, chain = _closure(ev, s, d, run, live_or_shared)
        d.add(s)
        d.update(chain)
        run.update(new)
        new_all += new
        kept_all.update(kept)
        chain_all += chain
    kept_all -= d
    if _pinned_before(ev, new_all, pos, step, d):
        return None
    gain = sum(ev.size[s] for s in members) - sum(
        ev.size[t] for t in kept_all if not live_at(t))
    if gain <= 0:
        return None
    cost = sum(ev.cost[o] for o in set(new_all))
    return gain / (cost + ev.costs.epsilon), tuple(dict.fromkeys(chain_all)), tuple(members)


def greedy_trajectory(
    graph: Graph,
    base_order: Sequence[OpId],
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    costs: RerunCosts | None = None,
    stop_at_bytes: int | None = None,
    max_steps: int | None = None,
    tries_per_step: int = 8,
    evaluator: JitEvaluator | None = None,
    group_moves: bool = True,
) -> tuple[list[TensorId], list[TrajectoryPoint]]:
    """Drop storages one at a time, each time lowering the peak for the least cost.

    Parameters
    ----------
    graph : Graph
        The graph.
    base_order : sequence of OpId
        A valid order of ``graph`` (usually the planner's order without recomputation).
    alignment_bytes : int
        Allocator rounding.
    costs : RerunCosts, optional
        What a re-run of each op costs (default: estimated time on the default device
        profile, :func:`~roam_core.recompute.objective.rerun_costs`).
    stop_at_bytes : int, optional
        Stop once the peak is at or below this.
    max_steps : int, optional
        Stop after this many drops.
    tries_per_step : int
        Best-scored candidates evaluated exactly per step.
    evaluator : JitEvaluator, optional
        Reuse an evaluator built for ``(graph, base_order)``.
    group_moves : bool
        When the best single move re-runs an op with FLOPs, also score groups of storages
        that only lower the peak together (they keep the same input alive; one move drops
        them all, :func:`_group_moves`).  ``False``: one storage at a time.

    Returns
    -------
    (list of TensorId, list of TrajectoryPoint)
        The drop sequence, and one point per prefix (the first is "drop nothing"; a group
        move adds one point for all its storages).
    """
    t = GreedyTrajectory(graph, base_order, alignment_bytes=alignment_bytes,
                         costs=costs, tries_per_step=tries_per_step,
                         evaluator=evaluator, group_moves=group_moves
                         ).run(stop_at_bytes, max_steps)
    return t.dropped, t.points


def prune(evaluator: JitEvaluator, dropped: Sequence[TensorId], limit_bytes: int, *,
          by_flops: bool = False) -> Evaluation:
    """Keep again every dropped storage the limit does not need (costliest re-run first).

    Returns the evaluation of the pruned drop set (its peak is ``<= limit_bytes`` when the
    input's was).  A storage is kept again when that costs no more in the evaluator's
    objective (``by_flops``: in FLOPs alone).
    """
    def cost(e: Evaluation) -> float:
        return float(e.extra_flops) if by_flops else e.extra_cost

    def own(s: TensorId) -> float:
        p = evaluator.index.tensor_producer[s]
        return float(evaluator.flops[p]) if by_flops and p is not None \
            else evaluator.producer_cost(s)

    cur = list(dropped)
    best = evaluator.evaluate(cur)
    allowed = max(limit_bytes, best.peak_bytes)  # never worse than the input
    bound: KeepBound | None = None
    for s in sorted(dropped, key=lambda s: (-own(s), s)):
        if bound is None:
            bound = KeepBound(evaluator, best)
        if bound.peak_with(s) > allowed:
            continue  # keeping s again is over the limit whatever the re-runs do
        trial = [x for x in cur if x != s]
        ev = evaluator.evaluate(trial)
        if ev.peak_bytes <= allowed and cost(ev) <= cost(best):
            cur, best, bound = trial, ev, None
    return best


def knee(points: Sequence[TrajectoryPoint]) -> TrajectoryPoint:
    """The frontier's knee: the point closest to (lowest peak, no cost), both normalised
    (cost: ``extra_cost``, the objective's).

    Examples
    --------
    >>> pts = [TrajectoryPoint(0, 100, 0, 0), TrajectoryPoint(1, 60, 5, 0, 5.0),
    ...        TrajectoryPoint(2, 50, 100, 0, 100.0)]
    >>> knee(pts).n_dropped
    1
    """
    hi = max(p.peak_bytes for p in points)
    lo = min(p.peak_bytes for p in points)
    top = max(p.extra_cost for p in points) or 1.0

    def dist(p: TrajectoryPoint) -> float:
        x = (p.peak_bytes - lo) / (hi - lo) if hi > lo else 0.0
        y = p.extra_cost / top
        return x * x + y * y

    return min(points, key=lambda p: (dist(p), p.n_dropped))
