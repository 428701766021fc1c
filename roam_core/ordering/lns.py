"""Peak-directed large-neighbourhood search over a whole order, scored by the simulator.

The task tree fixes which ops may move together, and the weight-update rewrites pin each
parameter's update; an order that needs a far move (an update run long before its pinned
place, a weight-gradient matmul run at the other end of the backward) is out of reach of
every sub-task.  This search works on the *input* graph (no rewrites) and only ever accepts
an order whose simulated peak is lower, or equal with fewer steps at the peak, so it is
never worse than where it starts.  Its moves, around the current peak step ``p``:

* **hoist**: for a storage live at ``p`` whose users after ``p`` keep it alive, move those
  users, their ancestors that run after ``p``, and the ops after ``p`` that only wait on
  them (up to ``max_move_ops``), to just before ``p``, or as early as they can go;
* **sink**: for a storage created before ``p`` and live at ``p``, move its producer and its
  descendants up to ``p`` to just after ``p``;
* **window**: re-order a window of consecutive steps around ``p`` exactly with the CP-SAT
  sub-task model (:mod:`roam_core.ordering.order_ilp`) on the input graph.

Every candidate is checked against every ordering edge and scored with the same liveness
rule as :func:`roam_core.oracle.simulate.simulate` (vectorised:
:class:`~roam_core.ordering.live_bytes.IndexLiveBytes`; a hoist or a sink is scored from
the current order's curve, :class:`~roam_core.ordering.block_moves.BlockMoves`); the
final order is re-simulated by the caller.  Work is counted in candidate evaluations and
CP-SAT deterministic seconds, so the result does not depend on machine load unless the
optional wall-clock ``deadline`` cuts it short.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.cancel import CancelFlag, CancelToken, as_cancel_flag
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId
from roam_core.model.reach import reachability
from roam_core.ordering.block_moves import BlockMoves
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.live_bytes import IndexLiveBytes

__all__ = ["LnsResult", "peak_search"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LnsResult:
    """What :func:`peak_search` did.

    Parameters
    ----------
    order : tuple of OpId
        The best order found (the start order when nothing better was found).
    start_peak_bytes, peak_bytes : int
        Planned peak (resident excluded) before and after.
    evaluations : int
        Candidate orders scored.
    accepted : dict of str to int
        Accepted moves per kind (``hoist``, ``sink``, ``window``).
    windows : int
        CP-SAT window solves.
    wall_time_s : float
        Seconds spent.
    stopped : str
        Why it stopped: ``"bound"`` (reached the floor), ``"no move"``, ``"budget"``,
        ``"deadline"``, ``"cancelled"``.
    """

    order: tuple[OpId, ...]
    start_peak_bytes: int
    peak_bytes: int
    evaluations: int
    accepted: dict[str, int]
    windows: int
    wall_time_s: float
    stopped: str


#: A candidate order: its kind (``hoist``, ``sink``), the order (op indices), the steps of
#: the current order it moves (sorted) and the step they go right after (-1: first).
_Candidate = tuple[str, np.ndarray, np.ndarray, int]


def _score(live: np.ndarray) -> tuple[int, int]:
    m = int(live.max()) if len(live) else 0
    return m, int(np.count_nonzero(live == m))


def peak_search(
    graph: Graph,
    order: Sequence[OpId],
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    floor_bytes: int = 0,
    max_rounds: int = 200,
    max_evaluations: int = 20_000,
    max_move_ops: int = 64,
    max_storages: int = 48,
    window: int = 120,
    window_config: OrderSolverConfig | None = None,
    max_windows: int = 8,
    deadline: float | None = None,
    cancel: CancelToken = None,
) -> LnsResult:
    """Lower the peak of a valid ``order`` of ``graph`` by peak-directed moves.

    Parameters
    ----------
    graph : Graph
        The graph (the input graph: moves honour its data and control edges only).
    order : sequence of OpId
        A valid order to start from.
    alignment_bytes : int
        Storage rounding.
    floor_bytes : int
        Stop once the planned peak (resident excluded) is at or below this (a proven bound).
    max_rounds : int
        Accepted moves at most.
    max_evaluations : int
        Candidate orders scored at most (the deterministic work limit).
    max_move_ops : int
        Largest op set one hoist or sink moves.
    max_storages : int
        Storages live at the peak (largest first, those forced there skipped) tried per round.
    window : int
        Steps of a CP-SAT window (0: no windows).
    window_config : OrderSolverConfig, optional
        Settings of each window solve (default: 2 deterministic seconds).
    max_windows : int
        Window solves at most.
    deadline : float, optional
        ``time.monotonic()`` at which to stop (a safety net; makes the result load-dependent).
    cancel : CancelToken, optional
        An Event or a callable returning True to stop.

    Returns
    -------
    LnsResult

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> peak_search(g, g.op_ids, alignment_bytes=1).peak_bytes
    350
    """
    t0 = time.perf_counter()
    wcfg = window_config if window_config is not None else OrderSolverConfig(
        time_limit_s=2.0, stop_at_lower_bound=True)
    srch = _PeakSearch(graph, order, alignment_bytes, max_evaluations, deadline,
                       as_cancel_flag(cancel))
    start_peak = srch.best[0]
    stopped = "budget"
    for _ in range(max_rounds):
        if srch.best[0] <= floor_bytes:
            stopped = "bound"
            break
        why = srch.stop_reason()
        if why:
            stopped = why
            break
        p = int(np.argmax(srch.live))
        moved = srch.best_move(srch.moves(p, max_move_ops, max_storages))
        if not moved and window > 1 and srch.windows < max_windows:
            moved = srch.window_move(p, window, wcfg, floor_bytes)
        if not moved:  # none lowered the peak, or a stop cut the round short
            stopped = srch.stop_reason() or "no move"
            break
    out = srch.cg.order_ids(srch.cur)
    _logger.info("peak search on %s: %d -> %d bytes (%s), %d evaluations, %d windows",
                 graph.name, start_peak, srch.best[0], stopped, srch.evals, srch.windows)
    return LnsResult(tuple(out), start_peak, srch.best[0], srch.evals, srch.accepted,
                     srch.windows, time.perf_counter() - t0, stopped)


class _PeakSearch:
    """The state of one :func:`peak_search`: the current order (op indices), its curve and
    score, and the work done (candidate evaluations, window solves, accepted moves)."""

    def __init__(self, graph: Graph, order: Sequence[OpId], alignment_bytes: int,
                 max_evaluations: int, deadline: float | None,
                 cancel: CancelFlag | None) -> None:
        self.graph, self.alignment_bytes = graph, alignment_bytes
        self.sc = IndexLiveBytes.of(graph, alignment_bytes)
        self.cg = self.sc.cg
        start = np.asarray([self.cg.index[o] for o in order], dtype=np.int64)
        assert self.sc.valid(start), "peak_search needs a valid start order"
        self.bm = BlockMoves(self.sc, start)
        self.best = _score(self.live)
        self.reach = reachability(graph)  # program numbering, like the compact view
        self.max_evaluations, self.deadline, self.cancel = max_evaluations, deadline, cancel
        self.evals = 0
        self.windows = 0
        self.accepted = {"hoist": 0, "sink": 0, "window": 0}
        self.tried_windows: set[tuple[int, ...]] = set()

    @property
    def cur(self) -> np.ndarray:
        """The current order (op indices)."""
        return self.bm.order

    @property
    def live(self) -> np.ndarray:
        """The current order's curve."""
        return self.bm.live

    def stop_reason(self) -> str | None:
        """Why the search must stop now (``None``: it may go on)."""
        if self.cancel is not None and self.cancel():
            return "cancelled"
        if self.deadline is not None and time.monotonic() > self.deadline:
            return "deadline"
        if self.evals >= self.max_evaluations:
            return "budget"
        return None

    def moves(self, p: int, max_move_ops: int, max_storages: int) -> list[_Candidate]:
        """Candidate orders around the peak step ``p``: hoists and sinks of the storages
        live there (biggest first; those forced live at ``p`` in every order skipped)."""
        sc, cg, cur = self.sc, self.cg, self.cur
        pos, start, end = self.bm.pos, self.bm.start, self.bm.end
        at = pos.tolist()  # Python ints: the hoists' walks read one position per edge
        live_ids = np.nonzero((start <= p) & (end > p))[0]
        # biggest storages first: they matter most
        live_ids = live_ids[np.argsort(-sc.size[live_ids], kind="stable")]
        candidates: list[_Candidate] = []
        failed: set[int] = set()  # ops whose hoist closure failed, this round
        x = int(cur[p])
        # storages forced live at p in every order cannot be moved away from it: skip them
        anc_x = self.reach.ancestors[x] | (1 << x)
        desc_x = self.reach.descendants[x] | (1 << x)
        users = cg.users
        movable = [int(s) for s in live_ids
                   if not (anc_x >> int(sc.producer[s]) & 1
                           and any(desc_x >> u & 1 for u in users[int(s)]))]
        for s in movable[:max_storages]:
            q = int(sc.producer[s])
            if q != x and not sc.is_output[s]:
                # hoist the users after p (with what they need and what only waits on them)
                late = sorted({pos[u] for u in users[s] if pos[u] > p})
                if late:
                    for mv in _hoist_sets(cur, pos, at, p, late, cg.preds, cg.succs,
                                          max_move_ops, failed):
                        candidates.extend(_hoist_orders(cur, pos, p, mv, cg.preds))
            if q != x and pos[q] < p:
                for mv in _sink_sets(cur, pos, p, int(pos[q]), cg.preds, cg.succs,
                                     max_move_ops):
                    keep = np.ones(sc.n, dtype=bool)
                    keep[mv] = False
                    rest_before = cur[:p + 1][keep[:p + 1]]
                    candidates.append(("sink", np.concatenate(
                        [rest_before, cur[mv], cur[p + 1:]]), np.asarray(mv), p))
        return candidates

    def best_move(self, candidates: Sequence[_Candidate]) -> bool:
        """Score every distinct candidate (until a stop) and take the best one that lowers
        the score; True when one was taken."""
        best_cand: tuple[tuple[int, int], str, np.ndarray] | None = None
        seen: set[bytes] = set()
        for kind, cand, moved, after in candidates:
            key = cand.tobytes()
            if key in seen:
                continue
            seen.add(key)
            if self.stop_reason():
                break
            self.evals += 1
            sco = self.bm.score_of(cand, moved, after)
            if sco is None:
                continue  # breaks an ordering edge
            if sco < self.best and (best_cand is None or sco < best_cand[0]):
                best_cand = (sco, kind, cand)
        if best_cand is None:
            return False
        self.best, kind, new = best_cand
        self.bm.set_order(new)
        self.accepted[kind] += 1
        return True

    def window_move(self, p: int, window: int, config: OrderSolverConfig,
                    floor_bytes: int) -> bool:
        """Re-order the ``window`` steps around ``p`` with the CP-SAT sub-task model (each
        window once); True when that lowered the score."""
        from roam_core.ordering.order_ilp import solve_order_problem
        from roam_core.ordering.order_problem import build_order_problem, merge_orders

        n, cg, cur = self.sc.n, self.cg, self.cur
        lo = max(0, min(p - window // 2, n - window))
        hi = min(n, lo + window)
        wkey = tuple(int(v) for v in cur[lo:hi])
        if wkey in self.tried_windows:
            return False
        self.tried_windows.add(wkey)
        ids = cg.order_ids(cur)
        prob = build_order_problem(self.graph, ids, ids[lo:hi],
                                   task_id=f"lns{self.windows + 1}", config=config,
                                   floor_bytes=floor_bytes,
                                   alignment_bytes=self.alignment_bytes)
        res = solve_order_problem(prob, self.cancel)
        self.windows += 1
        new = np.asarray([cg.index[o] for o in merge_orders(ids, prob, res)], dtype=np.int64)
        self.evals += 1
        if not self.sc.valid(new):
            return False
        nl = self.sc.live(new)
        sco = _score(nl)
        if sco >= self.best:
            return False
        self.best = sco
        self.bm.set_order(new)
        self.accepted["window"] += 1
        return True


def _closure_after(v: int, pos: Sequence[int], p: int, x: int,
                   preds: Sequence[Sequence[int]], have: set[int], cap: int,
                   failed: set[int] | None = None) -> set[int] | None:
    """``v`` and its ancestors placed after step ``p`` (minus ``have``); None if ``x`` is one
    or if there are more than ``cap`` (the callers drop such a set: the walk stops there
    instead of collecting, say, the whole backward after the peak).

    ``failed`` (only with an empty ``have``, the same ``p``, order and ``cap``): the ops
    whose closure was None; one reached makes this one None too (it holds that closure),
    and ``v`` is added when its own is."""
    out: set[int] = set()
    stack = [v]
    while stack:
        u = stack.pop()
        if u in out or u in have:
            continue
        if u == x or len(out) >= cap or (failed is not None and u in failed):
            if failed is not None:
                failed.add(v)
            return None
        out.add(u)
        for w in preds[u]:
            if pos[w] >= p and w not in out and w not in have:
                stack.append(w)
    return out


def _hoist_sets(cur: np.ndarray, pos: np.ndarray, at: Sequence[int], p: int, late: list[int],
                preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                limit: int, failed: set[int], extra: int = 3) -> list[list[int]]:
    """Step sets (after ``p``) to move before ``p``: the ``late`` users with their ancestors
    after ``p``, then that set grown by the later ops that wait on it and need at most
    ``extra`` more ops each (e.g. the rest of a parameter's update branch).  ``at`` is
    ``pos`` as a list; ``failed`` the ops whose closure alone was too big or held the op
    at ``p`` (shared by the calls of one round, see :func:`_closure_after`)."""
    x = int(cur[p])
    chosen: set[int] = set()
    for k in late:
        c = _closure_after(int(cur[k]), at, p, x, preds, chosen, limit - len(chosen),
                           None if chosen else failed)
        if c is None:
            return []
        chosen |= c
    out = [sorted(int(pos[v]) for v in chosen)]
    grew = True
    while grew and len(chosen) < limit:
        grew = False
        for v in sorted(chosen, key=at.__getitem__):
            for w in succs[v]:
                if w in chosen or at[w] <= p:
                    continue
                c = _closure_after(w, at, p, x, preds, chosen,
                                   min(extra + 1, limit - len(chosen)))
                if c is None:
                    continue
                chosen |= c
                grew = True
    if len(chosen) > len(out[0]):
        out.append(sorted(int(pos[v]) for v in chosen))
    return out


def _hoist_orders(cur: np.ndarray, pos: np.ndarray, p: int, steps: list[int],
                  preds: Sequence[Sequence[int]]) -> list[_Candidate]:
    n = len(cur)
    moved = cur[steps]
    keep = np.ones(n, dtype=bool)
    keep[steps] = False
    rest = cur[keep]
    mset = {int(v) for v in moved}
    # just before p
    cut = p  # steps before p are untouched; p keeps its index among the rest
    at = np.asarray(steps)
    out: list[_Candidate] = [("hoist", np.concatenate([rest[:cut], moved, rest[cut:]]), at,
                              cut - 1)]
    # as early as possible: right after the last outside predecessor
    earliest = 0
    for v in moved:
        for u in preds[int(v)]:
            if u not in mset:
                earliest = max(earliest, int(pos[u]) + 1)
    if earliest < p:
        out.append(("hoist", np.concatenate([rest[:earliest], moved, rest[earliest:]]), at,
                    earliest - 1))
        mid = (earliest + p) // 2
        if earliest < mid < p:
            out.append(("hoist", np.concatenate([rest[:mid], moved, rest[mid:]]), at,
                        mid - 1))
    return out


def _sink_sets(cur: np.ndarray, pos: np.ndarray, p: int, q: int,
               preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
               limit: int) -> list[list[int]]:
    """Step sets (before ``p``) to move just after ``p``: the op at ``q`` and its
    descendants up to ``p``; then that set grown by its *feeders* (earlier ops whose every
    successor is moved or runs after ``p``: what exists only to feed the moved ops), with
    their descendants up to ``p``."""
    x = int(cur[p])

    def close(chosen: set[int], stack: list[int]) -> bool:
        while stack:
            v = stack.pop()
            for w in succs[v]:
                if pos[w] <= p and w not in chosen:
                    if w == x:
                        return False
                    chosen.add(w)
                    if len(chosen) > limit:
                        return False
                    stack.append(w)
        return True

    chosen = {int(cur[q])}
    if not close(chosen, [int(cur[q])]):
        return []
    out = [sorted(int(pos[v]) for v in chosen)]
    grew = True
    while grew and len(chosen) < limit:
        grew = False
        for v in sorted(chosen, key=lambda u: -pos[u]):
            for w in preds[v]:
                if w in chosen or pos[w] >= p:
                    continue
                if all(y in chosen or pos[y] > p for y in succs[w]):
                    trial = set(chosen)
                    trial.add(w)
                    if close(trial, [w]):
                        chosen = trial
                        grew = True
    if len(chosen) > len(out[0]):
        out.append(sorted(int(pos[v]) for v in chosen))
    return out
