"""What the just-in-time evaluator knows of a graph and its base order, read-only.

:class:`~roam_core.recompute.evaluator.JitEvaluator` indexes the base order once and every
evaluation, window model and greedy step reads the index: per planned storage (a storage
with a producer and bytes) its steps in the base order and its size, the live bytes of the
base order at each op and in each gap, and per op the facts a re-run needs.  Steps are
positions in the (view-hoisted) base order; "early" readers are forward and loss ops,
"late" readers backward and optimizer ops.  The arrays are not writeable: the index is
shared by every user of one evaluator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from roam_core.model.graph import Graph, OpId, TensorId, ValueId
from roam_core.model.recompute_ops import COPY_SUFFIX

__all__ = ["BaseOrderIndex", "RerunFacts", "index_base_order"]


class RerunFacts(NamedTuple):
    """What an evaluation needs of one recompute op (see
    :meth:`~roam_core.recompute.evaluator.JitEvaluator.rerun_facts`)."""

    #: earliest base step it may run before (first reader, in-place writes of its inputs)
    own_slot: int
    #: sources of the recomputed copies it reads
    copy_sources: tuple[OpId, ...]
    #: the original storages of those copies
    copy_storages: tuple[TensorId, ...]
    #: indexes (:attr:`BaseOrderIndex.index_of`) of the kept planned storages it reads
    kept_inputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BaseOrderIndex:
    """The base order's per-storage arrays and per-op facts (see the module docstring).

    Array fields are indexed like :attr:`planned`; ``-1`` in a ``*_step`` array means
    "no such reader".
    """

    #: the base order (forward views hoisted)
    order: tuple[OpId, ...]
    #: step of each op in :attr:`order`
    position: Mapping[OpId, int]
    #: the planned storages with bytes, in graph order (the index of the arrays)
    planned: tuple[TensorId, ...]
    #: index of each planned storage in :attr:`planned`
    index_of: Mapping[TensorId, int]
    #: rounded bytes of each planned storage
    size_bytes: np.ndarray
    #: step of its producer
    start_step: np.ndarray
    #: step of its last reader (``len(order)`` for step outputs; the producer without readers)
    end_step: np.ndarray
    #: :attr:`end_step` clipped to the last step
    end_step_clipped: np.ndarray
    #: step of its last early reader, else of its producer (a dropped storage ends there)
    early_end_step: np.ndarray
    #: step of its last early reader
    last_early_step: np.ndarray
    #: step of its first late reader
    first_late_step: np.ndarray
    #: step of its last late reader
    last_late_step: np.ndarray
    #: whether it is a step output (live to the end)
    is_output: np.ndarray
    #: live planned bytes at each base op
    live_at_op_bytes: np.ndarray
    #: live planned bytes in the gap before each base op (and after the last), where
    #: recompute ops run
    live_in_gap_bytes: np.ndarray
    #: steps of the in-place writers of each written storage
    writer_steps: Mapping[TensorId, list[int]]
    #: each op's inputs as ``(value, storage)``
    op_inputs: Mapping[OpId, tuple[tuple[str, TensorId], ...]]
    #: the op that makes each value (``None``: resident)
    value_producer: Mapping[str, OpId | None]
    #: the op that makes each storage (``None``: resident)
    tensor_producer: Mapping[TensorId, OpId | None]
    #: the storages each op creates, with their rounded bytes (bytes > 0 only)
    created_bytes: Mapping[OpId, tuple[tuple[TensorId, int], ...]]
    #: the values a re-run of each op writes (its outputs' copies)
    copy_outputs: Mapping[OpId, tuple[str, ...]]
    #: every late read of each storage (:func:`~roam_core.model.recompute_ops.late_read_index`)
    late_reads: Mapping[TensorId, tuple[tuple[int, int, ValueId, OpId], ...]]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _live_curves(n0: int, bs: np.ndarray, be: np.ndarray, z: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Live bytes at each base op (``bs <= i <= be``) and in each gap before base op ``f``
    (``bs < f <= be``); the step outputs live to the end."""
    d = np.zeros(n0 + 2, dtype=np.int64)
    np.add.at(d, bs, z)
    np.add.at(d, be + 1, -z)
    at_op = np.cumsum(d[:n0])
    d = np.zeros(n0 + 2, dtype=np.int64)
    np.add.at(d, bs + 1, z)
    np.add.at(d, be + 1, -z)
    return at_op, np.cumsum(d[:n0 + 1])


def index_base_order(graph: Graph, base: Sequence[OpId], *, size: Mapping[TensorId, int],
                     readers: Mapping[TensorId, Sequence[OpId]], late: set[OpId],
                     outputs: set[TensorId], writers: Mapping[TensorId, Sequence[OpId]],
                     late_reads: Mapping[TensorId, tuple[tuple[int, int, ValueId, OpId], ...]]
                     ) -> BaseOrderIndex:
    """Index ``base`` (a valid, view-hoisted order of ``graph``).

    Parameters
    ----------
    graph : Graph
        The graph.
    base : sequence of OpId
        The base order.
    size : Mapping of TensorId to int
        Rounded bytes of every storage.
    readers : Mapping of TensorId to sequence of OpId
        The consumers of every storage.
    late : set of OpId
        The late (backward, optimizer) ops.
    outputs : set of TensorId
        The step outputs.
    writers : Mapping of TensorId to sequence of OpId
        The in-place writers of every written storage.
    late_reads : Mapping
        :func:`~roam_core.model.recompute_ops.late_read_index` of ``graph``.

    Returns
    -------
    BaseOrderIndex
    """
    g = graph
    n0 = len(base)
    bpos: dict[OpId, int] = {o: i for i, o in enumerate(base)}
    tids = [t.id for t in g.tensors.values() if t.producer is not None and size[t.id]]
    m = len(tids)
    bs = np.zeros(m, dtype=np.int64)
    be = np.zeros(m, dtype=np.int64)
    be_early = np.zeros(m, dtype=np.int64)
    first_late = np.full(m, -1, dtype=np.int64)
    last_early = np.full(m, -1, dtype=np.int64)
    last_late = np.full(m, -1, dtype=np.int64)
    out = np.zeros(m, dtype=bool)
    z = np.zeros(m, dtype=np.int64)
    for i, tid in enumerate(tids):
        s = bpos[g.tensors[tid].producer]  # type: ignore[index]  # planned: has a producer
        early = [bpos[c] for c in readers[tid] if c not in late]
        lat = [bpos[c] for c in readers[tid] if c in late]
        bs[i] = s
        z[i] = size[tid]
        out[i] = tid in outputs
        be[i] = n0 if out[i] else max(early + lat, default=s)
        be_early[i] = max(early, default=s)
        if early:
            last_early[i] = max(early)
        if lat:
            first_late[i], last_late[i] = min(lat), max(lat)
    at_op, in_gap = _live_curves(n0, bs, be, z)
    return BaseOrderIndex(
        order=tuple(base), position=bpos, planned=tuple(tids),
        index_of={t: i for i, t in enumerate(tids)}, size_bytes=_frozen(z),
        start_step=_frozen(bs), end_step=_frozen(be),
        end_step_clipped=_frozen(np.minimum(be, max(n0 - 1, 0))),
        early_end_step=_frozen(be_early), last_early_step=_frozen(last_early),
        first_late_step=_frozen(first_late), last_late_step=_frozen(last_late),
        is_output=_frozen(out), live_at_op_bytes=_frozen(at_op),
        live_in_gap_bytes=_frozen(in_gap),
        writer_steps={s: [bpos[w] for w in ws] for s, ws in writers.items()},
        op_inputs={op.id: tuple((u, g.storage_of(u)) for u in op.inputs) for op in g.ops},
        value_producer={v: g.value_producer(v) for v in (*g.tensors, *(a.id for a in g.aliases))},
        tensor_producer={t.id: t.producer for t in g.tensors.values()},
        created_bytes={op.id: tuple((s, size[s]) for s in g.storages_created(op.id) if size[s])
                       for op in g.ops},
        copy_outputs={op.id: tuple(v + COPY_SUFFIX for v in op.outputs) for op in g.ops},
        late_reads=late_reads,
    )
