"""The app's one door to the planner: real modules when present, small stand-ins otherwise.

``roam_core.planner``, ``heuristics``, ``allocator_sim`` and ``bounds`` are imported lazily, so
the app works (with an eager order and a first-fit layout) before they exist and switches to
them as soon as they do.  Everything here is pure Python over roam_core objects.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roam_core.graph import Graph, OpId, TensorId, round_size
from roam_core.plan import Plan, SolveRecord
from roam_core.simulate import Lifetime, lifetimes, simulate

__all__ = [
    "BASELINE_METHODS",
    "PLAN_METHODS",
    "Block",
    "PlanSettings",
    "baseline_layout",
    "first_fit_offsets",
    "live_set_lower_bound",
    "run_planner",
]

_logger = logging.getLogger(__name__)

#: "before" choices (value, label) offered by the app.
BASELINE_METHODS: tuple[tuple[str, str], ...] = (
    ("eager", "eager (program order)"),
    ("inductor", "Inductor-style"),
    ("lescea", "LESCEA"),
    ("xla", "XLA-style"),
    ("eager_moved_state", "eager, optimizer state moved (paper's PyTorch)"),
)
#: methods the "Plan" button can run.
PLAN_METHODS: tuple[tuple[str, str], ...] = (("roam", "ROAM (full planner)"), *BASELINE_METHODS)


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """Planner settings chosen in the app (part of the plan cache key)."""

    method: str = "roam"
    time_limit_s: float = 10.0
    node_limit: int = 60
    workers: int = 1
    alignment_bytes: int = 512

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Block:
    """One storage placed by the (simulated) caching allocator of a baseline order."""

    tensor_id: str
    address: int
    size_bytes: int
    start_step: int
    end_step: int


@dataclass(frozen=True, slots=True)
class _Progress:
    stage: str
    done: int
    total: int
    best_peak_bytes: int | None
    message: str = ""


ProgressFn = Callable[[Any], None]


def run_planner(graph: Graph, settings: PlanSettings, progress: ProgressFn | None = None) -> Plan:
    """Plan ``graph`` with the real planner, or with the stand-in while it does not exist.

    Parameters
    ----------
    graph : Graph
        The graph.
    settings : PlanSettings
        Method and limits.
    progress : callable, optional
        Receives objects with ``stage, done, total, best_peak_bytes, message``.

    Returns
    -------
    Plan
    """
    try:
        from roam_core import config as config_mod
        from roam_core import planner
    except ImportError:
        return _stand_in_plan(graph, settings, progress)
    fields = {f.name for f in dataclasses.fields(config_mod.PlannerConfig)}
    wanted = {"time_limit_s": settings.time_limit_s, "node_limit": settings.node_limit,
              "workers": settings.workers, "alignment_bytes": settings.alignment_bytes}
    cfg = config_mod.PlannerConfig(**{k: v for k, v in wanted.items() if k in fields})
    return planner.make_plan(graph, config=cfg, method=settings.method, progress=progress)


def live_set_lower_bound(graph: Graph, alignment_bytes: int = 512) -> int:
    """``roam_core.bounds.live_set_lower_bound`` or, until it exists, the per-op bound."""
    try:
        from roam_core.bounds import live_set_lower_bound as real
    except ImportError:
        best = 0
        for op in graph.ops:
            touched = set(graph.storages_read(op.id)) | set(graph.storages_created(op.id))
            best = max(best, sum(round_size(graph.tensors[t].size_bytes, alignment_bytes)
                                 for t in touched if graph.tensors[t].producer is not None))
        return best + graph.resident_bytes(alignment_bytes)
    return int(real(graph, alignment_bytes).bound_bytes)


def baseline_layout(
    graph: Graph, order: Sequence[OpId], alignment_bytes: int = 512
) -> tuple[list[Block], int | None, str]:
    """Addresses of the planned storages under a baseline allocator for ``order``.

    Returns
    -------
    blocks, reserved_peak_bytes, label
        ``roam_core.allocator_sim`` (PyTorch caching allocator) when present, else a
        first-fit free list (``reserved_peak_bytes`` is then ``None``).
    """
    sim = _allocator_sim()
    if sim is None:
        lts = lifetimes(graph, order)
        offs = first_fit_offsets(graph, lts, alignment_bytes)
        blocks = [Block(t, offs[t], round_size(graph.tensors[t].size_bytes, alignment_bytes),
                        lt.start, lt.end) for t, lt in lts.items()]
        return blocks, None, "first-fit free list (allocator_sim not available yet)"
    res = sim(graph, order)
    blocks = [Block(b.tensor_id, int(b.address), int(b.size_bytes), int(b.start_step),
                    int(b.end_step)) for b in res.blocks]
    return blocks, int(res.peak_reserved_bytes), "simulated PyTorch caching allocator"


def _allocator_sim() -> Callable[..., Any] | None:
    try:
        from roam_core import allocator_sim
    except ImportError:
        return None
    for name in ("simulate_caching_allocator", "simulate_allocator"):
        if hasattr(allocator_sim, name):
            return getattr(allocator_sim, name)  # type: ignore[no-any-return]
    return None


def first_fit_offsets(
    graph: Graph, lts: Mapping[TensorId, Lifetime], alignment_bytes: int = 512, base: int = 0
) -> dict[TensorId, int]:
    """Offsets from a first-fit free list replayed in step order (fast, not optimal).

    Examples
    --------
    >>> from roam_core.samples import chain3
    >>> g = chain3()
    >>> first_fit_offsets(g, lifetimes(g, g.op_ids), 1)
    {'a': 0, 'b': 100, 'c': 0}
    """
    items = sorted(lts.items(), key=lambda kv: (kv[1].start, -graph.tensors[kv[0]].size_bytes))
    free: list[list[int]] = []  # sorted [offset, size] holes below `top`
    top = base
    expiring: list[tuple[int, int, int]] = []  # (end, offset, size)
    out: dict[TensorId, int] = {}
    for tid, lt in items:
        while expiring and expiring[0][0] <= lt.start:
            _, off, size = heapq.heappop(expiring)
            top = _release(free, off, size, top)
        size = round_size(graph.tensors[tid].size_bytes, alignment_bytes)
        off = _take(free, size)
        if off is None:
            off, top = top, top + size
        out[tid] = off
        if size:
            heapq.heappush(expiring, (lt.end, off, size))
    return out


def _take(free: list[list[int]], size: int) -> int | None:
    for i, (off, hole) in enumerate(free):
        if hole >= size:
            if hole == size:
                free.pop(i)
            else:
                free[i] = [off + size, hole - size]
            return off
    return None


def _release(free: list[list[int]], off: int, size: int, top: int) -> int:
    free.append([off, size])
    free.sort()
    merged: list[list[int]] = []
    for o, s in free:
        if merged and merged[-1][0] + merged[-1][1] == o:
            merged[-1][1] += s
        else:
            merged.append([o, s])
    if merged and merged[-1][0] + merged[-1][1] == top:
        top = merged.pop()[0]
    free[:] = merged
    return top


def _greedy_order(graph: Graph, alignment_bytes: int) -> tuple[OpId, ...]:
    """A memory-greedy topological order (stand-in; eager order beyond 3000 ops)."""
    if len(graph.ops) > 3000:
        return graph.op_ids
    size = {t: round_size(x.size_bytes, alignment_bytes) for t, x in graph.tensors.items()}
    remaining_uses = {t: len(x.consumers) for t, x in graph.tensors.items()}
    indeg = {o: len(graph.predecessors(o)) for o in graph.op_ids}
    prog = {o: i for i, o in enumerate(graph.op_ids)}
    ready = [o for o in graph.op_ids if indeg[o] == 0]
    order: list[OpId] = []

    def delta(o: OpId) -> int:
        freed = sum(size[t] for t in graph.storages_read(o)
                    if remaining_uses[t] == 1 and graph.tensors[t].producer is not None
                    and t not in graph.outputs and graph.tensors[t].producer != o)
        return sum(size[t] for t in graph.storages_created(o)) - freed

    while ready:
        o = min(ready, key=lambda x: (delta(x), prog[x]))
        ready.remove(o)
        order.append(o)
        for t in graph.storages_read(o):
            if graph.tensors[t].producer != o:
                remaining_uses[t] -= 1
        for s in graph.successors(o):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return tuple(order)


def _stand_in_plan(graph: Graph, settings: PlanSettings, progress: ProgressFn | None) -> Plan:
    t0 = time.perf_counter()
    a = settings.alignment_bytes
    if progress:
        progress(_Progress("order", 0, 2, None, "stand-in planner (roam_core.planner missing)"))
    order = _greedy_order(graph, a) if settings.method == "roam" else graph.op_ids
    prof = simulate(graph, order, alignment_bytes=a)
    base = simulate(graph, graph.op_ids, alignment_bytes=a)
    if progress:
        progress(_Progress("layout", 1, 2, prof.peak_bytes, "first-fit layout"))
    offsets: dict[TensorId, int] = {}
    top = 0
    for t in graph.resident_ids:
        offsets[t] = top
        top += round_size(graph.tensors[t].size_bytes, a)
    offsets.update(first_fit_offsets(graph, lifetimes(graph, order), a, base=top))
    arena = max([offsets[t] + round_size(x.size_bytes, a) for t, x in graph.tensors.items()],
                default=0)
    wall = time.perf_counter() - t0
    if progress:
        progress(_Progress("done", 2, 2, prof.peak_bytes, "done"))
    return Plan(
        graph_fingerprint=graph.fingerprint(), graph_name=graph.name, method=settings.method,
        order=tuple(order), offsets=offsets, alignment_bytes=a, arena_bytes=arena,
        planned_peak_bytes=prof.peak_bytes, resident_bytes=prof.resident_bytes,
        baseline_peak_bytes=base.peak_bytes,
        lower_bound_bytes=live_set_lower_bound(graph, a), live_bytes=prof.live_bytes,
        solve_seconds=wall,
        provenance=(SolveRecord("order", "global", "heuristic", prof.peak_bytes, None, wall,
                                len(graph.ops)),),
        settings=settings.as_dict(),
        notes=("stand-in plan: roam_core.planner is not available yet",),
    )
