"""Local moves on a finished layout (arena step 5): flip-compaction and the shake.

Mirroring a layout top-to-bottom keeps it valid; dropping every buffer, lowest first, into
the mirrored layout never raises it and often lets buffers stuck under a high neighbour fall
into gaps (an iterated-gravity move from strip packing).  :func:`flip_compact` repeats that
while it helps; :func:`shake` adds seeded random promotions (a local search).
"""

from __future__ import annotations

import random
import time

from roam_core.layout.dsa_heuristics import place_in_order
from roam_core.model.dsa import Problem, Solution

__all__ = ["flip_compact", "shake"]


def flip_compact(problem: Problem, sol: Solution, deadline: float,
                  max_rounds: int = 8) -> Solution:
    """Mirror the layout top-to-bottom and drop every buffer, lowest first, while that helps.

    Mirroring (``offset -> height - offset - size``) keeps a layout valid; compacting the
    mirrored layout first-fit in its offset order never raises it, and buffers that were
    stuck under a high neighbour often fall into gaps (an iterated-gravity move from strip
    packing).  Stops after two rounds without a lower height, at ``max_rounds`` or at the
    deadline; returns the lowest layout seen (``sol`` itself when none is lower).
    """
    bs = problem.buffers
    best = cur = sol
    stale = 0
    for _ in range(max_rounds):
        if stale >= 2 or time.monotonic() > deadline:
            break
        h = cur.height
        mirrored = [h - o - b.size for o, b in zip(cur.offsets, bs)]
        nxt = place_in_order(problem, sorted(range(len(bs)), key=lambda i: (mirrored[i], i)),
                             "first", deadline)
        if nxt is None:  # out of time
            break
        assert nxt.height <= h  # each buffer fits at its mirrored offset or lower
        cur = nxt
        if cur.height < best.height:
            best, stale = cur, 0
        else:
            stale += 1
    return best


def shake(problem: Problem, sol: Solution, deadline: float, seed: int,
           max_rounds: int, promote_fraction: float = 0.02) -> Solution:
    """Iterated flip-compaction with random promotions (a seeded local search).

    Each round mirrors the current layout, drops a random ``promote_fraction`` of the buffers
    first (first fit, in mirrored-offset order), then the rest in mirrored-offset order, and
    flip-compacts the result; a round whose height is not higher than the current one is
    kept.  Returns the lowest layout seen (never higher than ``sol``).  Deterministic for a
    seed as long as the deadline does not cut the ``max_rounds`` rounds short.
    """
    rng = random.Random(seed)
    bs = problem.buffers
    lb = problem.lower_bound()
    best = cur = sol
    for _ in range(max_rounds):
        if best.height <= lb or time.monotonic() > deadline:
            break
        h = cur.height
        keys = [(rng.random() >= promote_fraction, h - o - b.size)
                for o, b in zip(cur.offsets, bs)]
        nxt = place_in_order(problem, sorted(range(len(bs)), key=lambda i: (keys[i], i)),
                             "first", deadline)
        if nxt is None:  # out of time
            break
        nxt = flip_compact(problem, nxt, deadline)
        if nxt.height <= cur.height:
            cur = nxt
        if nxt.height < best.height:
            best = nxt
    return best
