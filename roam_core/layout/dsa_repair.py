"""Peak repair of a DSA layout: the buffers live where the load is near the bound are
searched again, everything else fixed.

A layout above the live-set bound is usually wrong only where the load is close to it: at a
step whose live buffers add up to the bound they must pack without a gap, while away from
the peak there is slack.  :func:`repair_peak` frees the buffers of such a *window*
(:class:`_RepairWindow`) and runs the exact search (:func:`~roam_core.layout.dsa_search.
search_capacity`) on them around the fixed ones; :func:`repair_from_starts` does the same
for several layouts at once, their searches run round-robin.  Both are cut by search nodes
(deterministic), the clock only a safety limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.cpu_clock import cpu_now
from roam_core.layout.dsa_heuristics import buffer_arrays
from roam_core.layout.dsa_search import (
    MAX_SEARCH_BUFFERS,
    MAX_SEARCH_CELLS,
    SearchCache,
    SearchOptions,
    search_capacity,
    search_cells,
)
from roam_core.model.dsa import Problem, Solution

__all__ = ["REPAIR_FRACTIONS", "REPAIR_PREORDERS", "narrowing_fractions", "repair_from_starts",
           "repair_peak"]

#: Peak windows of :func:`repair_peak`: the steps whose live load is at least this fraction
#: of the target (tried in turn; 0.97 places mobilenet_v2 b1 at its bound in 432 nodes).
REPAIR_FRACTIONS = (0.97, 0.9)
#: Preorders of the repair's search (one run each per window).
REPAIR_PREORDERS = ("TLA", "TAL")


def _live_load(lower: np.ndarray, upper: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Total size live at each step ``0 .. max(upper) - 1``."""
    steps = int(upper.max()) if len(upper) else 0
    diff = np.zeros(steps + 1, np.int64)
    np.add.at(diff, lower, size)
    np.add.at(diff, upper, -size)
    return np.cumsum(diff)[:steps]


def repair_peak(problem: Problem, solution: Solution, target: int | None = None, *,
                node_budget: int, deadline: float, cancel: CancelToken = None,
                fractions: tuple[float, ...] = REPAIR_FRACTIONS,
                options: SearchOptions = SearchOptions(),  # noqa: B008 - frozen
                preorders: tuple[str, ...] = REPAIR_PREORDERS,
                ) -> tuple[Solution | None, int, str]:
    """Re-place the buffers around the load peak with the exact search, the rest fixed.

    A layout above the live-set bound is usually wrong only where the load is close to it:
    at a step whose live buffers add up to the bound they must pack without a gap, while
    away from the peak there is slack.  For each fraction ``x`` of ``fractions``, the
    buffers live at a step whose load is at least ``x * target`` (the *window*), and those
    reaching above ``target``, are freed; every other buffer keeps its offset in
    ``solution``, and :func:`search_capacity` looks for a layout of the freed ones within
    ``target`` around the fixed ones (the fixed buffers live nowhere in the window, so the
    search meets them only at the window's edges).  Each window gets half of the nodes left,
    the last all of them (a deterministic work limit; ``deadline`` is the CPU-time safety
    limit).

    Parameters
    ----------
    problem : Problem
        The buffers (fixed offsets stay fixed).
    solution : Solution
        A valid layout of ``problem`` to repair.
    target : int, optional
        Height to reach (default the live-set lower bound).
    node_budget : int
        Search nodes of all windows together.
    deadline : float
        ``cpu_now()`` safety limit.
    cancel : threading.Event or callable, optional
        Checked during the search.
    fractions : tuple of float
        Window thresholds, tried in this order (a window equal to one tried is skipped).
    options : SearchOptions
        Exact-search switches.
    preorders : tuple of str
        Static preorders of the search (see
        :data:`~roam_core.layout.dsa_search.PREORDERS`), in the order tried.

    Returns
    -------
    (solution, nodes, method)
        A layout of height at most ``target`` (``None`` when none was found), the nodes
        spent and ``"repair@<x>:<preorder>"`` for the window that succeeded (``"repair"``
        otherwise).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem, Solution
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> bad = Solution.from_offsets(p, (0, 2, 3))
    >>> sol, nodes, how = repair_peak(p, bad, node_budget=100, deadline=1e18)
    >>> sol.height, p.lower_bound()
    (3, 3)
    """
    target = problem.lower_bound() if target is None else target
    nodes = 0
    seen: set[bytes] = set()
    for k, frac in enumerate(fractions):
        if nodes >= node_budget or cpu_now() >= deadline or is_cancelled(cancel):
            break
        win = _RepairWindow.build(problem, solution, target, frac)
        if win is None or win.key in seen:
            continue
        seen.add(win.key)
        left = node_budget - nodes
        share = left if k == len(fractions) - 1 else left // 2
        # one long run per preorder: a window's search succeeds deep or not at all
        # (mobilenet_v2 b1: found at node 432 of one TLA run, not in 1,000 nodes of runs of
        # 78-156; efficientnet_b0 b1: at node 913 of TAL, not in 2,000 of TLA)
        share = max(64, share)
        sol, _, meth, used = search_capacity(win.sub, target, deadline=deadline, cancel=cancel,
                                             options=options, node_budget=share,
                                             preorders=preorders,
                                             first_limit=share // len(preorders))
        nodes += used
        if sol is not None:
            return (win.merge(problem, sol), nodes,
                    f"repair@{frac:g}:{meth.partition(':')[2]}")
    return None, nodes, "repair"


@dataclass(frozen=True)
class _RepairWindow:
    """The sub-problem of a peak repair: the freed buffers of ``solution`` (live where the
    load is at least ``frac * target``, or reaching above ``target``), and the fixed ones
    that overlap them in time at their offsets (``keep``: their indices in the problem)."""

    sub: Problem
    keep: np.ndarray
    off: np.ndarray
    key: bytes

    @staticmethod
    def build(problem: Problem, solution: Solution, target: int, frac: float,
              max_buffers: int = MAX_SEARCH_BUFFERS,
              max_cells: int = MAX_SEARCH_CELLS) -> _RepairWindow | None:
        """The window, or ``None`` when it frees nothing, more than ``max_buffers`` (free
        and fixed neighbours together; at most what the search takes) or more than
        ``max_cells`` cells (:func:`~roam_core.layout.dsa_search.search_cells`)."""
        lower, upper, size, _ = buffer_arrays(problem)
        off = np.fromiter(solution.offsets, np.int64, len(problem))
        top = off + size
        pinned = np.fromiter((b.offset is not None for b in problem.buffers), bool,
                             len(problem))
        live = size > 0
        load = _live_load(lower, upper, np.where(live, size, 0))
        hot = np.concatenate([[0], np.cumsum(load >= frac * target)])
        free = live & ~pinned & (((hot[upper] - hot[lower]) > 0) | (top > target))
        limit = min(max_buffers, MAX_SEARCH_BUFFERS)
        if not free.any() or int(free.sum()) > limit:
            return None
        # the fixed buffers that matter: those overlapping a freed one in time
        f_idx = np.nonzero(free)[0]
        span = np.zeros(len(load) + 1, np.int64)
        np.add.at(span, lower[f_idx], 1)
        np.add.at(span, upper[f_idx], -1)
        cover = np.concatenate([[0], np.cumsum(np.cumsum(span)[:len(load)] > 0)])
        near = live & ~free & ((cover[upper] - cover[lower]) > 0)
        keep = np.nonzero(free | near)[0]
        if len(keep) > 2 * limit:  # every node steps over the fixed neighbours: too slow
            return None
        bufs = tuple(problem.buffers[i] if free[i] else
                     replace(problem.buffers[i], offset=int(off[i])) for i in keep.tolist())
        sub = Problem(bufs)
        if search_cells(sub) > max_cells:  # every node scans the window's sections
            return None
        return _RepairWindow(sub, keep, off, np.packbits(free).tobytes())

    def merge(self, problem: Problem, sol: Solution) -> Solution:
        """The whole layout with the window's buffers at their offsets in ``sol``."""
        offs = self.off.copy()
        offs[self.keep] = sol.offsets
        return Solution.from_offsets(problem, offs.tolist())


def narrowing_fractions(fraction: float) -> tuple[float, ...]:
    """``fraction``, then windows halving the distance to 1 each time, down to 0.995: the
    thresholds tried in turn until a window is small enough.

    >>> narrowing_fractions(0.6)
    (0.6, 0.8, 0.9, 0.95, 0.975, 0.9875, 0.99375)
    """
    out = [fraction]
    while out[-1] < 0.99:
        out.append(1 - (1 - out[-1]) / 2)
    return tuple(out)


def _window_within(problem: Problem, start: Solution, target: int, fraction: float,
                   max_buffers: int, max_cells: int) -> tuple[_RepairWindow | None, float]:
    """The widest window of :func:`narrowing_fractions` that holds at most ``max_buffers``
    buffers (``None`` when even the narrowest is larger, or nothing is free)."""
    for frac in narrowing_fractions(fraction):
        win = _RepairWindow.build(problem, start, target, frac, max_buffers, max_cells)
        if win is not None:
            return win, frac
    return None, fraction


def repair_from_starts(problem: Problem, starts: Sequence[Solution], target: int, *,
                       node_budget: int, deadline: float, cancel: CancelToken = None,
                       fraction: float = 0.6,
                       options: SearchOptions = SearchOptions(),  # noqa: B008 - frozen
                       preorders: tuple[str, ...] = REPAIR_PREORDERS,
                       max_buffers: int = MAX_SEARCH_BUFFERS,
                       max_cells: int = MAX_SEARCH_CELLS,
                       ) -> tuple[Solution | None, int, str, int]:
    """:func:`repair_peak` of several layouts in one window, their searches run round-robin.

    Which start repairs, and with which preorder, is not known in advance (efficientnet_b0
    b1: the lowest layout does not repair in 10,000 nodes, the next one does at node 913 of
    its second preorder).  Every ``(start, preorder)`` pair gets a run of ``L`` nodes in
    turn (the first preorder on every start, then the next), ``L = node_budget / (2 x
    pairs)`` at first and doubled each round (a run repeats
    its last one and goes on, with the failed states it memoised), until one finds a layout
    within ``target`` or ``node_budget`` is spent: no single search can use up the budget
    while another would succeed cheaply, and a search that succeeds at node ``k`` costs at
    most ``2k`` plus the other pairs' runs.  Deterministic: node counts, not the clock,
    decide (``deadline`` is the CPU-time safety limit).

    A window is the buffers live where the load is at least ``fraction`` of ``target``, and
    those reaching above ``target``.  On a training step the load is a mountain: at 0.6 it
    covers most of the step and frees nearly every buffer, which turns the repair into a
    whole-problem search whose every node scans thousands of sections (and whose section
    tables grow with buffers x sections).  So the window narrows
    (:func:`narrowing_fractions`) until it holds at most ``max_buffers`` buffers, free and
    fixed neighbours together counted against ``2 x max_buffers``, and at most
    ``max_cells`` cells (free buffers x sections: a node's cost).

    Returns
    -------
    (solution, nodes, method, start)
        The first layout found (``None`` when none), the nodes spent,
        ``"repair@<fraction>:<preorder>"`` (``"repair"`` when none) and the index in
        ``starts`` of the start that was repaired (-1 when none).  Starts already within
        ``target`` are not searched (they need no repair).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem, Solution
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> bad = Solution.from_offsets(p, (0, 2, 3))
    >>> sol, nodes, how, k = repair_from_starts(p, [bad], 3, node_budget=100, deadline=1e18,
    ...                                         fraction=0.5)
    >>> sol.height, how, k
    (3, 'repair@0.5:TLA', 0)
    """
    wins: list[tuple[int, _RepairWindow, float]] = []
    seen: set[bytes] = set()
    for k, start in enumerate(starts):
        if start.height <= target:  # nothing to repair: the caller has its layout already
            continue
        win, frac = _window_within(problem, start, target, fraction, max_buffers,
                                   max_cells)
        if win is None:
            continue
        key = win.key + np.asarray(start.offsets, np.int64).tobytes()
        if key in seen:
            continue
        seen.add(key)
        wins.append((k, win, frac))
    # preorder-major: the first preorder on every start, then the next
    pairs = [(k, win, frac, pre, SearchCache()) for pre in preorders for k, win, frac in wins]
    nodes = 0
    if not pairs:
        return None, nodes, "repair", -1
    limit = max(64, node_budget // (2 * len(pairs)))
    while pairs and nodes < node_budget:
        for pair in list(pairs):
            k, win, frac, pre, cache = pair
            run = min(limit, node_budget - nodes)
            if run <= 0 or cpu_now() >= deadline or is_cancelled(cancel):
                return None, nodes, "repair", -1
            sol, _, meth, used = search_capacity(
                win.sub, target, deadline=deadline, cancel=cancel, options=options,
                node_budget=run, preorders=(pre,), cache=cache, first_limit=run)
            nodes += used
            if sol is not None:
                return win.merge(problem, sol), nodes, f"repair@{frac:g}:{pre}", k
            if not meth.endswith((":work", ":time")):  # searched to the end: no layout here
                pairs.remove(pair)
        limit *= 2
    return None, nodes, "repair", -1
