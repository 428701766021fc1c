"""Test plans for the executor and snapshot tests: a random valid order plus a first-fit
layout, built independently of the planner (so executor tests do not depend on it)."""

from __future__ import annotations

import random

from roam_core.model.graph import Graph, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.simulate import lifetimes, simulate
from roam_core.oracle.validate import check_order


def random_order(graph: Graph, seed: int = 0) -> tuple[str, ...]:
    """A uniformly drawn ready op at every step: a valid order, usually far from program order."""
    rng = random.Random(seed)
    succ: dict[str, set[str]] = {op: set() for op in graph.op_ids}
    for s, d, _ in graph.edges():
        succ[s].add(d)
    indeg = dict.fromkeys(graph.op_ids, 0)
    for s in succ:
        for d in succ[s]:
            indeg[d] += 1
    ready = [op for op in graph.op_ids if indeg[op] == 0]
    order: list[str] = []
    while ready:
        op = ready.pop(rng.randrange(len(ready)))
        order.append(op)
        for d in sorted(succ[op]):
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    assert check_order(graph, order) == []
    return tuple(order)


def first_fit_plan(graph: Graph, order: tuple[str, ...], align: int = 512) -> Plan:
    """Residents at the bottom, then planned storages largest first at the lowest offset that
    does not overlap a co-live storage."""
    lts = lifetimes(graph, order)
    offsets: dict[str, int] = {}
    top = 0
    for t in graph.tensors.values():
        if t.producer is None:
            offsets[t.id] = top
            top += round_size(t.size_bytes, align)
    base = top
    placed: list[tuple[int, int, int, int]] = []
    for tid, lt in sorted(lts.items(), key=lambda kv: (-graph.tensors[kv[0]].size_bytes, kv[0])):
        size = round_size(graph.tensors[tid].size_bytes, align)
        cand, moved = base, True
        while moved:
            moved = False
            for lo, hi, s, e in placed:
                if s < lt.end and lt.start < e and lo < cand + size and cand < hi:
                    cand, moved = hi, True
        offsets[tid] = cand
        placed.append((cand, cand + size, lt.start, lt.end))
        top = max(top, cand + size)
    prof = simulate(graph, order, alignment_bytes=align)
    eager = simulate(graph, alignment_bytes=align)
    return Plan(graph.fingerprint(), graph.name, "test-first-fit", tuple(order), offsets, align,
                max(top, align), prof.peak_bytes, prof.resident_bytes, eager.peak_bytes, 0,
                prof.live_bytes)
