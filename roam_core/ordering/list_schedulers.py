"""Greedy list schedulers: program order, ROAM's LESCEA, inductor's LPMF and XLA's list scheduler.

Each picks, step by step, one ready op by a memory key (vectorised numpy over the ready set
only, ``ListState.ready_idx``: ``O(ready ops)`` per step, not ``O(N)``; ties still go to the
lowest op index, so the orders are those of a full-array scan).  See
:mod:`roam_core.ordering.registry` for the registry and the best-of driver.

References
----------
inductor ``torch/_inductor/memory.py`` (LPMF); XLA ``hlo_memory_scheduler.cc`` (list
scheduler); ROAM ``baselines/heuristics/LESCEA.py``.  Ideas only: no code was copied.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from roam_core.model.dag_view import CompactGraph, ListState, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order

__all__ = ["eager_order", "lescea_order", "lpmf_indices", "lpmf_order", "xla_list_order"]

_BIG = np.iinfo(np.int64).max // 4


def _argmin_among(idx: np.ndarray, key: np.ndarray) -> tuple[int, np.ndarray]:
    """Smallest ``key`` among the sorted op indices ``idx`` (``key`` aligned with ``idx``):
    (the first such op, every op that ties)."""
    m = key.min()
    ties = idx[key == m]
    return int(ties[0]), ties


# ----------------------------------------------------------------- the strategies
def eager_order(graph: Graph, *,
                alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Program order (the eager baseline).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> eager_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    return tuple(graph.op_ids)


def lpmf_indices(cg: CompactGraph) -> list[int]:
    """LPMF over a compact graph: op indices in order (see :func:`lpmf_order`)."""
    st = ListState(cg)
    size = st.defined
    # 1. the outputs are live at the end whatever the order: a lower bound on the peak
    max_mem = int(sum(s for s, o in zip(cg.size_bytes, cg.is_output) if o))
    live = 0
    for _ in range(cg.n_ops):
        r = st.ready_idx
        if not len(r):
            break
        gap = max_mem - live
        sz = size[r]
        after = sz - st.last_free[r] - st.dead_out[r]
        fits = sz <= gap
        # 2. (i) an op that fits under the peak so far: least memory after it
        if fits.any():
            v, _ = _argmin_among(r[fits], after[fits])
        # 3. (ii) otherwise the least memory while it runs, then least after
        else:
            tie = sz == sz.min()
            v, _ = _argmin_among(r[tie], after[tie])
        live += int(size[v])
        max_mem = max(max_mem, live)
        live -= int(st.last_free[v] + st.dead_out[v])
        st.schedule(v)
    return st.finish()


def lpmf_order(graph: Graph, *,
               alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Inductor-style "least peak memory first" greedy topological order.

    Keeps the peak so far; among ready ops, those whose allocation fits under it are
    preferred, by the least live memory after running; if none fits, the op with the
    least memory while running wins.  Ties go to the smallest program index.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> lpmf_order(diamond())  # sizes round to 512 B: all ties, program index wins
    ('a', 'b', 'c', 'd')
    """
    key = (id(graph), alignment_bytes)
    hit = _LPMF_LAST.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1]  # the planner asks twice (portfolio, update insertion): deterministic
    cg = compact(graph, alignment_bytes)
    out = cg.order_ids(lpmf_indices(cg))
    _LPMF_LAST.clear()
    _LPMF_LAST[key] = (weakref.ref(graph), out)
    return out


#: The last graph's LPMF order (graphs are immutable and the order is deterministic).
_LPMF_LAST: dict[tuple[int, int], tuple[weakref.ref[Graph], Order]] = {}


def lescea_order(graph: Graph, *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """ROAM's LESCEA greedy list scheduler.

    ``base`` is the live memory (it never frees outputs nobody reads, as the original);
    among ready ops, those with ``base + defined <= peak`` are preferred by the smallest
    ``base + defined - freed``; otherwise the smallest new peak ``base + defined``.  Ties go
    to the smallest op name.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> lescea_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph, alignment_bytes)
    st = ListState(cg)
    name_rank = np.empty(cg.n_ops, dtype=np.int64)
    name_rank[sorted(range(cg.n_ops), key=lambda i: cg.op_ids[i])] = np.arange(cg.n_ops)
    defined = st.defined
    base = peak = 0
    for _ in range(cg.n_ops):
        r = st.ready_idx
        if not len(r):
            break
        d = defined[r]
        fits = base + d <= peak
        if fits.any():
            rf = r[fits]
            _, ties = _argmin_among(rf, d[fits] - st.last_free[rf])
        else:
            _, ties = _argmin_among(r, d)
        v, _ = _argmin_among(ties, name_rank[ties])
        peak = max(peak, base + int(defined[v]))
        base += int(defined[v] - st.last_free[v])
        st.schedule(v)
    return cg.order_ids(st.finish())


def _effective_scalar(graph: Graph, cg: CompactGraph) -> np.ndarray:
    out = np.zeros(cg.n_ops, dtype=bool)
    for v, op in enumerate(graph.ops):
        created = graph.storages_created(op.id)
        if created and all(math.prod(graph.tensors[t].shape) <= 1 for t in created):
            out[v] = True
    return out


def xla_list_order(graph: Graph, *,
                   alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """XLA-style list scheduler.

    Priority of a ready op: ``bytes freed if scheduled - bytes defined`` (highest first),
    then its number of users, then the most recently readied; ops producing effective
    scalars are forced early.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> xla_list_order(diamond())
    ('a', 'c', 'b', 'd')
    """
    cg = compact(graph, alignment_bytes)
    st = ListState(cg)
    scalar = _effective_scalar(graph, cg)
    n_users = np.array([len(s) for s in cg.succs], dtype=np.int64)
    seq = np.zeros(cg.n_ops, dtype=np.int64)
    counter = 0
    for v in np.flatnonzero(st.ready):
        counter += 1
        seq[v] = counter
    for _ in range(cg.n_ops):
        r = st.ready_idx
        if not len(r):
            break
        prio = np.where(scalar[r], _BIG // 2, st.last_free[r] - st.defined[r])
        _, ties = _argmin_among(r, -prio)
        _, ties = _argmin_among(ties, -n_users[ties])
        v, _ = _argmin_among(ties, -seq[ties])
        st.schedule(v)
        for s in st.newly_ready:
            counter += 1
            seq[s] = counter
    return cg.order_ids(st.finish())
