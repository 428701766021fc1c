"""ROAM's long-lived-first baseline layout (LLFB): a skyline over time.

At the lowest free level, place the longest-lived tensor whose lifetime fits inside the gap's
time range; when none fits, raise the gap to its lower neighbour.  Registered as ``"llfb"`` in
:data:`roam_core.layout.baseline_layouts.LAYOUT_METHODS`.

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> llfb(Problem((Buffer("a", 0, 4, 2), Buffer("b", 0, 2, 1), Buffer("c", 2, 4, 1)))).offsets
(0, 2, 2)
"""

from __future__ import annotations

from roam_core.model.dsa import Problem, Solution

__all__ = ["llfb"]


def llfb(problem: Problem) -> Solution:
    """Long-lived-first skyline placement (ROAM's heuristic layout baseline).

    Fixed offsets are not supported (they are ignored).
    """
    bs = problem.buffers
    live = [i for i, b in enumerate(bs) if b.size > 0]
    offsets = [0] * len(bs)
    if not live:
        return Solution.from_offsets(problem, offsets)
    pts = sorted({bs[i].lower for i in live} | {bs[i].upper for i in live})
    sec = {t: k for k, t in enumerate(pts)}
    nsec = len(pts) - 1
    floor = [0] * nsec
    span = {i: (sec[bs[i].lower], sec[bs[i].upper]) for i in live}
    # unplaced buffers, longest-lived first (then larger)
    pending = sorted(live, key=lambda i: (-(bs[i].upper - bs[i].lower), -bs[i].size, i))
    cover = [0] * (nsec + 1)  # unplaced buffers per section (difference array)
    for i in live:
        lo, hi = span[i]
        cover[lo] += 1
        cover[hi] -= 1
    count = [0] * nsec
    run = 0
    for k in range(nsec):
        run += cover[k]
        count[k] = run
    while pending:
        # lowest section that still has unplaced buffers, and its equal-floor gap
        k = min((s for s in range(nsec) if count[s]), key=lambda s: floor[s])
        level = floor[k]
        a = k
        while a > 0 and floor[a - 1] == level:
            a -= 1
        b = k + 1
        while b < nsec and floor[b] == level:
            b += 1
        pick = next((i for i in pending if a <= span[i][0] and span[i][1] <= b
                     and max(floor[span[i][0]:span[i][1]]) == level), None)
        if pick is None:
            neigh = [floor[a - 1]] if a > 0 else []
            neigh += [floor[b]] if b < nsec else []
            raise_to = min(x for x in neigh if x > level) if neigh else level + 1
            for s in range(a, b):
                floor[s] = raise_to
            continue
        pending.remove(pick)
        lo, hi = span[pick]
        a_i = bs[pick].alignment
        off = -(-level // a_i) * a_i
        offsets[pick] = off
        for s in range(lo, hi):
            floor[s] = off + bs[pick].size
            count[s] -= 1
    return Solution.from_offsets(problem, offsets)
