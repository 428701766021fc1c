"""Reachability of a graph's ops as Python-int bitsets: ancestors, descendants, spans.

Bit ``i`` of a mask stands for the op at program index ``i`` (``graph.op_ids[i]``).  The
ancestor set of an op holds every op that must run before it in every valid order (the
transitive closure of all ordering edges: data edges and control edges); the descendant
set holds every op that must run after it.  Both sets exclude the op itself.

The closure is computed by one pass over a topological order per direction, OR-ing the
predecessor (or successor) masks: ``O(E * N / 64)`` word operations, which Python's
arbitrary-precision integers run in C.  A 10k-op graph takes well under a second.

Serial spans follow ROAM: with ``N`` ops, an op can run no earlier than step
``asap = |ancestors| + 1`` and no later than ``alap = N - |descendants|`` (1-based).  Ops whose
span is a single step (*key points*) sit at the same position in every valid order.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.model.graph import Graph, OpId

__all__ = ["Descendants", "Reachability", "closure_sizes", "forget_reachability", "iter_bits",
           "key_points", "mask_to_bool", "reachability", "topological_indices"]

_logger = logging.getLogger(__name__)


def iter_bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of ``mask``, ascending.

    Examples
    --------
    >>> list(iter_bits(0b101001))
    [0, 3, 5]
    """
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def mask_to_bool(mask: int, n: int) -> np.ndarray:
    """A bitset over ``n`` ops as a boolean array.

    Examples
    --------
    >>> mask_to_bool(0b101, 4).tolist()
    [True, False, True, False]
    """
    raw = mask.to_bytes((n + 7) // 8 or 1, "little")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[:n].astype(bool)


def topological_indices(graph: Graph) -> list[int]:
    """Program indices of the ops in a topological order (program order when it is one).

    Kahn's algorithm that always takes the ready op with the smallest program index, so a
    graph whose program order is already topological gets exactly ``0, 1, ..., N - 1``.
    """
    import heapq

    ids = graph.op_ids
    index = {op: i for i, op in enumerate(ids)}
    preds = [[index[p] for p in graph.predecessors(op)] for op in ids]
    if all(p < i for i, ps in enumerate(preds) for p in ps):
        return list(range(len(ids)))
    succs: list[list[int]] = [[] for _ in ids]
    indeg = [len(ps) for ps in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    assert len(out) == len(ids), "Graph guarantees acyclicity"
    return out


class Descendants(Sequence[int]):
    """Descendant bitsets stored shifted: op ``i``'s mask without its ``i + 1`` low bits,
    which are always zero in a topological program order, and are kept only when they are
    not.  ``d[i]`` is the absolute mask (bit ``j`` = op ``j``), as a plain ``tuple`` would give.

    In a graph whose program order is topological, op ``i``'s descendants all have indices
    above ``i``, so an absolute mask is ``N`` bits long while the shifted one is ``N - i``:
    half the bytes over all ops (``N^2 / 16`` instead of ``N^2 / 8``).

    Examples
    --------
    >>> d = Descendants([0b110, 0b100, 0b000])
    >>> list(d), d[0], len(d), d == (0b110, 0b100, 0)
    ([6, 4, 0], 6, 3, True)
    """

    __slots__ = ("_rel", "_shift")

    def __init__(self, masks: Sequence[int] = ()) -> None:
        rel: list[int] = []
        shift: list[int] = []
        for i, m in enumerate(masks):
            k = i + 1 if not m & ((1 << (i + 1)) - 1) else 0
            rel.append(m >> k)
            shift.append(k)
        self._rel = tuple(rel)
        self._shift = None if all(k == i + 1 for i, k in enumerate(shift)) else tuple(shift)

    @classmethod
    def _from_shifted(cls, rel: Sequence[int], shift: Sequence[int] | None) -> Descendants:
        d = cls.__new__(cls)
        d._rel = tuple(rel)
        d._shift = None if shift is None else tuple(shift)
        return d

    def __len__(self) -> int:
        return len(self._rel)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        if i < 0:
            i += len(self._rel)
        k = i + 1 if self._shift is None else self._shift[i]
        return self._rel[i] << k

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self._rel)))

    def bit_count(self, i: int) -> int:
        """``self[i].bit_count()`` without building the absolute mask."""
        return self._rel[i].bit_count()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Descendants | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Descendants({list(self)!r})"


@dataclass(frozen=True, slots=True)
class Reachability:
    """Ancestor / descendant bitsets of every op (bit ``i`` = op at program index ``i``).

    Parameters
    ----------
    index : Mapping of OpId to int
        Program index of every op.
    ancestors : tuple of int
        ``ancestors[i]``: ops that must run before op ``i`` (excluding ``i``).
    descendants : Descendants or sequence of int
        ``descendants[i]``: ops that must run after op ``i`` (excluding ``i``); any sequence
        is stored as a :class:`Descendants` (shifted, half the bytes).
    op_ids : tuple of OpId
        The ops in program order (``op_ids[i]`` is bit ``i``); derived from ``index`` when
        omitted.
    """

    index: Mapping[OpId, int]
    ancestors: tuple[int, ...]
    descendants: Descendants
    op_ids: tuple[OpId, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.descendants, Descendants):
            object.__setattr__(self, "descendants", Descendants(self.descendants))
        if not self.op_ids and self.index:
            object.__setattr__(self, "op_ids", tuple(sorted(self.index, key=self.index.get)))
        assert len(self.op_ids) == len(self.index) == len(self.ancestors) == len(
            self.descendants)

    def __len__(self) -> int:
        return len(self.op_ids)

    def is_ancestor(self, a: OpId, b: OpId) -> bool:
        """True when ``a`` must run before ``b`` in every valid order (``a != b``)."""
        return bool(self.ancestors[self.index[b]] >> self.index[a] & 1)

    def comparable(self, a: OpId, b: OpId) -> bool:
        """True when every valid order puts ``a`` and ``b`` the same way round (or ``a == b``)."""
        return a == b or self.is_ancestor(a, b) or self.is_ancestor(b, a)

    def asap(self, op: OpId) -> int:
        """Earliest 1-based step of ``op`` in any valid order: ``|ancestors ∪ {op}|``."""
        return self.ancestors[self.index[op]].bit_count() + 1

    def alap(self, op: OpId) -> int:
        """Latest 1-based step of ``op`` in any valid order: ``N - |descendants ∪ {op}| + 1``."""
        return len(self.op_ids) - self.descendants.bit_count(self.index[op])

    def key_points(self) -> tuple[OpId, ...]:
        """Ops with ``asap == alap`` (same position in every valid order), by that position."""
        n = len(self.op_ids)
        found = []
        for i, op in enumerate(self.op_ids):
            a = self.ancestors[i].bit_count() + 1
            if a == n - self.descendants.bit_count(i):
                found.append((a, op))
        found.sort()
        return tuple(op for _, op in found)

    def ids(self, mask: int) -> tuple[OpId, ...]:
        """The op ids of a mask, in program order."""
        return tuple(self.op_ids[i] for i in iter_bits(mask))

    def mask(self, ops: Sequence[OpId]) -> int:
        """The mask of some op ids."""
        m = 0
        for op in ops:
            m |= 1 << self.index[op]
        return m


#: The last graph's reachability (one entry: the bitsets take ``O(N^2 / 8)`` bytes, so at
#: most one set is kept alive; the planner asks for the same graph's several times in a row).
_LAST: list[tuple[weakref.ref[Graph], Reachability]] = []


def forget_reachability() -> None:
    """Drop the cached bitsets (``O(N^2 / 8)`` bytes): the planner calls this before the
    layout, which needs none, so their memory is free for it."""
    _LAST.clear()


def reachability(graph: Graph) -> Reachability:
    """Transitive ancestors and descendants of every op over all ordering edges.

    The result for the most recent graph object is cached (graphs are immutable), so
    consecutive callers on one graph (update groups, insertion, rewrites, bounds) share one
    computation.

    Parameters
    ----------
    graph : Graph
        The graph; data edges and every control edge count.

    Returns
    -------
    Reachability

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> r = reachability(diamond())
    >>> r.is_ancestor("a", "d"), r.comparable("b", "c"), r.asap("c"), r.alap("c")
    (True, False, 2, 3)
    >>> r.key_points()
    ('a', 'd')
    """
    if _LAST and _LAST[0][0]() is graph:
        return _LAST[0][1]
    _LAST.clear()  # free the previous graph's bitsets before building new ones
    r = _reachability(graph)
    _LAST.append((weakref.ref(graph), r))
    return r


def closure_sizes(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """How many ancestors and descendants every op has, without keeping every bitset.

    The same closure as :func:`reachability`, but an op's mask is dropped as soon as its
    last successor (ancestors pass) or predecessor (descendants pass) has used it, so only
    the masks of the current topological frontier are alive: ``O(width * N / 8)`` bytes
    instead of ``O(N^2 / 8)``.  Uses the cached :class:`Reachability` when there is one.

    Parameters
    ----------
    graph : Graph
        The graph; data edges and every control edge count.

    Returns
    -------
    tuple of numpy.ndarray
        ``(ancestors, descendants)``: int64 counts by program index (the op itself excluded).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> a, d = closure_sizes(diamond())
    >>> a.tolist(), d.tolist()
    ([0, 1, 1, 3], [3, 1, 1, 0])
    """
    if _LAST and _LAST[0][0]() is graph:
        r = _LAST[0][1]
        n = len(r)
        return (np.array([m.bit_count() for m in r.ancestors], dtype=np.int64),
                np.array([r.descendants.bit_count(i) for i in range(n)], dtype=np.int64))
    index = {op: i for i, op in enumerate(graph.op_ids)}
    preds = [[index[p] for p in graph.predecessors(op)] for op in graph.op_ids]
    succs = [[index[s] for s in graph.successors(op)] for op in graph.op_ids]
    topo = topological_indices(graph)
    return _frontier_counts(topo, preds, succs), _frontier_counts(topo[::-1], succs, preds)


def _frontier_counts(topo: Sequence[int], into: Sequence[Sequence[int]],
                     out_of: Sequence[Sequence[int]]) -> np.ndarray:
    """Closure sizes along ``topo`` (``into[i]``: the ops ``i`` inherits from), keeping a
    mask only while an op of ``out_of[i]`` has still to read it."""
    counts = np.zeros(len(topo), dtype=np.int64)
    pending = [len(o) for o in out_of]
    live: dict[int, int] = {}
    for i in topo:
        m = 0
        for p in into[i]:
            m |= live[p] | (1 << p)
            pending[p] -= 1
            if not pending[p]:
                del live[p]
        counts[i] = m.bit_count()
        if pending[i]:
            live[i] = m
    assert not live
    return counts


def key_points(graph: Graph) -> tuple[OpId, ...]:
    """The key points of ``graph`` (:meth:`Reachability.key_points`) from
    :func:`closure_sizes`, so without the ``O(N^2 / 8)`` bitsets.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> key_points(diamond())
    ('a', 'd')
    """
    anc, desc = closure_sizes(graph)
    n = len(anc)
    found = sorted((int(anc[i]) + 1, op) for i, op in enumerate(graph.op_ids)
                   if anc[i] + 1 == n - desc[i])
    return tuple(op for _, op in found)


def _reachability(graph: Graph) -> Reachability:
    ids = graph.op_ids
    n = len(ids)
    index = {op: i for i, op in enumerate(ids)}
    preds = [[index[p] for p in graph.predecessors(op)] for op in ids]
    succs = [[index[s] for s in graph.successors(op)] for op in ids]
    topo = topological_indices(graph)
    anc = [0] * n
    for i in topo:
        m = 0
        for p in preds[i]:
            m |= anc[p] | (1 << p)
        anc[i] = m
    # descendants kept shifted right by i + 1 (Descendants): in a topological program order
    # every descendant of op i has an index above i, so this halves their bytes
    topo_prog = all(s > i for i, ss in enumerate(succs) for s in ss)
    desc = [0] * n
    for i in reversed(topo):
        m = 0
        for s in succs[i]:
            m |= (desc[s] << (s + 1) if topo_prog else desc[s]) | (1 << s)
        desc[i] = m >> (i + 1) if topo_prog else m
    _logger.debug("reachability of %d ops computed", n)
    d = (Descendants._from_shifted(desc, None) if topo_prog else Descendants(desc))
    return Reachability(index=index, ancestors=tuple(anc), descendants=d, op_ids=ids)
