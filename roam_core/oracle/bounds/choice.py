"""The choice bound: the live-set bound plus, at each op, the cheapest choice of each group.

For an op ``x`` and a group ``U`` of ops (:mod:`roam_core.oracle.bounds.op_groups`), the ops
of ``U`` that run before ``x`` in an order form a down-set ``D`` of ``U`` that contains
``U``'s ancestors of ``x`` and none of its descendants.  Judged from ``{x} | D`` alone (the
restriction argument of :mod:`roam_core.oracle.bounds.masks`), each storage touched by ``U``
is live at ``x`` when it has been created and a user is still to come; the cheapest
compatible ``D`` is a lower bound on what ``U``'s storages hold at ``x`` in every order.
:func:`choice_lower_bound` adds that, over disjoint groups, to every other storage the
live-set argument forces at ``x``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.reach import Reachability, iter_bits, mask_to_bool, reachability
from roam_core.oracle.bounds.live_set import live_set_lower_bound, weighted_mask_sum
from roam_core.oracle.bounds.masks import StorageMasks, started_pending_masks
from roam_core.oracle.bounds.op_groups import down_sets, free_branch_groups, group_precedences

__all__ = ["ChoiceBound", "choice_lower_bound"]


@dataclass(frozen=True, slots=True)
class ChoiceBound:
    """The per-op choice bound (see :func:`choice_lower_bound`).

    Parameters
    ----------
    bound_bytes : int
        The bound, resident bytes included.
    op_id : OpId or None
        The op where it is attained.
    per_op_bytes : tuple of int
        Per op in program order: planned bytes live at that op in every order, choices
        included (resident bytes excluded).
    groups_used : int
        Groups solved (the others were too large and count as forced-only).
    """

    bound_bytes: int
    op_id: OpId | None
    per_op_bytes: tuple[int, ...]
    groups_used: int


#: A storage a group touches: ``(size in units, started mask, pending mask or -1)``.
_Item = tuple[int, int, int]


def choice_lower_bound(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    groups: Sequence[Sequence[OpId]] | None = None,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_group_ops: int = 40,
    max_down_sets: int = 512,
) -> ChoiceBound:
    """Live-set bound plus, at each op, the cheapest choice of every free op group.

    For an op ``x`` and a group ``U`` of ops (by default each weakly connected group of
    free-branch ops, e.g. one parameter's update), the ops of ``U`` that run before ``x`` in
    an order form a down-set ``D`` of ``U`` that contains ``U``'s ancestors of ``x`` and none
    of its descendants.  Each storage touched by ``U`` (assigned to one group only) is live
    at ``x`` when, judged from ``{x} | D`` alone, it has been created and a user is still to
    come.  The minimum over compatible ``D`` of those bytes, summed over groups, plus every
    unassigned storage the live-set argument forces at ``x``, is live at ``x`` in every
    order: the gradient-or-state choice of an Adam update (the gradient waits, or
    ``exp_avg`` / ``exp_avg_sq`` exist) counts as the cheaper one.  The bound is the maximum
    over ``x`` (resident bytes included).

    Parameters
    ----------
    graph : Graph
        The graph.
    alignment_bytes : int
        Storage rounding.
    groups : sequence of sequence of OpId, optional
        Disjoint op groups (default
        :func:`~roam_core.oracle.bounds.op_groups.free_branch_groups`).
    reach, masks : optional
        Precomputed reachability / :func:`~roam_core.oracle.bounds.masks.storage_masks`
        (unused: the few masks needed are built per group).
    max_group_ops, max_down_sets : int
        Groups above these sizes are left out (their storages count as forced only).

    Returns
    -------
    ChoiceBound

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.oracle.bounds.live_set import live_set_lower_bound
    >>> g = tiny_train_step()
    >>> choice_lower_bound(g, 1).bound_bytes >= live_set_lower_bound(g, 1).bound_bytes
    True
    """
    r = reach if reach is not None else reachability(graph)
    n = len(graph.ops)
    resident = graph.resident_bytes(alignment_bytes)
    if n == 0:
        return ChoiceBound(resident, None, (), 0)
    outputs = set(graph.outputs)
    grps = [tuple(gr) for gr in (groups if groups is not None
                                       else free_branch_groups(graph, max_group_ops, reach=r))]
    sizes = _planned_sizes(graph, alignment_bytes)
    unit = max(math.gcd(*sizes.values()), 1) if sizes else 1
    # the storages' forced-live bytes are the live-set bound's (cached per graph: the
    # update-group bound computed them for the same graph); every size is a multiple of
    # ``unit``, so the integer division is exact and the float64 total is the same as the
    # sum of ``size // unit`` over the masks
    total = (np.asarray(live_set_lower_bound(graph, alignment_bytes, reach=r).forced_bytes,
                        dtype=np.int64) // unit).astype(np.float64)
    assigned: set[TensorId] = set()
    used = 0
    gains: list[tuple[int, int]] = []  # (best - base, ops): added over the ops at the end
    for grp in grps:
        if not grp or len(grp) > max_group_ops:
            continue
        gidx = [r.index[o] for o in grp]
        umask, pred_local = group_precedences(r, gidx)
        ds = down_sets(pred_local, max_down_sets)
        if ds is None:
            continue
        touched = _claim_storages(graph, grp, sizes, assigned)
        if not touched:
            continue
        used += 1
        items = [(sizes[s] // unit, *started_pending_masks(r, graph.tensors[s], s in outputs))
                 for s in touched]
        _add_group_gain(r, n, gidx, umask, ds, items, total, gains)
    if gains:
        total += weighted_mask_sum(gains, n).astype(np.float64)
    per_op = np.rint(total).astype(np.int64) * unit
    i = int(np.argmax(per_op))
    return ChoiceBound(int(per_op[i]) + resident, r.op_ids[i], tuple(per_op.tolist()), used)


def _planned_sizes(graph: Graph, alignment_bytes: int) -> dict[TensorId, int]:
    """Rounded size of each planned (produced, non-empty) storage."""
    out: dict[TensorId, int] = {}
    for t in graph.tensors.values():
        if t.producer is not None:
            size = round_size(t.size_bytes, alignment_bytes)
            if size:
                out[t.id] = size
    return out


def _claim_storages(graph: Graph, grp: Sequence[OpId], sizes: dict[TensorId, int],
                    assigned: set[TensorId]) -> list[TensorId]:
    """The planned storages ``grp`` reads or creates that no earlier group claimed (each
    storage counts in one group only); they are added to ``assigned``."""
    touched: list[TensorId] = []
    for op in grp:
        for s in (*graph.storages_read(op), *graph.storages_created(op)):
            if s in sizes and s not in assigned:
                assigned.add(s)
                touched.append(s)
    return touched


def _add_group_gain(r: Reachability, n: int, gidx: Sequence[int], umask: int,
                    ds: Sequence[int], items: Sequence[_Item], total: np.ndarray,
                    gains: list[tuple[int, int]]) -> None:
    """Add one group's ``best - base`` (in units) at each op: into ``total`` directly, or as
    ``(gain, ops)`` pairs into ``gains`` for a class of ops with equal columns.

    An op ``x`` comparable with every op of the group has one compatible down-set (the
    group's ancestors of ``x``), and there each storage is live exactly when it is forced:
    the group adds ``best - base = 0``.  So only the ops incomparable with some group op
    are looked at, and of those one per run of equal columns (the group's reachability bits
    and the storages' started / pending bits decide the column, hence its ``best - base``).
    """
    k = len(gidx)
    full = (1 << n) - 1
    comp = full
    for g in gidx:
        comp &= r.ancestors[g] | r.descendants[g] | (1 << g)
    inc = full ^ comp
    if not inc:
        return
    rows = ([r.descendants[g] for g in gidx] + [r.ancestors[g] | (1 << g) for g in gidx]
            + [st for _, st, _ in items] + [pd for _, _, pd in items if pd != -1])
    # the ops of ``inc`` by their column (the rows' bits there), which decides their
    # ``best - base``: few classes (GPT-2: 5-21), so they are split as bitsets (a few
    # ANDs of N-bit ints per row) instead of reading every op's column
    parts = _partition(inc, rows, _MAX_CLASSES)
    if parts is not None:
        classes, sig = parts
        gain = _group_gain(sig, k, ds, gidx, umask, items)
        gains.extend((int(v), c) for v, c in zip(np.rint(gain).astype(np.int64), classes,
                                                 strict=True) if v)
        return
    cols = np.flatnonzero(mask_to_bool(inc, n))
    sig = np.stack([mask_to_bool(x, n)[cols] for x in rows])
    runs = np.concatenate(([0], np.flatnonzero(
        np.any(sig[:, 1:] != sig[:, :-1], axis=0)) + 1))
    lengths = np.diff(np.append(runs, len(cols)))
    gain = _group_gain(sig[:, runs], k, ds, gidx, umask, items)  # one column per run
    total[cols] += np.repeat(gain, lengths)


#: :func:`choice_lower_bound` splits a group's incomparable ops into at most this many
#: classes of equal columns as bitsets, else it reads every op's column.
_MAX_CLASSES = 64


def _partition(inc: int, rows: Sequence[int], limit: int,
               ) -> tuple[list[int], np.ndarray] | None:
    """The ops of bitset ``inc`` split by their bits in ``rows``: ``(class bitsets, the
    rows' bits of each class as a (rows, classes) boolean array)``, or None past ``limit``
    classes.

    >>> classes, sig = _partition(0b1111, [0b0011, 0b0101], 8)
    >>> [bin(c) for c in classes], sig.astype(int).tolist()
    (['0b1', '0b10', '0b100', '0b1000'], [[1, 1, 0, 0], [1, 0, 1, 0]])
    """
    classes = [inc]
    bits: list[list[bool]] = [[]]
    for x in rows:
        nc: list[int] = []
        nb: list[list[bool]] = []
        for c, b in zip(classes, bits, strict=True):
            on = c & x
            if on:
                nc.append(on)
                nb.append([*b, True])
            off = c ^ on
            if off:
                nc.append(off)
                nb.append([*b, False])
        if len(nc) > limit:
            return None
        classes, bits = nc, nb
    return classes, np.array(bits, dtype=bool).T


def _group_gain(sig: np.ndarray, k: int, ds: Sequence[int], gidx: Sequence[int], umask: int,
                items: Sequence[_Item]) -> np.ndarray:
    """``best - base`` (float64, in units) of each column of ``sig`` for one group: rows
    ``0 .. k - 1`` whether group op ``u`` is an ancestor of the op, ``k .. 2k - 1`` whether the
    op is ``u`` or an ancestor of it, then each item's started bits and each (non-output)
    item's pending bits (``items``: ``(size in units, started mask, pending mask or -1)``)."""
    m = sig.shape[1]
    nd = len(ds)
    dmat = np.array([[d >> j & 1 for j in range(k)] for d in ds], dtype=np.float64)
    a_vec = sig[:k].astype(np.float64)  # a[u, x]: u is an ancestor of x
    b_vec = sig[k:2 * k].astype(np.float64)  # b[u, x]: x is u or an ancestor of u
    viol = (1.0 - dmat) @ a_vec + dmat @ b_vec  # > 0: D incompatible with x
    cost = np.zeros((nd, m), dtype=np.float64)
    base = np.zeros(m, dtype=np.float64)
    st_row = 2 * k
    pd_row = 2 * k + len(items)
    for w, st, pd in items:
        st_x = sig[st_row]
        st_row += 1
        if pd == -1:
            pd_x = np.ones(m, dtype=bool)
        else:
            pd_x = sig[pd_row]
            pd_row += 1
        base += (st_x & pd_x) * w
        st_u = st & umask
        a_d = np.array([bool(st_u & _global_mask(d, gidx)) for d in ds])
        if pd == -1:
            b_d = np.ones(nd, dtype=bool)
        else:
            pd_u = pd & umask
            b_d = np.array([bool(pd_u & ~_global_mask(d, gidx)) for d in ds])
        for av in (False, True):
            for bv in (False, True):
                sel = (a_d == av) & (b_d == bv)
                if not sel.any():
                    continue
                live = (st_x | av) & (pd_x | bv)
                if live.any():
                    cost[sel] += live.astype(np.float64) * w
    cost[viol > 0.5] = np.inf
    best: np.ndarray = cost.min(axis=0)
    assert np.all(np.isfinite(best)), "every op has a compatible down-set"
    return best - base


def _global_mask(local_set: int, gidx: Sequence[int]) -> int:
    m = 0
    for j in iter_bits(local_set):
        m |= 1 << gidx[j]
    return m
