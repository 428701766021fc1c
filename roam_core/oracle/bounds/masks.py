"""The restriction argument and its storage masks: what any op subset proves about every order.

The restriction argument
------------------------
Take any set ``G`` of ops (a *group*: a window of some order around its peak, a key-point
unit, a parameter's update, or all ops) and any valid order ``pi`` of the whole graph.
Restricted to ``G``, ``pi`` is a linear extension ``sigma`` of ``G`` under the *transitive*
precedences (paths through ops outside ``G`` count).  For a planned storage ``s`` with
producer ``p`` and users ``U`` (its consumers, ``p`` itself, the end of the step for a graph
output), let

* ``started(s)`` = the ops of ``G`` that are ``p`` or descendants of ``p``;
* ``pending(s)`` = the ops of ``G`` that are a user or an ancestor of a user.

When the ``t``-th op ``x`` of ``sigma`` runs, ``s`` is live in ``pi`` if some op of
``started(s)`` is among ``sigma[0..t]`` (so ``p`` has run: ``s`` exists) and some op of
``pending(s)`` is *not* among ``sigma[0..t-1]`` (it is ``x`` or runs later, so some user runs
at or after ``x``: ``s`` is not freed yet); a graph output only needs the first condition.
Summing those storages at every step of ``sigma``, taking the maximum over steps and the
minimum over linear extensions of ``G`` gives a number that is at most the peak of ``pi``.
It is a lower bound on the peak of *every* valid order, and any lower bound proven on that
minimum is one too.

* With ``G`` = all ops the minimum is exact: it is the minimum peak of the graph.
* With ``G`` = the ops between two consecutive key points (a unit, in every order at the same
  steps) it is exact on those steps; the maximum over units is the exact optimum.
* The live-set bound (:func:`~roam_core.oracle.bounds.live_set.live_set_lower_bound`) is the
  case ``G = {x}``; the update-group bound is the case of one parameter's update (this
  argument also sees users outside ``G`` through ``pending``, so it is at least as tight on
  the same group).

The bounds built on it: :func:`~roam_core.oracle.bounds.restriction.restriction_bound`
(CP-SAT over any group), :func:`~roam_core.oracle.bounds.choice.choice_lower_bound` (one op
plus the cheapest down-set of each free group) and
:func:`~roam_core.oracle.bounds.chain.chain_group_lower_bound` (a chain plus one group,
exactly).  This module holds the masks they all read: ``started`` and ``pending`` of every
planned storage over the whole graph (a group's are the masks ANDed with the group's ops).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Tensor, round_size
from roam_core.model.reach import Reachability, reachability

__all__ = ["StorageMasks", "iter_storage_masks", "started_pending_masks", "storage_masks"]


@dataclass(frozen=True, slots=True)
class StorageMasks:
    """Per planned storage (non-zero rounded size): the global masks of the argument above.

    Parameters
    ----------
    sizes : tuple of int
        Rounded bytes.
    started : tuple of int
        Mask of ops that are the producer or its descendants.
    pending : tuple of int
        Mask of ops that are a user or an ancestor of a user (``-1`` for a graph output:
        always pending).
    resident_bytes : int
        Rounded resident bytes.
    """

    sizes: tuple[int, ...]
    started: tuple[int, ...]
    pending: tuple[int, ...]
    resident_bytes: int


def storage_masks(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES, *,
                  reach: Reachability | None = None) -> StorageMasks:
    """The :class:`StorageMasks` of ``graph`` (cost ``O(users * N / 64)``).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> sm = storage_masks(diamond(), 1)
    >>> sm.sizes, [bin(m) for m in sm.started]
    ((100, 200, 50, 10), ['0b1111', '0b1010', '0b1100', '0b1000'])
    """
    r = reach if reach is not None else reachability(graph)
    sizes, started, pending = [], [], []
    for size, st, pd in iter_storage_masks(graph, alignment_bytes, r):
        sizes.append(size)
        started.append(st)
        pending.append(pd)
    return StorageMasks(tuple(sizes), tuple(started), tuple(pending),
                        graph.resident_bytes(alignment_bytes))


def iter_storage_masks(graph: Graph, alignment_bytes: int, r: Reachability,
                       ) -> Iterator[tuple[int, int, int]]:
    """``(size, started, pending)`` of every planned storage, one at a time (the
    :class:`StorageMasks` rows without keeping them: ``O(N / 8)`` bytes each)."""
    outputs = set(graph.outputs)
    for t in graph.tensors.values():
        if t.producer is None:
            continue
        size = round_size(t.size_bytes, alignment_bytes)
        if size == 0:
            continue
        yield (size, *started_pending_masks(r, t, t.id in outputs))


def started_pending_masks(r: Reachability, t: Tensor, is_output: bool) -> tuple[int, int]:
    """``(started, pending)`` of one planned storage ``t`` (``pending`` is ``-1`` for a graph
    output): its producer and the producer's descendants; its users and their ancestors."""
    p = r.index[t.producer]  # type: ignore[index]  # a planned storage has a producer
    started = r.descendants[p] | (1 << p)
    if is_output:
        return started, -1
    pending = r.ancestors[p] | (1 << p)
    for c in t.consumers:
        i = r.index[c]
        pending |= r.ancestors[i] | (1 << i)
    return started, pending
