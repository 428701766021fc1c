"""Local moves on a finished layout (arena step 5): flip-compaction and the shake.

Mirroring a layout top-to-bottom keeps it valid; dropping every buffer, lowest first, into
the mirrored layout never raises it and often lets buffers stuck under a high neighbour fall
into gaps (an iterated-gravity move from strip packing).  :func:`flip_compact` repeats that
while it helps; :func:`shake` adds seeded random promotions (a local search).  Both are cut by
a count of greedy passes (the work) and stop at a ``target`` height (the value contract),
the clock only a safety limit.
"""

from __future__ import annotations

import random

from roam_core.base.cpu_clock import cpu_now
from roam_core.layout.dsa_heuristics import place_in_order
from roam_core.model.dsa import Problem, Solution

__all__ = ["flip_compact", "flip_passes", "shake", "shake_passes"]


def flip_compact(problem: Problem, sol: Solution, deadline: float,
                 max_rounds: int = 8, target: int | None = None) -> Solution:
    """Mirror the layout top-to-bottom and drop every buffer, lowest first, while that helps.

    Mirroring (``offset -> height - offset - size``) keeps a layout valid; compacting the
    mirrored layout first-fit in its offset order never raises it, and buffers that were
    stuck under a high neighbour often fall into gaps (an iterated-gravity move from strip
    packing).  Stops after two rounds without a lower height, at ``max_rounds`` (each round
    one greedy pass), at or below ``target`` (default the live-set bound) or at the deadline;
    returns the lowest layout seen (``sol`` itself when none is lower).
    """
    return flip_passes(problem, sol, deadline, max_rounds, target)[0]


def flip_passes(problem: Problem, sol: Solution, deadline: float, max_rounds: int,
                 target: int | None) -> tuple[Solution, int]:
    """:func:`flip_compact` and the passes it ran."""
    bs = problem.buffers
    goal = problem.lower_bound() if target is None else target
    best = cur = sol
    stale = passes = 0
    while passes < max_rounds and stale < 2 and best.height > goal:
        if cpu_now() > deadline:
            break
        h = cur.height
        mirrored = [h - o - b.size for o, b in zip(cur.offsets, bs)]
        nxt = place_in_order(problem, sorted(range(len(bs)), key=lambda i: (mirrored[i], i)),
                             "first", deadline)
        if nxt is None:  # out of time
            break
        passes += 1
        assert nxt.height <= h  # each buffer fits at its mirrored offset or lower
        cur = nxt
        if cur.height < best.height:
            best, stale = cur, 0
        else:
            stale += 1
    return best, passes


def shake(problem: Problem, sol: Solution, deadline: float, seed: int, max_rounds: int,
          promote_fraction: float = 0.02, target: int | None = None) -> Solution:
    """Iterated flip-compaction with random promotions (a seeded local search).

    Each round mirrors the current layout, drops a random ``promote_fraction`` of the buffers
    first (first fit, in mirrored-offset order), then the rest in mirrored-offset order, and
    flip-compacts the result; a round whose height is not higher than the current one is
    kept.  ``max_rounds`` counts greedy passes, the promotions and the flip-compactions
    together (the work; deterministic for a seed unless the deadline cuts it short).  Stops
    at or below ``target`` (default the live-set bound).  Returns the lowest layout seen
    (never higher than ``sol``).
    """
    return shake_passes(problem, sol, deadline, seed, max_rounds, promote_fraction, target)[0]


def shake_passes(problem: Problem, sol: Solution, deadline: float, seed: int,
                 max_passes: int, promote_fraction: float = 0.02,
                 target: int | None = None) -> tuple[Solution, int]:
    """:func:`shake` and the greedy passes it ran (at most ``max_passes``)."""
    rng = random.Random(seed)
    bs = problem.buffers
    goal = problem.lower_bound() if target is None else target
    best = cur = sol
    passes = 0
    while passes < max_passes and best.height > goal and cpu_now() <= deadline:
        h = cur.height
        keys = [(rng.random() >= promote_fraction, h - o - b.size)
                for o, b in zip(cur.offsets, bs)]
        nxt = place_in_order(problem, sorted(range(len(bs)), key=lambda i: (keys[i], i)),
                             "first", deadline)
        if nxt is None:  # out of time
            break
        passes += 1
        nxt, more = flip_passes(problem, nxt, deadline, min(8, max_passes - passes), goal)
        passes += more
        if nxt.height <= cur.height:
            cur = nxt
        if nxt.height < best.height:
            best = nxt
    return best, passes
