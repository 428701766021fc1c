"""Proven lower bounds on DSA heights above the live-set bound.

:func:`height_grain`: every canonical height is a multiple of the gcd of the sizes,
alignments and fixed offsets, so a bound rounds up to it.  :func:`window_lower_bound`: the
buffers live in a time window, lifetimes cut to it, are a relaxation; when the complete
search proves a window does not fit a height, neither does the problem.  On MiniMalloc C, D
and J no window of up to 64 sections proves anything above the live-set bound
(``benchmarks/results/dsa.md``), so :func:`~roam_core.layout.dsa_solver.solve_dsa` does not
run it; it rounds the bounds its bisection proves to the grain.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.cpu_clock import cpu_now
from roam_core.layout.dsa_heuristics import buffer_arrays
from roam_core.layout.dsa_search import SearchCache, search_capacity
from roam_core.model.dsa import Problem

__all__ = ["BOUND_WIDTHS", "height_grain", "round_up", "window_lower_bound"]

#: Widths (in sections) of the time windows of :func:`window_lower_bound`, around the
#: peak section first, then sliding over the whole horizon.
BOUND_WIDTHS = (8, 16, 32, 64)


def height_grain(problem: Problem) -> int:
    """The largest ``g`` such that some lowest layout has every height a multiple of ``g``.

    A canonical layout (every free buffer pushed down to the lowest offset its neighbours
    and its alignment allow) has offsets that are sums of sizes rounded up to alignments,
    plus fixed offsets: all multiples of the gcd of the sizes, alignments and fixed offsets.
    Every layout can be pushed down into a canonical one, so the minimum height is a
    multiple of ``g`` and a lower bound ``b`` can be rounded up to one.

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> height_grain(Problem((Buffer("a", 0, 2, 2048), Buffer("b", 1, 3, 1024))))
    1024
    """
    g = 0
    for b in problem.buffers:
        if b.size:
            g = np.gcd(g, b.size)
            g = np.gcd(g, b.alignment) if b.alignment > 1 else g
            g = np.gcd(g, b.offset) if b.offset else g
    return int(g) or 1


def round_up(x: int, g: int) -> int:
    """``x`` rounded up to a multiple of ``g``.

    >>> round_up(7, 4), round_up(8, 4)
    (8, 8)
    """
    return -(-x // g) * g


def _window(problem: Problem, t0: int, t1: int) -> Problem:
    """The buffers live in ``[t0, t1)`` with their lifetimes cut to it (a relaxation: any
    layout of ``problem`` is one of the window's, so the window's minimum height is a lower
    bound on the problem's)."""
    bufs = tuple(replace(b, lower=max(b.lower, t0), upper=min(b.upper, t1))
                 for b in problem.buffers if b.size and b.lower < t1 and b.upper > t0)
    return Problem(bufs)


def window_lower_bound(problem: Problem, *, node_budget: int, deadline: float,
                       cancel: CancelToken = None, start: int | None = None,
                       widths: tuple[int, ...] = BOUND_WIDTHS) -> tuple[int, int]:
    """A proven lower bound on the height of every layout of ``problem``, and the nodes spent.

    Time is cut into sections (between consecutive lifetime ends).  For a window of
    sections, the buffers live in it with their lifetimes cut to it form a relaxation
    (:func:`_window`): when the exact search (complete without fixed offsets) proves that
    no layout of the window fits height ``c``, none of the whole problem does, and the
    bound rises to ``c + 1`` rounded up to :func:`height_grain`.  Windows of each width in
    ``widths`` are tried around the most loaded section first, then sliding by half a width
    over the horizon, each search with at most an eighth of the nodes left; the bound is
    raised one step at a time while a window keeps proving.  Deterministic (node counts).
    Without free buffers, or with fixed offsets (the search is then not complete), it is
    the live-set bound rounded up to the grain.

    Parameters
    ----------
    problem : Problem
        The buffers (its capacity is ignored).
    node_budget : int
        Search nodes for all windows together.
    deadline : float
        ``cpu_now()`` safety limit.
    cancel : threading.Event or callable, optional
        Stops the windows early (the bound so far is still valid).
    start : int, optional
        A bound already proven (default: the live-set bound).
    widths : tuple of int
        Window widths in sections.

    Returns
    -------
    (bound, nodes)

    Examples
    --------
    Small random problems almost never have a gap above the live-set bound (none in
    thousands of random ones of up to 12 buffers), so the example shows the rounding of a
    bound already proven (say, by a bisection step of :func:`solve_dsa`) to the grain:

    >>> from roam_core.model.dsa import Buffer, Problem
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 4)))
    >>> p.lower_bound(), window_lower_bound(p, node_budget=1000, deadline=1e18, start=7)
    (6, (8, 3))
    """
    g = height_grain(problem)
    bound = round_up(max(start or 0, problem.lower_bound()), g)
    live = [b for b in problem.buffers if b.size]
    if not live or any(b.offset is not None for b in live):
        return bound, 0
    lower, upper, size, _ = buffer_arrays(Problem(tuple(live)))
    pts = np.unique(np.concatenate([lower, upper]))
    nsec = len(pts) - 1
    diff = np.zeros(nsec + 1, np.int64)
    np.add.at(diff, np.searchsorted(pts, lower), size)
    np.add.at(diff, np.searchsorted(pts, upper), -size)
    peak = int(np.argmax(np.cumsum(diff)[:nsec]))
    windows: list[tuple[int, int]] = []
    for w in widths:
        if w >= nsec:
            windows.append((0, nsec))
            break
        a = min(max(0, peak - w // 2), nsec - w)
        windows.append((a, a + w))
        windows += [(a, min(a + w, nsec)) for a in range(0, nsec - w // 2, max(1, w // 2))]
    nodes = 0
    seen: set[tuple[int, int]] = set()
    for a, b in windows:
        if (a, b) in seen:
            continue
        seen.add((a, b))
        sub = _window(problem, int(pts[a]), int(pts[b]))
        cache = SearchCache()
        while True:
            left = node_budget - nodes
            if left < 64 or cpu_now() >= deadline or is_cancelled(cancel):
                return bound, nodes
            sol, proven, _, k = search_capacity(sub, bound, deadline=deadline, cancel=cancel,
                                                cache=cache, node_budget=max(64, left // 8))
            nodes += k
            if sol is not None or not proven:
                break
            bound = round_up(bound + 1, g)
    return bound, nodes
