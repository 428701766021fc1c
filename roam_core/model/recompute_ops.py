"""Recomputation as data: which ops may be re-run, recompute ops, and the expanded graph.

A plan with recomputation drops some forward storages after their last forward reader and
rebuilds them in the backward by re-running the op that produced them.  A
:class:`RecomputeOp` is such a re-run: a copy of a forward op (its ``source``) that reads
the original inputs or their own recomputed copies (chains), writes *new* storages (same
sizes), and replaces the dropped values for the later readers listed in ``readers``.

:func:`expand_graph` turns a graph plus recompute ops into an ordinary :class:`Graph`: the
recompute ops become ops, their results storages and aliases, and each reader reads the
copy instead of the original.  The original storage's lifetime then ends at its last
forward reader -- it is *dropped* -- and the copy's starts at the recompute op.  Every tool
that works on graphs (the simulator, the orderers, the layout, the validator's order and
arena rules) therefore works on recompute plans unchanged.  Control edges keep every
recompute op on the same side of in-place writes of its inputs as its source (an optimizer
update of a weight the forward op read runs after the re-run), so the copy equals the
original.

Which ops may be re-run (:func:`recompute_blocker`): forward or loss ops whose new storages
are not step outputs, gradients or optimizer state, whose alias results are views of what
they read, and

* that do not write in place -- except the ops that *build* a fresh storage in place
  (:func:`inplace_built_storages`: CPU dropout's ``empty_like`` -> ``bernoulli_`` ->
  ``div_`` mask): the whole chain is re-run on the copy, writing the copy only; and except
  batch norm's update of its running statistics (:func:`running_stats_writes`): the re-run
  computes the same outputs from the batch and leaves the statistics alone (the runtime
  passes no running statistics to it), so they are updated once a step, as without
  recomputation (``torch.utils.checkpoint`` re-runs the module and updates them twice);
* that draw no random numbers -- except when the tracer vouches that the draw is reproduced
  (``Op.recomputable is True``: the op's generator state is recorded in the step's RNG
  timeline, :mod:`roam_core.trace.rng`, and the runtime sets the generator back to it
  before the re-run, :meth:`~roam_core.trace.rng.RngTimeline.with_replay`, as
  ``torch.utils.checkpoint`` does).  A re-run of a random op runs after its source
  (an ``RNG`` control edge): the state it replays is saved when the source's stream
  reaches it.

The tracer records its verdict per op (``Op.recomputable``); ``False`` there always wins.

FLOPs: ``Op.flops`` is recorded by the tracer with torch's own formulas.  For graphs saved
before schema 2 :func:`op_flops` estimates matrix products from the storage sizes (other ops
count 0, as in torch's counter) and :func:`flops_recorded` says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from roam_core.base.checks import require_type
from roam_core.base.errors import ConfigError, GraphError
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    TensorId,
    TensorKind,
    ValueId,
)

__all__ = [
    "COPY_SUFFIX",
    "LATE_PHASES",
    "RecomputeOp",
    "droppable_storages",
    "expand_graph",
    "flops_recorded",
    "inplace_built_storages",
    "late_read_index",
    "op_bytes_moved",
    "op_flops",
    "recompute_blocker",
    "recompute_blockers",
    "recompute_cost",
    "recompute_ops_for",
    "running_stats_writes",
    "step_flops",
]

#: Suffix of the ids of recompute ops and of the values they produce.
COPY_SUFFIX = "@r"
#: Phases whose readers of a dropped value read its recomputed copy.
LATE_PHASES = frozenset({Phase.BACKWARD, Phase.OPTIMIZER})
_EARLY_PHASES = frozenset({Phase.FORWARD, Phase.LOSS})
_NO_DROP_KINDS = frozenset({TensorKind.GRADIENT, TensorKind.OPTIMIZER_STATE, TensorKind.OUTPUT})
#: Batch-norm ops that, when training, update their running statistics (inputs 3 and 4) in
#: place; their outputs come from the batch alone.
RUNNING_STATS_TARGETS = frozenset({"aten.native_batch_norm.default",
                                   "aten.cudnn_batch_norm.default",
                                   "aten.miopen_batch_norm.default"})
#: Positions of the running mean and variance among those ops' arguments (the schema's).
RUNNING_STATS_INPUTS = (3, 4)


@dataclass(frozen=True, slots=True)
class RecomputeOp:
    """A re-run of a forward op that rebuilds dropped values for later readers.

    Parameters
    ----------
    id : OpId
        Id of the recompute op (unique among ops; ``"<source>@r"`` by convention).
    source : OpId
        The graph op it copies (same target, same arguments).
    inputs : tuple of ValueId
        What it reads, position by position like ``source.inputs``: each entry is the
        original value or a recomputed copy of it (an output of another recompute op).
    outputs : tuple of ValueId
        New value ids, position by position like ``source.outputs``: a new storage for each
        storage the source allocates, an alias for each view it returns.
    readers : tuple of OpId
        Graph ops that read these copies instead of the source's values (every input of a
        reader that is an output of ``source`` is replaced by its copy).
    """

    id: OpId
    source: OpId
    inputs: tuple[ValueId, ...]
    outputs: tuple[ValueId, ...]
    readers: tuple[OpId, ...] = ()


# ------------------------------------------------------------------ costs
def flops_recorded(graph: Graph) -> bool:
    """True when every op carries FLOPs recorded at trace time (schema 2 graphs)."""
    return all(op.flops is not None for op in graph.ops)


_MATMUL = ("aten.mm.", "aten.addmm.", "aten.bmm.", "aten.baddbmm.")


def op_flops(graph: Graph, op: Op) -> int:
    """FLOPs of one run of ``op``: the recorded count, else an estimate.

    The estimate (graphs saved before schema 2) counts matrix products only, as
    ``2 * out_elements * k`` with ``k`` inferred from the first operand's storage size;
    every other op counts 0, like torch's own counter.
    """
    if op.flops is not None:
        return op.flops
    if not op.target.startswith(_MATMUL):
        return 0
    created = graph.storages_created(op.id)
    if not created or not op.inputs:
        return 0
    out = graph.tensors[created[0]]
    out_el = 1
    for d in out.shape:
        out_el *= d
    operands = [graph.tensors[graph.storage_of(v)] for v in op.inputs]
    operands = [t for t in operands if t.shape]
    a = operands[-2] if len(operands) >= 2 else None
    if a is None or not out.shape:
        return 0
    a_el = 1
    for d in a.shape:
        a_el *= d
    rows = out_el // out.shape[-1] if out.shape[-1] else 0
    k = a_el // rows if rows else 0
    return 2 * out_el * k


def op_bytes_moved(graph: Graph, op: Op) -> int:
    """Bytes ``op`` reads plus writes (recorded, else the sizes of its storages)."""
    if op.bytes_read is not None and op.bytes_written is not None:
        return op.bytes_read + op.bytes_written
    read = sum(graph.tensors[s].size_bytes for s in graph.storages_read(op.id))
    wrote = sum(graph.tensors[s].size_bytes for s in graph.storages_created(op.id))
    return read + wrote


def step_flops(graph: Graph) -> int:
    """FLOPs of the whole step without recomputation (sum over the ops)."""
    return sum(op_flops(graph, op) for op in graph.ops)


def recompute_cost(graph: Graph, ops: Iterable[RecomputeOp]) -> tuple[int, int]:
    """``(extra FLOPs, extra bytes moved)`` of running the recompute ops once each."""
    flops = moved = 0
    for r in ops:
        src = graph.op(r.source)
        flops += op_flops(graph, src)
        moved += op_bytes_moved(graph, src)
    return flops, moved


# ------------------------------------------------------------------ which ops may re-run
def running_stats_writes(graph: Graph, op: Op) -> frozenset[TensorId]:
    """The storages ``op`` writes in place only as batch norm's running statistics.

    A re-run of ``op`` leaves them alone: it is called without running statistics and
    computes the same outputs, bit for bit, from the batch (empty for other ops).
    """
    if op.target not in RUNNING_STATS_TARGETS:
        return frozenset()
    # the tracer records these ops' writes from their arguments 3 and 4 only (their schemas
    # annotate none): every storage they write is a running statistic, and one they read
    stats = {graph.storage_of(v) for v in op.inputs}
    return frozenset(s for s in op.mutates if s in stats)


def _random_blocked(op: Op) -> bool:
    return op.random and op.recomputable is not True


def inplace_built_storages(graph: Graph) -> frozenset[TensorId]:
    """Storages an op makes and forward ops then *build* in place, re-runnable as a chain.

    A storage ``S`` qualifies when its producer is a forward or loss op and every op that
    writes ``S`` in place

    * is a forward or loss op writing ``S`` only, returning views of ``S`` only,
    * is not marked not recomputable, and draws no random numbers unless they are
      reproduced (``Op.recomputable is True``),

    and every other op that reads ``S`` runs after the last write (program order): nobody
    reads a half-built version.  CPU dropout is the case in point: ``empty_like`` makes the
    mask, ``bernoulli_`` fills it, ``div_`` scales it, the forward multiply and the backward
    read the finished mask.  Re-running the producer and the writers, in order, on a new
    storage rebuilds the finished value.
    """
    pos = {o: i for i, o in enumerate(graph.op_ids)}
    writers: dict[TensorId, list[Op]] = {}
    for op in graph.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op)
    out: set[TensorId] = set()
    for s, ws in writers.items():
        t = graph.tensors.get(s)
        if t is None or t.producer is None or graph.op(t.producer).phase not in _EARLY_PHASES:
            continue
        ok = all(w.phase in _EARLY_PHASES and w.mutates == (s,) and w.recomputable is not False
                 and not _random_blocked(w) and w.outputs
                 and all(graph.storage_of(v) == s and graph.value_producer(v) == w.id
                         and v != s for v in w.outputs)
                 for w in ws)
        if not ok:
            continue
        last = max(pos[w.id] for w in ws)
        wids = {w.id for w in ws}
        if all(pos[c] > last for c in t.consumers if c not in wids):
            out.add(s)
    return frozenset(out)


def recompute_blocker(graph: Graph, op_id: str, *,
                      written: frozenset[TensorId] | None = None,
                      built: frozenset[TensorId] | None = None) -> str | None:
    """Why ``op_id`` may not be re-run in a plan, or ``None`` when it may.

    Parameters
    ----------
    graph : Graph
        The graph.
    op_id : str
        The op.
    written : frozenset, optional
        Storages some op writes in place (computed when not given).
    built : frozenset, optional
        :func:`inplace_built_storages` (computed when not given).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> sorted({str(recompute_blocker(g, o.id))[:9] for o in g.ops})[:2]
    ['None', 'an op of ']
    """
    op = graph.op(op_id)
    if op.recomputable is False:
        return "marked not recomputable when traced"
    if op.phase not in _EARLY_PHASES:
        return f"an op of the {op.phase.value} phase"
    if built is None:
        built = inplace_built_storages(graph)
    stats = running_stats_writes(graph, op)
    muts = [s for s in op.mutates if s not in stats]
    if muts and not (len(muts) == 1 and muts[0] in built):
        return "writes in place"
    if _random_blocked(op):
        return "draws random numbers (the trace does not record how to reproduce them)"
    if not op.outputs:
        return "produces no value"
    if written is None:
        written = frozenset(s for o in graph.ops for s in o.mutates)
    created = set(graph.storages_created(op.id))
    read = set(graph.storages_read(op.id))
    outputs = set(graph.outputs)
    for v in op.outputs:
        s = graph.storage_of(v)
        if s in created:
            t = graph.tensors[s]
            if s in outputs or t.kind in _NO_DROP_KINDS:
                return f"produces the {t.kind.value} {s!r}"
            if s in written and s not in built:
                return f"its result {s!r} is written in place later"
        elif s not in read:
            return f"returns a view of {s!r}, which it does not read"
    return None


def recompute_blockers(graph: Graph) -> dict[OpId, str | None]:
    """:func:`recompute_blocker` of every op (``None``: may be re-run)."""
    written = frozenset(s for o in graph.ops for s in o.mutates)
    built = inplace_built_storages(graph)
    return {op.id: recompute_blocker(graph, op.id, written=written, built=built)
            for op in graph.ops}


def _late_readers(graph: Graph) -> dict[TensorId, list[OpId]]:
    """Late-phase ops reading each storage (directly or through an alias)."""
    out: dict[TensorId, list[OpId]] = {}
    for op in graph.ops:
        if op.phase in LATE_PHASES:
            for v in op.inputs:
                out.setdefault(graph.storage_of(v), []).append(op.id)
    return out


def droppable_storages(graph: Graph, blockers: Mapping[OpId, str | None] | None = None
                       ) -> tuple[TensorId, ...]:
    """Storages a plan may drop: made by a re-runnable op, read again in a late phase.

    Every alias of the storage that a late op reads must come from a re-runnable op too.
    """
    if blockers is None:
        blockers = recompute_blockers(graph)
    late = _late_readers(graph)
    out: list[TensorId] = []
    for t in graph.tensors.values():
        if t.producer is None or t.size_bytes == 0 or t.id not in late:
            continue
        if blockers[t.producer] is not None:
            continue
        ok = True
        for r in late[t.id]:
            for v in graph.op(r).inputs:
                if graph.storage_of(v) == t.id:
                    p = graph.value_producer(v)
                    # a view made in a late phase follows the copy (its maker reads it)
                    if p is None or (blockers[p] is not None
                                     and graph.op(p).phase not in LATE_PHASES):
                        ok = False
        if ok:
            out.append(t.id)
    return tuple(out)


def late_read_index(graph: Graph) -> dict[TensorId, tuple[tuple[int, int, ValueId, OpId], ...]]:
    """Every late-phase read of each storage: ``(op index, input index, value, op id)``.

    In program order (the order :func:`recompute_ops_for` visits them); pass it as
    ``late_reads`` to visit only the reads of the dropped storages.
    """
    out: dict[TensorId, list[tuple[int, int, ValueId, OpId]]] = {}
    for i, op in enumerate(graph.ops):
        if op.phase not in LATE_PHASES:
            continue
        for k, v in enumerate(op.inputs):
            out.setdefault(graph.storage_of(v), []).append((i, k, v, op.id))
    return {s: tuple(r) for s, r in out.items()}


def recompute_ops_for(graph: Graph, dropped: Iterable[TensorId],
                      blockers: Mapping[OpId, str | None] | None = None, *,
                      late_reads: Mapping[TensorId, Sequence[tuple[int, int, ValueId, OpId]]]
                      | None = None) -> tuple[RecomputeOp, ...]:
    """The recompute ops that rebuild ``dropped`` storages for their late readers.

    Every late-phase (backward, optimizer) reader of a dropped storage reads a copy; the
    copy's producer is re-run once, reading kept inputs as they are and dropped inputs
    through their own copies (chains).  Ops are returned inputs first.

    ``late_reads`` (:func:`late_read_index` of ``graph``) makes the cost proportional to
    the dropped storages' reads instead of the graph; the result is the same.

    Raises
    ------
    GraphError
        A storage cannot be dropped (its producer, or the producer of an alias a late op
        reads, may not be re-run).
    """
    if blockers is None:
        blockers = recompute_blockers(graph)
    drop = set(dropped)
    for s in drop:
        t = graph.tensors.get(s)
        if t is None or t.producer is None:
            raise GraphError(f"cannot drop {s!r}: not a storage made by an op")
    chosen: dict[OpId, None] = {}  # ops to re-run, inputs first
    readers: dict[OpId, dict[OpId, None]] = {}

    def need(v: ValueId, reader: OpId | None) -> None:
        p = graph.value_producer(v)
        if reader is not None and p is not None and graph.op(p).phase in LATE_PHASES:
            return  # a late view of the dropped storage: it follows the copy
        if p is None:
            raise GraphError(f"cannot recompute {v!r}: it has no producer")
        why = blockers[p]
        if why is not None:
            raise GraphError(f"cannot drop {graph.storage_of(v)!r}: its producer {p!r} "
                             f"is {why}")
        if reader is not None:
            readers.setdefault(p, {})[reader] = None
        if p in chosen:
            return
        for u in graph.op(p).inputs:
            if graph.storage_of(u) in drop:
                need(u, None)
        chosen[p] = None

    if late_reads is None:
        for op in graph.ops:
            if op.phase not in LATE_PHASES:
                continue
            for v in op.inputs:
                if graph.storage_of(v) in drop:
                    need(v, op.id)
    else:  # the same reads, in the same (program) order
        reads = sorted(r for s in drop for r in late_reads.get(s, ()))
        for _, _, v, op_id in reads:
            need(v, op_id)
    out = []
    for p in chosen:
        src = graph.op(p)
        ins = tuple(u + COPY_SUFFIX if graph.storage_of(u) in drop else u for u in src.inputs)
        out.append(RecomputeOp(OpId(p + COPY_SUFFIX), p, ins,
                               tuple(v + COPY_SUFFIX for v in src.outputs),
                               tuple(readers.get(p, {}))))
    return tuple(out)


# ------------------------------------------------------------------ expansion
def expand_graph(graph: Graph, ops: Sequence[RecomputeOp],
                 order: Sequence[OpId] | None = None) -> Graph:
    """The graph with the recompute ops added and their readers reading the copies.

    In the result's program order each recompute op runs just before its first reader
    (inputs first), unless ``order`` (every op and recompute op once) gives the program
    order.  A recompute op's phase is ``backward``.

    Raises
    ------
    GraphError
        Naming the recompute op whose record is inconsistent (unknown source, wrong number
        of inputs or outputs, duplicate ids, a reader that reads none of the source's
        values, a view whose base is not among its inputs).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> rops = recompute_ops_for(g, droppable_storages(g)[:1])
    >>> len(expand_graph(g, rops).ops) == len(g.ops) + len(rops)
    True
    """
    require_type(graph, Graph, "expand_graph: graph", ConfigError)
    if not ops:
        return graph
    ex = _Expansion(graph)
    for r in ops:
        ex.add(r)
    ex.rewire_readers(_reader_rewiring(graph, ops))
    edges = [*graph.control_edges, *_rerun_edges(graph, ops, ex.copy_of),
             *ex.copy_writer_edges(ops)]
    if order is None:
        prog = _program_order(graph, ops, ex.final_ops, ex.new_ops, ex.copy_of)
    else:
        every = {**ex.final_ops, **ex.new_ops}
        if sorted(order) != sorted(every):
            raise GraphError("expand_graph: the order must list every op and recompute op "
                             "once")
        prog = [every[o] for o in order]
    return Graph.build(prog, ex.tensors.values(), ex.aliases, edges, graph.outputs,
                       name=graph.name, origin=graph.origin)


class _Expansion:
    """The graph :func:`expand_graph` builds: its storages and views, the recompute ops and
    the rewritten graph ops, and which original value each copy stands for."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.known_values = set(graph.tensors) | {a.id for a in graph.aliases}
        self.by_id: dict[str, RecomputeOp] = {}
        self.copy_of: dict[ValueId, ValueId] = {}  # copy value -> original value
        self.new_storage: dict[ValueId, TensorId] = {}  # copy value -> its storage
        self.tensors = dict(graph.tensors)
        self.aliases = list(graph.aliases)
        self.new_ops: dict[OpId, Op] = {}
        self.now: dict[ValueId, TensorId] = {}  # value -> storage in the result, where changed
        self.final_ops: dict[OpId, Op] = {}

    def add(self, r: RecomputeOp) -> None:
        """Check the record of ``r`` and add its op: inputs, outputs (copies or views of
        them) and in-place writes (only of the copies it reads)."""
        graph = self.graph
        if r.id in self.by_id or r.id in graph.op_ids:
            raise GraphError(f"recompute op {r.id!r}: duplicate op id")
        self.by_id[r.id] = r
        try:
            src = graph.op(r.source)
        except GraphError:
            raise GraphError(f"recompute op {r.id!r}: unknown source op {r.source!r}") from None
        if len(r.inputs) != len(src.inputs) or len(r.outputs) != len(src.outputs):
            raise GraphError(f"recompute op {r.id!r}: {len(r.inputs)} inputs and "
                             f"{len(r.outputs)} outputs, its source {src.id!r} has "
                             f"{len(src.inputs)} and {len(src.outputs)}")
        in_storage = self._inputs(r, src)
        self._outputs(r, src, in_storage)
        self.new_ops[r.id] = replace(src, id=OpId(r.id), phase=Phase.BACKWARD,
                                     inputs=tuple(r.inputs), outputs=tuple(r.outputs),
                                     mutates=tuple(self._writes(r, src, in_storage)),
                                     recomputable=False)

    def _inputs(self, r: RecomputeOp, src: Op) -> dict[TensorId, TensorId]:
        """Source input storage -> the storage ``r`` reads (an original or a copy made
        earlier in the list)."""
        graph, copy_of = self.graph, self.copy_of
        in_storage: dict[TensorId, TensorId] = {}
        for u, u0 in zip(r.inputs, src.inputs, strict=True):
            if u in copy_of:
                if copy_of[u] != u0:
                    raise GraphError(f"recompute op {r.id!r} reads {u!r}, a copy of "
                                     f"{copy_of[u]!r}, where {src.id!r} reads {u0!r}")
                in_storage[graph.storage_of(u0)] = self.new_storage[u]
            elif u == u0:
                in_storage[graph.storage_of(u0)] = graph.storage_of(u0)
            else:
                raise GraphError(f"recompute op {r.id!r} reads {u!r} where {src.id!r} reads "
                                 f"{u0!r} (inputs must be the originals or their copies, "
                                 "recomputed earlier in the list)")
        return in_storage

    def _outputs(self, r: RecomputeOp, src: Op, in_storage: dict[TensorId, TensorId]) -> None:
        """The values ``r`` makes: a new storage for each storage its source creates, a view
        of a copy it reads or creates for each view."""
        graph = self.graph
        created = set(graph.storages_created(src.id))
        for v, v0 in zip(r.outputs, src.outputs, strict=True):
            if v in self.known_values or v in self.copy_of:
                raise GraphError(f"recompute op {r.id!r}: output id {v!r} is taken")
            s0 = graph.storage_of(v0)
            if v0 == s0 and s0 in created:
                t = graph.tensors[s0]
                self.tensors[TensorId(v)] = replace(t, id=TensorId(v), producer=OpId(r.id),
                                                    consumers=())
                self.new_storage[v] = TensorId(v)
                in_storage.setdefault(s0, TensorId(v))
            else:
                base = in_storage.get(s0)
                if base is None:
                    own = {graph.storage_of(w0): w for w, w0 in zip(r.outputs, src.outputs)
                           if graph.storage_of(w0) == w0 and w0 in created}
                    base = TensorId(own[s0]) if s0 in own else None
                if base is None:
                    raise GraphError(f"recompute op {r.id!r}: {v0!r} is a view of {s0!r}, "
                                     "which the op neither reads nor creates")
                self.aliases.append(Alias(v, base, OpId(r.id)))
                self.new_storage[v] = base
            self.copy_of[v] = v0

    def _writes(self, r: RecomputeOp, src: Op,
                in_storage: Mapping[TensorId, TensorId]) -> list[TensorId]:
        """What ``r`` writes in place: the copies its source's in-place writes read."""
        muts: list[TensorId] = []
        stats = running_stats_writes(self.graph, src)
        for s0 in src.mutates:  # an in-place builder writes the copy it reads, never s0
            if s0 in stats:
                continue  # the re-run leaves batch norm's running statistics alone
            c = in_storage.get(s0)
            if c is None or c == s0:
                raise GraphError(f"recompute op {r.id!r} would write {s0!r} in place: a "
                                 "re-run may only write the copies it reads")
            muts.append(c)
        return muts

    def storage_now(self, v: ValueId) -> TensorId:
        """The storage of value ``v`` in the result."""
        return self.new_storage[v] if v in self.new_storage else self.now.get(
            v, self.graph.storage_of(v))

    def rewire_readers(self, rewire: Mapping[OpId, Mapping[ValueId, ValueId]]) -> None:
        """The graph's ops with their readers reading the copies (``rewire``: reader ->
        original value -> copy); views of a copy made by a late reader follow the copy."""
        graph = self.graph
        alias_index = {a.id: i for i, a in enumerate(self.aliases)}
        copy_storage = {graph.storage_of(self.copy_of[v]): st
                        for v, st in self.new_storage.items()
                        if graph.storage_of(self.copy_of[v]) != st}
        for op in graph.ops:
            rep = rewire.get(op.id, {})
            ins = tuple(rep.get(v, v) for v in op.inputs)
            reads = {self.storage_now(v) for v in ins}
            for w in op.outputs:  # views of a copy (made by late readers) follow the copy
                i = alias_index.get(w)
                if i is None:
                    continue
                s0 = self.aliases[i].storage
                c = copy_storage.get(s0)
                if c is not None and c in reads and s0 not in reads:
                    a = self.aliases[i]
                    self.aliases[i] = Alias(a.id, c, a.producer)
                    self.now[w] = c
            self.final_ops[op.id] = op if not rep else replace(op, inputs=ins)

    def copy_writer_edges(self, ops: Sequence[RecomputeOp]) -> list[ControlEdge]:
        """A copy built in place (dropout's mask): its writers in order, its readers after
        the last one."""
        copy_writers: dict[TensorId, list[OpId]] = {}
        for r in ops:
            for c in self.new_ops[r.id].mutates:
                copy_writers.setdefault(c, []).append(OpId(r.id))
        edges: list[ControlEdge] = []
        if not copy_writers:
            return edges
        for ws in copy_writers.values():
            edges.extend(ControlEdge(a, b, EdgeReason.MUTATION) for a, b in itertools.pairwise(ws))
        for op in (*self.final_ops.values(), *self.new_ops.values()):
            for c in {self.storage_now(v) for v in op.inputs} & copy_writers.keys():
                ws = copy_writers[c]
                if op.id not in ws and self.tensors[c].producer != op.id:
                    edges.append(ControlEdge(ws[-1], op.id, EdgeReason.MUTATION))
        return edges


def _reader_rewiring(graph: Graph, ops: Sequence[RecomputeOp],
                     ) -> dict[OpId, dict[ValueId, ValueId]]:
    """Reader -> original value -> the copy it reads instead."""
    rewire: dict[OpId, dict[ValueId, ValueId]] = {}
    for r in ops:
        src = graph.op(r.source)
        for reader in r.readers:
            if reader not in graph.op_ids:
                raise GraphError(f"recompute op {r.id!r}: reader {reader!r} is not a graph op")
            reads = set(graph.op(reader).inputs)
            hit = False
            for v, v0 in zip(r.outputs, src.outputs, strict=True):
                if v0 in reads:
                    rewire.setdefault(reader, {})[v0] = v
                    hit = True
            if not hit:
                raise GraphError(f"recompute op {r.id!r}: reader {reader!r} reads none of "
                                 f"the values of {src.id!r}")
    return rewire


def _rerun_edges(graph: Graph, ops: Sequence[RecomputeOp],
                 copy_of: Mapping[ValueId, ValueId]) -> list[ControlEdge]:
    """Each re-run sees the same version of every original storage it reads (after the
    writers before its source, before those after it); a re-run of a random op replays the
    generator state its source drew at, saved when the source's stream reached it, so it
    runs after the source."""
    edges: list[ControlEdge] = []
    pos0 = {o: i for i, o in enumerate(graph.op_ids)}
    writers: dict[TensorId, list[OpId]] = {}
    for op in graph.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op.id)
    for r in ops:
        src_pos = pos0[r.source]
        for u in r.inputs:
            if u in copy_of:
                continue
            for w in writers.get(graph.storage_of(u), ()):
                if pos0[w] < src_pos:
                    edges.append(ControlEdge(w, OpId(r.id), EdgeReason.MUTATION))
                elif w != r.source:
                    edges.append(ControlEdge(OpId(r.id), w, EdgeReason.MUTATION))
    for r in ops:
        if graph.op(r.source).random:
            edges.append(ControlEdge(r.source, OpId(r.id), EdgeReason.RNG))
    return edges


def _program_order(graph: Graph, rops: Sequence[RecomputeOp], final_ops: Mapping[OpId, Op],
                   new_ops: Mapping[OpId, Op], copy_of: Mapping[ValueId, ValueId]) -> list[Op]:
    """Graph ops in program order, each recompute op just before its first consumer."""
    producer_of_copy = {v: r.id for r in rops for v in r.outputs}
    first_use: dict[str, int] = {}
    pos0 = {o: i for i, o in enumerate(graph.op_ids)}
    for r in rops:
        for reader in r.readers:
            first_use[r.id] = min(first_use.get(r.id, len(pos0)), pos0[reader])
    for r in reversed(rops):  # consumers come later in the list: propagate backwards
        for u in r.inputs:
            if u in producer_of_copy:
                p = producer_of_copy[u]
                first_use[p] = min(first_use.get(p, len(pos0)),
                                   first_use.get(r.id, len(pos0)))
    before: dict[int, list[OpId]] = {}
    for r in rops:  # list order keeps inputs first within one slot
        before.setdefault(first_use.get(r.id, len(pos0)), []).append(OpId(r.id))
    out: list[Op] = []
    for i, o in enumerate(graph.op_ids):
        out.extend(new_ops[x] for x in before.get(i, ()))
        out.append(final_ops[o])
    out.extend(new_ops[x] for x in before.get(len(pos0), ()))
    return out
