"""Cheap operator orders (the baselines), one registry, and a best-of driver.

Problem
-------
Given a training-step :class:`~roam_core.graph.Graph`, find a valid order of its ops (data
edges and control edges honoured) whose simulated peak memory
(:func:`roam_core.simulate.simulate`) is small.  Every strategy here is cheap: the DFS and
BFS orders cost ``O(E log N)``; the greedy list schedulers do one vectorised ``O(N)`` numpy
pass per step (seconds on a 14k-op GPT2-XL graph).  The planner uses the best one as its
warm start and as the "never worse than the best baseline" guarantee.

Strategies (the registry :data:`ORDER_METHODS`)
-----------------------------------------------
1. ``eager``: program order (what PyTorch runs).
2. ``eager_moved_state``: program order with optimizer-state creation sunk to its first
   user (the paper's PyTorch baseline; from ``roam_core.baseline`` when present).
3. ``lescea``: ROAM's heuristic baseline, a greedy list scheduler.  Among ready ops prefer
   one whose run does not raise the running peak (then the smallest live memory after it),
   otherwise the one with the smallest new peak; ties by op name.
4. ``lpmf``: inductor's "least peak memory first" (same greedy idea, inductor's
   bookkeeping: unused outputs are freed at once, ties by program index).
5. ``bfs``: inductor's FIFO order (ready op whose predecessors ran earliest first).
6. ``dfs``: inductor's DFS, visiting ops (and their unmet inputs) by ascending
   "output + input bytes".
7. ``xla_list``: XLA's list scheduler: highest ``bytes freed - bytes defined`` first, then
   most users, then the most recently readied; effective scalars are forced early.
8. ``xla_dfs``: XLA's DFS post-order from the sinks, operands with more "extra users" and
   larger cumulative sizes first.
9. ``xla_postorder``: a plain DFS post-order from the sinks, operands in input order.
10. ``lpmf_updates``: LPMF on forward + backward only, then each per-parameter update
    group (:mod:`roam_core.updates`) inserted, largest first, at the slot that minimises the
    profile peak (the strongest cheap order, see ``design/calibration.md``); a few variants
    and plain LPMF are scored and the best is kept.

Composites ``inductor`` (best of 4-6) and ``xla`` (best of 7-9) score their members with
the one estimator, like inductor's ``reorder_for_peak_memory``.  :func:`best_heuristic_order`
runs a list of methods, logs each score, isolates per-method failures and returns the
minimum.

References
----------
inductor ``torch/_inductor/memory.py`` (LPMF, BFS, DFS); XLA ``hlo_memory_scheduler.cc``
(list, DFS and post-order schedulers); ROAM ``baselines/heuristics/LESCEA.py``.  Ideas only:
no code was copied.
"""

from __future__ import annotations

import heapq
import importlib.util
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.dag_view import CompactGraph, ListState, compact
from roam_core.errors import GraphError, RoamError
from roam_core.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.simulate import MemoryProfile, simulate
from roam_core.validate import check_order

__all__ = [
    "COMPOSITE_METHODS",
    "DEFAULT_METHODS",
    "ORDER_METHODS",
    "CompactGraph",
    "HeuristicResult",
    "OrderMethod",
    "best_heuristic_order",
    "bfs_order",
    "compact",
    "dfs_order",
    "eager_order",
    "inductor_order",
    "lescea_order",
    "lpmf_order",
    "lpmf_updates_order",
    "run_method",
    "xla_dfs_order",
    "xla_list_order",
    "xla_order",
    "xla_postorder_order",
]

_logger = logging.getLogger(__name__)

#: A strategy: graph in, valid order out.
OrderMethod = Callable[[Graph], Order]

_BIG = np.iinfo(np.int64).max // 4


def _argmin_masked(mask: np.ndarray, key: np.ndarray) -> tuple[int, np.ndarray]:
    """Smallest ``key`` under ``mask``: (first index, mask of all ties)."""
    k = np.where(mask, key, _BIG)
    m = k.min()
    return int(np.argmin(k)), mask & (k == m)


# ----------------------------------------------------------------- the strategies
def eager_order(graph: Graph) -> Order:
    """Program order (the eager baseline).

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> eager_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    return tuple(graph.op_ids)


def _lpmf(cg: CompactGraph) -> list[int]:
    st = ListState(cg)
    size = st.defined
    # 1. the outputs are live at the end whatever the order: a lower bound on the peak
    max_mem = int(sum(s for s, o in zip(cg.size_bytes, cg.is_output) if o))
    live = 0
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        gap = max_mem - live
        free = st.last_free + st.dead_out
        fits = st.ready & (size <= gap)
        # 2. (i) an op that fits under the peak so far: least memory after it
        if fits.any():
            v, _ = _argmin_masked(fits, size - free)
        # 3. (ii) otherwise the least memory while it runs, then least after
        else:
            _, ties = _argmin_masked(st.ready, size)
            v, _ = _argmin_masked(ties, size - free)
        live += int(size[v])
        max_mem = max(max_mem, live)
        live -= int(free[v])
        st.schedule(v)
    return st.finish()


def lpmf_order(graph: Graph) -> Order:
    """Inductor-style "least peak memory first" greedy topological order.

    Keeps the peak so far; among ready ops, those whose allocation fits under it are
    preferred, by the least live memory after running; if none fits, the op with the
    least memory while running wins.  Ties go to the smallest program index.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> lpmf_order(diamond())  # sizes round to 512 B: all ties, program index wins
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph)
    return cg.order_ids(_lpmf(cg))


def lescea_order(graph: Graph) -> Order:
    """ROAM's LESCEA greedy list scheduler.

    ``base`` is the live memory (it never frees outputs nobody reads, as the original);
    among ready ops, those with ``base + defined <= peak`` are preferred by the smallest
    ``base + defined - freed``; otherwise the smallest new peak ``base + defined``.  Ties go
    to the smallest op name.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> lescea_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph)
    st = ListState(cg)
    name_rank = np.empty(cg.n_ops, dtype=np.int64)
    name_rank[sorted(range(cg.n_ops), key=lambda i: cg.op_ids[i])] = np.arange(cg.n_ops)
    defined = st.defined
    base = peak = 0
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        fits = st.ready & (base + defined <= peak)
        if fits.any():
            _, ties = _argmin_masked(fits, defined - st.last_free)
        else:
            _, ties = _argmin_masked(st.ready, defined)
        v, _ = _argmin_masked(ties, name_rank)
        peak = max(peak, base + int(defined[v]))
        base += int(defined[v] - st.last_free[v])
        st.schedule(v)
    return cg.order_ids(st.finish())


def bfs_order(graph: Graph) -> Order:
    """Inductor-style BFS: the ready op whose predecessors ran earliest goes first.

    The priority of a ready op is the sorted list of the steps its predecessors ran at
    (FIFO: buffers created early are consumed, hence freed, early); ties by program index.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> bfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph)
    n = cg.n_ops
    step = [-1] * n
    indeg = [len(p) for p in cg.preds]
    heap: list[tuple[list[int], int]] = [([], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        step[v] = len(out)
        out.append(v)
        for s in cg.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (sorted({step[p] for p in cg.preds[s]}), s))
    if len(out) != n:
        raise GraphError("bfs stopped early")
    return cg.order_ids(out)


def _post_order(cg: CompactGraph, roots: Sequence[int],
                operands: Callable[[int], Sequence[int]]) -> list[int]:
    """Iterative DFS post-order over predecessors (an op after all its operands)."""
    seen = [False] * cg.n_ops
    out: list[int] = []
    for root in roots:
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(operands(root)))]
        while stack:
            v, it = stack[-1]
            for p in it:
                if not seen[p]:
                    seen[p] = True
                    stack.append((p, iter(operands(p))))
                    break
            else:
                stack.pop()
                out.append(v)
    return out


def dfs_order(graph: Graph) -> Order:
    """Inductor-style DFS: visit ops by ascending ``output + input bytes``.

    Each visited op first visits its unmet predecessors (also by that key), then is
    emitted, so small ops and their producers go first.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> dfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph)
    swr = cg.defined_bytes()
    for v, ss in enumerate(cg.uses):
        swr[v] += sum(cg.size_bytes[s] for s in ss)
    key = [(int(swr[v]), v) for v in range(cg.n_ops)]
    preds_sorted = [sorted(ps, key=lambda p: key[p]) for ps in cg.preds]
    roots = sorted(range(cg.n_ops), key=lambda v: key[v])
    return cg.order_ids(_post_order(cg, roots, lambda v: preds_sorted[v]))


def _effective_scalar(graph: Graph, cg: CompactGraph) -> np.ndarray:
    out = np.zeros(cg.n_ops, dtype=bool)
    for v, op in enumerate(graph.ops):
        created = graph.storages_created(op.id)
        if created and all(math.prod(graph.tensors[t].shape) <= 1 for t in created):
            out[v] = True
    return out


def xla_list_order(graph: Graph) -> Order:
    """XLA-style list scheduler.

    Priority of a ready op: ``bytes freed if scheduled - bytes defined`` (highest first),
    then its number of users, then the most recently readied; ops producing effective
    scalars are forced early.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> xla_list_order(diamond())
    ('a', 'c', 'b', 'd')
    """
    cg = compact(graph)
    st = ListState(cg)
    scalar = _effective_scalar(graph, cg)
    n_users = np.array([len(s) for s in cg.succs], dtype=np.int64)
    seq = np.zeros(cg.n_ops, dtype=np.int64)
    counter = 0
    for v in np.flatnonzero(st.ready):
        counter += 1
        seq[v] = counter
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        prio = np.where(scalar, _BIG // 2, st.last_free - st.defined)
        _, ties = _argmin_masked(st.ready, -prio)
        _, ties = _argmin_masked(ties, -n_users)
        v, _ = _argmin_masked(ties, -seq)
        st.schedule(v)
        for s in st.newly_ready:
            counter += 1
            seq[s] = counter
    return cg.order_ids(st.finish())


def _sinks(cg: CompactGraph) -> list[int]:
    return [v for v in range(cg.n_ops) if not cg.succs[v]]


def xla_dfs_order(graph: Graph) -> Order:
    """XLA-style DFS scheduler: post-order from the sinks, heavy operands first.

    For each op, ``extra_users`` (fan-out beyond one, accumulated over its operands) and
    ``total_size`` (bytes defined by it and, cumulatively, by its operands) are computed in
    topological order; operands with more extra users, then larger total size, then
    smaller name are visited first.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> xla_dfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    from roam_core.reach import topological_indices

    cg = compact(graph)
    n = cg.n_ops
    defined = cg.defined_bytes()
    extra = [0] * n
    total = [0] * n
    cumulative = 0
    for v in topological_indices(graph):
        extra[v] = max(len(cg.succs[v]) - 1, 0)
        total[v] = int(defined[v])
        cumulative += int(defined[v])
        for p in cg.preds[v]:
            extra[v] += extra[p]
            total[v] += total[p]
        total[v] = min(total[v], cumulative)
        extra[v] = min(extra[v], n)
    key = [(-extra[v], -total[v], cg.op_ids[v]) for v in range(n)]
    ops_sorted = [sorted(ps, key=lambda p: key[p]) for ps in cg.preds]
    roots = sorted(_sinks(cg), key=lambda v: key[v])
    return cg.order_ids(_post_order(cg, roots, lambda v: ops_sorted[v]))


def xla_postorder_order(graph: Graph) -> Order:
    """XLA-style post order: DFS from each sink (program order), operands in input order.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> xla_postorder_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph)
    return cg.order_ids(_post_order(cg, _sinks(cg), lambda v: cg.preds[v]))


def _best_of(graph: Graph, names: Sequence[str]) -> Order:
    res = best_heuristic_order(graph, names, validate=False)
    return res.order


def inductor_order(graph: Graph) -> Order:
    """Best of ``lpmf``, ``bfs`` and ``dfs`` scored by :func:`~roam_core.simulate.simulate`."""
    return _best_of(graph, ("lpmf", "bfs", "dfs"))


def xla_order(graph: Graph) -> Order:
    """Best of ``xla_list``, ``xla_dfs`` and ``xla_postorder`` (one estimator)."""
    return _best_of(graph, ("xla_list", "xla_dfs", "xla_postorder"))


def lpmf_updates_order(graph: Graph) -> Order:
    """LPMF on forward + backward, then cost-aware insertion of per-parameter updates.

    See :func:`roam_core.updates.insert_update_groups` and
    :func:`roam_core.updates.best_update_insertion`; never worse than plain LPMF (graphs
    without update groups get plain LPMF).

    Examples
    --------
    >>> from roam_core.samples import tiny_train_step
    >>> from roam_core.validate import check_order
    >>> g = tiny_train_step()
    >>> check_order(g, lpmf_updates_order(g))
    []
    """
    from roam_core.updates import best_update_insertion

    return best_update_insertion(graph)


def _eager_moved_state(graph: Graph) -> Order:
    from roam_core.baseline import moved_state_order  # type: ignore[import-not-found]

    return tuple(moved_state_order(graph))


#: Every registered strategy, by name.
ORDER_METHODS: dict[str, OrderMethod] = {"eager": eager_order}
if importlib.util.find_spec("roam_core.baseline") is not None:
    ORDER_METHODS["eager_moved_state"] = _eager_moved_state
ORDER_METHODS.update({
    "lescea": lescea_order,
    "lpmf": lpmf_order,
    "bfs": bfs_order,
    "dfs": dfs_order,
    "inductor": inductor_order,
    "xla_list": xla_list_order,
    "xla_dfs": xla_dfs_order,
    "xla_postorder": xla_postorder_order,
    "xla": xla_order,
    "lpmf_updates": lpmf_updates_order,
})

#: Methods that are themselves best-of runs over other entries.
COMPOSITE_METHODS = ("inductor", "xla")

#: What :func:`best_heuristic_order` tries by default (no composite: no double work).
DEFAULT_METHODS = tuple(m for m in ORDER_METHODS if m not in COMPOSITE_METHODS)


# ------------------------------------------------------------------- the driver
@dataclass(frozen=True, slots=True)
class HeuristicResult:
    """The best cheap order found.

    Parameters
    ----------
    order : tuple of OpId
        The winning order.
    profile : MemoryProfile
        Its simulated profile.
    method : str
        The winning method's name.
    scores : Mapping of str to int
        Simulated peak bytes (incl. resident) of every method that succeeded.
    seconds : Mapping of str to float
        Wall time of every method tried.
    """

    order: Order
    profile: MemoryProfile
    method: str
    scores: Mapping[str, int]
    seconds: Mapping[str, float]


def run_method(graph: Graph, method: str, *, validate: bool = True) -> Order:
    """Run one registered method; raises ``GraphError`` for an unknown name or bad order.

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> run_method(diamond(), "xla_list")
    ('a', 'c', 'b', 'd')
    """
    try:
        fn = ORDER_METHODS[method]
    except KeyError:
        raise GraphError(
            f"unknown ordering method {method!r}; known: {', '.join(ORDER_METHODS)}"
        ) from None
    order = tuple(fn(graph))
    if validate:
        bad = check_order(graph, order)
        if bad:
            raise GraphError(f"method {method!r} returned an invalid order: {bad[0].message}")
    return order


def best_heuristic_order(
    graph: Graph,
    methods: Sequence[str] | None = None,
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    validate: bool = True,
) -> HeuristicResult:
    """Run several cheap orders, score each with ``simulate``, return the best.

    Parameters
    ----------
    graph : Graph
        The graph.
    methods : sequence of str, optional
        Names from :data:`ORDER_METHODS`; default :data:`DEFAULT_METHODS`.
    alignment_bytes : int
        Rounding used for scoring.
    validate : bool
        Check every order with :func:`~roam_core.validate.check_order` (a method whose
        order is invalid counts as failed).

    Returns
    -------
    HeuristicResult
        Ties go to the method listed first.

    Raises
    ------
    RoamError
        If every method failed.

    Examples
    --------
    >>> from roam_core.samples import tiny_train_step
    >>> r = best_heuristic_order(tiny_train_step(), ["eager", "lpmf"], alignment_bytes=1)
    >>> r.method, r.profile.peak_bytes, dict(r.scores)
    ('eager', 1504, {'eager': 1504, 'lpmf': 1504})
    """
    names = tuple(methods) if methods is not None else DEFAULT_METHODS
    best: tuple[int, str, Order, MemoryProfile] | None = None
    scores: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            order = run_method(graph, name, validate=validate)
            prof = simulate(graph, order, alignment_bytes=alignment_bytes)
        except Exception as e:  # isolate one strategy's failure
            seconds[name] = time.perf_counter() - t0
            _logger.warning("ordering method %s failed on %s: %s", name, graph.name, e)
            continue
        seconds[name] = time.perf_counter() - t0
        scores[name] = prof.peak_bytes
        _logger.info("%s peak memory: %d bytes (%.2f s)", name, prof.peak_bytes,
                     seconds[name])
        if best is None or prof.peak_bytes < best[0]:
            best = (prof.peak_bytes, name, order, prof)
    if best is None:
        raise RoamError(f"every ordering method failed on graph {graph.name!r}: {names}")
    return HeuristicResult(order=best[2], profile=best[3], method=best[1], scores=scores,
                           seconds=seconds)
