"""The training-step graph: operators, storages, aliases and ordering constraints.

A :class:`Graph` is one full training step (forward, loss, backward, optimizer update) as a
DAG of operators.  Memory is accounted per **storage** (:class:`Tensor`): a block of bytes
that an op allocates.  Views and in-place results are :class:`Alias` values: they name an
existing storage and add no bytes.  Ops read and write *values* (a storage id or an alias
id); every value resolves to exactly one storage.

Ordering constraints
--------------------
An order of the ops is valid when it honours

1. data edges: an op runs after the producer of every value it reads;
2. :class:`ControlEdge` records: write-after-read / read-after-write / write-after-write
   hazards of in-place mutations (``reason=MUTATION``), the fixed relative order of
   random ops (``reason=RNG``) and of collectives (``reason=COLLECTIVE``: every rank of a
   data-parallel step issues them in the same order).

With both honoured, any reordering is a correct program (every read sees the same write
version as in program order, and random ops draw from the RNG stream in the same order).

Lifetimes
---------
For an order, a storage produced by the op at step ``s`` and last used (read, written, or
read through an alias) at step ``e`` is live on the half-open step interval ``[s, e + 1)``.
Storages without a producer are *resident* (parameters, buffers, the batch, optimizer state
created before the step): they are live for the whole step.  Storages listed in
``Graph.outputs`` stay live until the end of the step.
"""

from __future__ import annotations

import enum
import hashlib
import json
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NewType

from roam_core.base.errors import GraphError
from roam_core.model.frozen import FrozenDict, freeze

__all__ = [
    "Alias",
    "ControlEdge",
    "EdgeReason",
    "Graph",
    "Op",
    "OpId",
    "Order",
    "Phase",
    "Tensor",
    "TensorId",
    "TensorKind",
    "ValueId",
    "round_size",
]

OpId = NewType("OpId", str)
TensorId = NewType("TensorId", str)
ValueId = str  # a TensorId or the id of an Alias
Order = tuple[OpId, ...]

#: The CUDA caching allocator rounds every block up to a multiple of 512 bytes.
DEFAULT_ALIGNMENT_BYTES = 512


class Phase(enum.StrEnum):
    """Which part of the training step an op belongs to (from tracing context)."""

    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    OTHER = "other"


class TensorKind(enum.StrEnum):
    """What a storage holds."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    INPUT = "input"
    ACTIVATION = "activation"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer_state"
    TEMPORARY = "temporary"
    OUTPUT = "output"
    #: data-parallel staging: gathered (unsharded) parameters, all-gather and reduce-scatter
    #: buffers, gradient buckets (``docs/parallel.md``)
    COMMUNICATION = "communication"


class EdgeReason(enum.StrEnum):
    """Why one op must run before another."""

    DATA = "data"  # the later op reads a value the earlier op produced
    MUTATION = "mutation"  # in-place write ordered against reads/writes of its storage
    RNG = "rng"  # random ops keep their relative order (same RNG stream)
    WEIGHT_UPDATE = "weight_update"  # planner rewrite: update placement rule
    COLLECTIVE = "collective"  # collectives keep their relative order (same on every rank)


@dataclass(frozen=True, slots=True)
class Tensor:
    """A storage: one allocation of ``size_bytes`` bytes.

    Parameters
    ----------
    id : TensorId
        Stable id (the FX node name of the value that first produced the storage).
    size_bytes : int
        Bytes of the storage (not rounded; ``round_size`` applies the allocator rounding).
    dtype : str
        Element type, e.g. ``"float32"``; ``"scalar"`` for a non-tensor value (0 bytes).
    shape : tuple of int
        Shape of the value that created the storage.
    kind : TensorKind
        What the storage holds.
    producer : OpId or None
        The op that allocates it; ``None`` for resident storages.
    consumers : tuple of OpId
        Ops (other than the producer) that read or write the storage, directly or through
        an alias, in program order.
    name : str or None
        The user-facing name of what the storage holds, where one applies: a parameter or
        buffer's qualified name (a key of ``model.named_parameters()`` /
        ``named_buffers()``, e.g. ``"transformer.h.3.attn.c_attn.weight"``), its gradient
        (``"...weight.grad"``), its optimizer state (``"...weight.exp_avg"``) or an example
        input (``"inputs[0]"``); ``None`` for activations and temporaries.  Not part of
        the fingerprint.
    """

    id: TensorId
    size_bytes: int
    dtype: str
    shape: tuple[int, ...]
    kind: TensorKind
    producer: OpId | None
    consumers: tuple[OpId, ...] = ()
    name: str | None = None

    @property
    def resident(self) -> bool:
        """True when the storage exists before the step starts (no producer)."""
        return self.producer is None


@dataclass(frozen=True, slots=True)
class Alias:
    """A value that shares an existing storage (a view or the result of an in-place op).

    Parameters
    ----------
    id : str
        Stable id of the value (FX node name, or ``name.i`` for list elements).
    storage : TensorId
        The storage it shares.
    producer : OpId or None
        The op that produced the value; ``None`` for a resident alias.
    """

    id: str
    storage: TensorId
    producer: OpId | None


@dataclass(frozen=True, slots=True)
class Op:
    """One operator.

    Parameters
    ----------
    id : OpId
        Stable id (FX node name).
    target : str
        The ATen overload, e.g. ``"aten.mm.default"``.
    phase : Phase
        Forward, loss, backward, optimizer or other.
    inputs : tuple of ValueId
        Values read (storage or alias ids), without duplicates.
    outputs : tuple of ValueId
        Values produced: new storages this op allocates and aliases it returns.
    mutates : tuple of TensorId
        Storages written in place.
    random : bool
        True when the op draws from the RNG stream (dropout, bernoulli, ...).
    module : str
        Qualified path of the ``nn.Module`` the op ran in (``"transformer.h.3.attn"``;
        ``""`` at the top level).  Backward ops carry their forward op's module and
        optimizer ops their parameter's module.  Not part of the fingerprint.
    source : str
        The user-code line that made the op, ``"path:line in function"``
        (``"roam_core/zoo/transformer.py:52 in attend"``; path relative to the folder traced
        from), ``""`` when unknown.  Backward ops carry their forward op's line, optimizer
        ops none.  Not part of the fingerprint.
    flops : int or None
        Floating-point operations of one run, from torch's own FLOP formulas
        (``torch.utils.flop_counter``) on the traced shapes; 0 for ops torch counts as free
        (elementwise, views); ``None`` when not recorded (graphs saved before schema 2).
    bytes_read, bytes_written : int or None
        Bytes of the tensor values the op reads / the new or mutated values it writes
        (views read and write 0); ``None`` when not recorded.
    recomputable : bool or None
        Whether a plan may re-run the op in the backward to rebuild a dropped activation
        (set by the tracer; ``None``: decided from the graph's structure alone, see
        :func:`roam_core.model.recompute_ops.recompute_blocker`; ``False``: never; ``True`` on a
        random op: the tracer recorded its RNG draw, so a re-run replays it exactly -- the
        structural rules still apply).

    Notes
    -----
    The cost fields (``flops``, ``bytes_*``, ``recomputable``) are not part of
    :meth:`Graph.fingerprint`: they do not change which orders and layouts are valid.
    """

    id: OpId
    target: str
    phase: Phase
    inputs: tuple[ValueId, ...] = ()
    outputs: tuple[ValueId, ...] = ()
    mutates: tuple[TensorId, ...] = ()
    random: bool = False
    module: str = ""
    flops: int | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    recomputable: bool | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class ControlEdge:
    """An ordering constraint that is not a data edge: ``src`` runs before ``dst``."""

    src: OpId
    dst: OpId
    reason: EdgeReason


def round_size(size_bytes: int, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> int:
    """Round a size up as an allocator does: 0 stays 0, anything else to a multiple.

    Examples
    --------
    >>> round_size(1), round_size(512), round_size(513), round_size(0)
    (512, 512, 1024, 0)
    """
    if size_bytes <= 0:
        return 0
    a = max(1, alignment_bytes)
    return -(-size_bytes // a) * a


@dataclass(frozen=True)
class Graph:
    """A training-step graph (immutable).

    Parameters
    ----------
    ops : tuple of Op
        All ops, in program (trace) order; that order is the eager baseline.
    tensors : Mapping of TensorId to Tensor
        Every storage.
    aliases : tuple of Alias
        Every alias value.
    control_edges : tuple of ControlEdge
        Ordering constraints beyond data edges.
    outputs : tuple of TensorId
        Storages returned by the step (live until its end).
    name : str
        A label for people.
    origin : Mapping
        How the graph was made: ``{"source": "zoo", "model": ..., ...}`` or
        ``{"source": "custom"}``; used to rebuild the model for execution.

    Notes
    -----
    Construction checks structural invariants (unique ids, every value resolvable, every
    referenced op present, sizes non-negative integers, acyclic) and raises
    :class:`~roam_core.base.errors.GraphError` naming the offending id.  Derived indexes are
    built once and kept private.

    A graph is deeply immutable, so that its cached fingerprint and indices always describe
    it: ``tensors`` is a read-only mapping (:class:`~roam_core.model.frozen.FrozenDict`),
    ``origin`` is frozen all the way down, and every sequence field of the graph, its ops
    and its storages is a tuple (lists given are turned into tuples).
    """

    ops: tuple[Op, ...]
    tensors: Mapping[TensorId, Tensor]
    aliases: tuple[Alias, ...] = ()
    control_edges: tuple[ControlEdge, ...] = ()
    outputs: tuple[TensorId, ...] = ()
    name: str = "graph"
    origin: Mapping[str, Any] = field(default_factory=lambda: {"source": "custom"})

    if TYPE_CHECKING:  # the indices _check_and_index stores (no dataclass fields at run time)
        _ops_by_id: dict[str, Op] = field(init=False)
        _op_ids: tuple[OpId, ...] = field(init=False)
        _storage_of: dict[str, TensorId] = field(init=False)
        _value_producer: dict[str, OpId | None] = field(init=False)
        _preds: dict[str, tuple[OpId, ...]] = field(init=False)
        _succs: dict[str, tuple[OpId, ...]] = field(init=False)
        _data_edges: tuple[tuple[OpId, OpId, EdgeReason], ...] = field(init=False)
        _reads: dict[str, tuple[TensorId, ...]] = field(init=False)
        _creates: dict[str, tuple[TensorId, ...]] = field(init=False)

    def __post_init__(self) -> None:
        _freeze_tables(self)
        _check_and_index(self)

    @classmethod
    def build(
        cls,
        ops: Sequence[Op],
        tensors: Iterable[Tensor],
        aliases: Sequence[Alias] = (),
        control_edges: Sequence[ControlEdge] = (),
        outputs: Sequence[TensorId] = (),
        name: str = "graph",
        origin: Mapping[str, Any] | None = None,
    ) -> Graph:
        """Build a graph, filling every storage's ``consumers`` from the ops.

        Examples
        --------
        >>> from roam_core.model.graph import Graph, Op, Phase, Tensor, TensorKind
        >>> t = lambda i, p: Tensor(i, 100, "float32", (25,), TensorKind.ACTIVATION, p)
        >>> g = Graph.build(
        ...     [Op("a", "aten.relu.default", Phase.FORWARD, (), ("x",)),
        ...      Op("b", "aten.relu.default", Phase.FORWARD, ("x",), ("y",))],
        ...     [t("x", "a"), t("y", "b")])
        >>> g.tensors["x"].consumers, g.predecessors("b")
        (('b',), ('a',))
        """
        tensors = list(tensors)
        storage_of: dict[str, TensorId] = {t.id: t.id for t in tensors}
        storage_of.update({a.id: a.storage for a in aliases})
        producer = {t.id: t.producer for t in tensors}
        found: dict[str, dict[OpId, None]] = {t.id: {} for t in tensors}
        for op in ops:
            touched = [storage_of.get(v) for v in op.inputs] + list(op.mutates)
            for s in touched:
                if s is not None and s in found and producer[s] != op.id:
                    found[s][op.id] = None
        filled: FrozenDict[TensorId, Tensor] = FrozenDict({
            t.id: Tensor(t.id, t.size_bytes, t.dtype, tuple(t.shape), t.kind, t.producer,
                         tuple(found[t.id]), t.name)
            for t in tensors
        })
        if len(filled) != len(tensors):
            seen: set[str] = set()
            for t in tensors:
                if t.id in seen:
                    raise GraphError(f"duplicate tensor id {t.id!r}")
                seen.add(t.id)
        return cls(
            ops=tuple(ops),
            tensors=filled,
            aliases=tuple(aliases),
            control_edges=tuple(control_edges),
            outputs=tuple(outputs),
            name=name,
            origin=dict(origin) if origin is not None else {"source": "custom"},
        )

    # ----------------------------------------------------------------- lookups
    @property
    def op_ids(self) -> Order:
        """Op ids in program order (the eager order)."""
        return self._op_ids

    def op(self, op_id: str) -> Op:
        """The op with id ``op_id``."""
        try:
            return self._ops_by_id[op_id]
        except KeyError:
            raise GraphError(f"unknown op id {op_id!r}") from None

    def storage_of(self, value_id: str) -> TensorId:
        """The storage a value (storage or alias id) resolves to."""
        try:
            return self._storage_of[value_id]
        except KeyError:
            raise GraphError(f"unknown value id {value_id!r}") from None

    def value_producer(self, value_id: str) -> OpId | None:
        """The op producing a value (``None`` for resident values)."""
        return self._value_producer[value_id]

    def predecessors(self, op_id: str) -> tuple[OpId, ...]:
        """Ops that must run before ``op_id`` (data and control edges), deduplicated."""
        return self._preds[op_id]

    def successors(self, op_id: str) -> tuple[OpId, ...]:
        """Ops that must run after ``op_id`` (data and control edges), deduplicated."""
        return self._succs[op_id]

    def edges(self) -> Iterable[tuple[OpId, OpId, EdgeReason]]:
        """Every ordering edge ``(src, dst, reason)``: data edges first, then control."""
        yield from self._data_edges
        for e in self.control_edges:
            yield e.src, e.dst, e.reason

    def storages_read(self, op_id: str) -> tuple[TensorId, ...]:
        """Storages an op reads or writes (through any value), deduplicated."""
        return self._reads[op_id]

    def storages_created(self, op_id: str) -> tuple[TensorId, ...]:
        """Storages an op allocates."""
        return self._creates[op_id]

    def storages_touched(self, op_ids: Iterable[str]) -> tuple[TensorId, ...]:
        """Storages that any of ``op_ids`` allocates, reads or writes, deduplicated, in
        first-touch order (each op's created storages before the ones it reads).

        Examples
        --------
        >>> from roam_core.model.samples import diamond
        >>> diamond().storages_touched(["b", "c"])
        ('b', 'a', 'c')
        """
        touched: dict[TensorId, None] = {}
        for op in op_ids:
            touched.update(dict.fromkeys(self._creates[op]))
            touched.update(dict.fromkeys(self._reads[op]))
        return tuple(touched)

    def state_creation_ops(self) -> tuple[OpId, ...]:
        """Optimizer-phase ops that allocate storage but read no planned storage (optimizer
        state created in the step: ``zeros_like(param)``, a fresh step counter), in program
        order.

        Examples
        --------
        >>> from roam_core.model.samples import tiny_train_step
        >>> tiny_train_step().state_creation_ops()
        ()
        """
        cached: tuple[OpId, ...] | None = self.__dict__.get("_state_creation")
        if cached is not None:
            return cached
        out = []
        for op in self.ops:
            if op.phase is not Phase.OPTIMIZER:
                continue
            created = self.storages_created(op.id)
            if not any(self.tensors[t].size_bytes for t in created):
                continue
            if all(self.tensors[s].producer is None for s in self.storages_read(op.id)
                   if s not in created):
                out.append(op.id)
        # graphs are immutable: computed once (update groups ask for it once per group)
        found = tuple(out)
        _set(self, "_state_creation", found)
        return found

    @property
    def resident_ids(self) -> tuple[TensorId, ...]:
        """Storages live for the whole step (no producer)."""
        return tuple(t.id for t in self.tensors.values() if t.producer is None)

    def resident_bytes(self, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> int:
        """Rounded bytes of all resident storages."""
        return sum(
            round_size(t.size_bytes, alignment_bytes)
            for t in self.tensors.values()
            if t.producer is None
        )

    def fingerprint(self) -> str:
        """SHA-256 of the graph's structure (ops, values, sizes, edges).

        Labels for people are left out: the graph ``name``, op ``module`` paths and
        ``source`` lines and tensor ``name`` fields.  Two graphs with the same fingerprint
        accept the same plans.
        """
        fp: str | None = self.__dict__.get("_fingerprint")
        if fp is None:  # computed on first use: a rewritten copy is rarely asked for its own
            fp = _fingerprint(self)
            _set(self, "_fingerprint", fp)
        return fp

    def with_control_edges(self, extra: Sequence[ControlEdge]) -> Graph:
        """A copy with more control edges (raises ``GraphError`` if that makes a cycle).

        Only the edge checks and indices are redone (the ops, values and sizes were checked
        when this graph was built): the copy equals, indices and errors included, the
        ``Graph`` built from scratch with the longer ``control_edges``.
        """
        extra = tuple(extra)
        _forget_dead_copies()
        g = object.__new__(Graph)
        for name, value in (("ops", self.ops), ("tensors", self.tensors),
                            ("aliases", self.aliases),
                            ("control_edges", self.control_edges + extra),
                            ("outputs", self.outputs), ("name", self.name),
                            ("origin", self.origin)):
            _set(g, name, value)
        ops_by_id = self._ops_by_id
        # only the ops the new edges touch get new neighbour tuples (the others are shared)
        more_preds: dict[str, dict[str, None]] = {}
        more_succs: dict[str, dict[str, None]] = {}
        _add_control_edges(extra, ops_by_id, more_preds, more_succs, grow=True)
        preds = _extended(self._preds, more_preds)
        succs = _extended(self._succs, more_succs)
        _check_acyclic(g, preds, succs)
        for key in ("_ops_by_id", "_op_ids", "_storage_of", "_value_producer", "_data_edges",
                    "_reads", "_creates"):
            _set(g, key, self.__dict__[key])
        _set(g, "_preds", preds)
        _set(g, "_succs", succs)
        _DERIVED[id(g)] = (weakref.ref(g), weakref.ref(self), extra)
        return g

    def derived_from(self) -> tuple[Graph, tuple[ControlEdge, ...]] | None:
        """The graph this one was copied from by :meth:`with_control_edges`, if still alive.

        Indices of the copy (adjacency, storage arrays, the validator's edge index) can then
        be derived from the original's instead of being built again.  The original is held
        weakly: asking keeps nothing alive, and the graph still pickles.

        Returns
        -------
        tuple of (Graph, tuple of ControlEdge) or None
            ``(original, extra)`` with ``self == original.with_control_edges(extra)``;
            ``None`` for a graph built otherwise, or once the original is gone.

        Examples
        --------
        >>> from roam_core.model.samples import diamond
        >>> g = diamond()
        >>> copy = g.with_control_edges([ControlEdge("b", "c", EdgeReason.RNG)])
        >>> copy.derived_from()[0] is g, len(copy.derived_from()[1]), g.derived_from()
        (True, 1, None)
        """
        hit = _DERIVED.get(id(self))
        if hit is None or hit[0]() is not self:
            return None
        base = hit[1]()
        return None if base is None else (base, hit[2])

    def __len__(self) -> int:
        return len(self.ops)


#: The copies made by :meth:`Graph.with_control_edges`: ``id(copy) -> (copy, original,
#: extra edges)``, held weakly (no graph is kept alive, and graphs still pickle).
_DERIVED: dict[int, tuple[weakref.ref[Graph], weakref.ref[Graph], tuple[ControlEdge, ...]]] = {}


def _forget_dead_copies() -> None:
    for k, (c, _, _) in list(_DERIVED.items()):  # a snapshot: other threads may add copies
        if c() is None:
            _DERIVED.pop(k, None)


# --------------------------------------------------------------------- checks
def _set(g: Graph, name: str, value: object) -> None:
    object.__setattr__(g, name, value)


_OP_SEQUENCES = ("inputs", "outputs", "mutates")


def _freeze_tables(g: Graph) -> None:
    """Step 0: the graph's tables read-only (a mapping given is copied once), its
    sequences tuples, ``origin`` frozen all the way down."""
    for name in ("ops", "aliases", "control_edges", "outputs"):
        v = getattr(g, name)
        if type(v) is not tuple:
            if isinstance(v, str | bytes | Mapping) or not isinstance(v, Iterable):
                raise GraphError(f"Graph field {name!r} must be a sequence, not "
                                 f"{type(v).__name__}")
            _set(g, name, tuple(v))
    for op in g.ops:
        if not isinstance(op, Op):
            raise GraphError(f"Graph ops must be Op records, not {type(op).__name__}")
        for name in _OP_SEQUENCES:
            if type(getattr(op, name)) is not tuple:
                object.__setattr__(op, name, tuple(getattr(op, name)))
    if type(g.tensors) is not FrozenDict:
        if not isinstance(g.tensors, Mapping):
            raise GraphError(f"Graph tensors must be a mapping of id to Tensor, not "
                             f"{type(g.tensors).__name__}")
        _set(g, "tensors", FrozenDict(g.tensors))
    for t in g.tensors.values():
        if not isinstance(t, Tensor):
            raise GraphError(f"Graph tensors must hold Tensor records, not "
                             f"{type(t).__name__}")
        if type(t.shape) is not tuple:
            object.__setattr__(t, "shape", tuple(t.shape))
        if type(t.consumers) is not tuple:
            object.__setattr__(t, "consumers", tuple(t.consumers))
    if not isinstance(g.origin, Mapping):
        raise GraphError(f"Graph origin must be a mapping, not {type(g.origin).__name__}")
    _set(g, "origin", freeze(g.origin if isinstance(g.origin, dict) else dict(g.origin)))


def _check_and_index(g: Graph) -> None:
    """Check ``g`` (raising ``GraphError`` naming the first broken rule) and store its
    indices: op ids, values, op references and edges, consumers, acyclicity."""
    ops_by_id = _index_ops(g)
    storage_of, value_producer = _index_values(g, ops_by_id)
    reads, preds, succs, data_edges = _index_edges(g, ops_by_id, storage_of, value_producer)
    _check_outputs_and_consumers(g, reads)
    _check_acyclic(g, preds, succs)
    creates: dict[str, list[TensorId]] = {op.id: [] for op in g.ops}
    for t in g.tensors.values():
        if t.producer is not None:
            creates[t.producer].append(t.id)
    _set(g, "_ops_by_id", ops_by_id)
    _set(g, "_op_ids", tuple(op.id for op in g.ops))
    _set(g, "_storage_of", storage_of)
    _set(g, "_value_producer", value_producer)
    _set(g, "_preds", {k: tuple(v) for k, v in preds.items()})
    _set(g, "_succs", {k: tuple(v) for k, v in succs.items()})
    _set(g, "_data_edges", tuple(data_edges))
    _set(g, "_reads", reads)
    _set(g, "_creates", {k: tuple(v) for k, v in creates.items()})


def _index_ops(g: Graph) -> dict[str, Op]:
    """Step 1: op ids are unique non-empty strings."""
    ops_by_id: dict[str, Op] = {}
    for op in g.ops:
        if not isinstance(op.id, str) or not op.id:
            raise GraphError(f"op id {op.id!r} is not a non-empty string")
        if op.id in ops_by_id:
            raise GraphError(f"duplicate op id {op.id!r}")
        ops_by_id[op.id] = op
    return ops_by_id


def _index_values(g: Graph, ops_by_id: Mapping[str, Op]
                  ) -> tuple[dict[str, TensorId], dict[str, OpId | None]]:
    """Step 2: storages (ids, sizes, producers, consumers) and aliases; the storage and the
    producer of every value."""
    storage_of: dict[str, TensorId] = {}
    value_producer: dict[str, OpId | None] = {}
    for key, t in g.tensors.items():
        if key != t.id:
            raise GraphError(f"tensor stored under {key!r} has id {t.id!r}")
        if isinstance(t.size_bytes, bool) or not isinstance(t.size_bytes, int):
            raise GraphError(f"tensor {t.id!r}: size_bytes {t.size_bytes!r} is not an integer")
        if t.size_bytes < 0:
            raise GraphError(f"tensor {t.id!r}: negative size_bytes {t.size_bytes}")
        if t.producer is not None and t.producer not in ops_by_id:
            raise GraphError(f"tensor {t.id!r}: producer {t.producer!r} is not an op")
        for c in t.consumers:
            if c not in ops_by_id:
                raise GraphError(f"tensor {t.id!r}: consumer {c!r} is not an op")
        storage_of[t.id] = t.id
        value_producer[t.id] = t.producer
    for a in g.aliases:
        if a.id in storage_of:
            raise GraphError(f"duplicate value id {a.id!r}")
        if a.storage not in g.tensors:
            raise GraphError(f"alias {a.id!r}: storage {a.storage!r} does not exist")
        if a.producer is not None and a.producer not in ops_by_id:
            raise GraphError(f"alias {a.id!r}: producer {a.producer!r} is not an op")
        storage_of[a.id] = a.storage
        value_producer[a.id] = a.producer
    return storage_of, value_producer


def _index_edges(
    g: Graph, ops_by_id: Mapping[str, Op], storage_of: Mapping[str, TensorId],
    value_producer: Mapping[str, OpId | None],
) -> tuple[dict[str, tuple[TensorId, ...]], dict[str, dict[str, None]],
           dict[str, dict[str, None]], list[tuple[OpId, OpId, EdgeReason]]]:
    """Step 3: every op's outputs, inputs and mutations name known values; the storages each
    op touches, and the data and control edges."""
    reads: dict[str, tuple[TensorId, ...]] = {}
    preds: dict[str, dict[str, None]] = {op.id: {} for op in g.ops}
    succs: dict[str, dict[str, None]] = {op.id: {} for op in g.ops}
    data_edges: list[tuple[OpId, OpId, EdgeReason]] = []
    for op in g.ops:
        for v in op.outputs:
            if v not in storage_of:
                raise GraphError(f"op {op.id!r}: output {v!r} is not a known value")
            if value_producer[v] != op.id:
                raise GraphError(f"op {op.id!r}: output {v!r} names another producer")
        seen: dict[TensorId, None] = {}
        for v in op.inputs:
            if v not in storage_of:
                raise GraphError(f"op {op.id!r}: input {v!r} is not a known value")
            seen[storage_of[v]] = None
            p = value_producer[v]
            if p is not None and p != op.id and p not in preds[op.id]:
                preds[op.id][p] = None
                succs[p][op.id] = None
                data_edges.append((p, op.id, EdgeReason.DATA))
        for s in op.mutates:
            if s not in g.tensors:
                raise GraphError(f"op {op.id!r}: mutated storage {s!r} does not exist")
            seen[s] = None
        reads[op.id] = tuple(seen)
    _add_control_edges(g.control_edges, ops_by_id, preds, succs)
    return reads, preds, succs, data_edges


def _add_control_edges(edges: Iterable[ControlEdge], ops_by_id: Mapping[str, Op],
                       preds: dict[str, dict[str, None]], succs: dict[str, dict[str, None]],
                       grow: bool = False) -> None:
    """Step 3b: control edges join known ops and are no self-loops; added to the indices
    (``grow``: to per-op dicts made as needed, holding only the edges added)."""
    for e in edges:
        for end in (e.src, e.dst):
            if end not in ops_by_id:
                raise GraphError(f"control edge {e.src!r}->{e.dst!r}: {end!r} is not an op")
        if e.src == e.dst:
            raise GraphError(f"control edge on op {e.src!r} points to itself")
        if grow:
            preds.setdefault(e.dst, {})[e.src] = None
            succs.setdefault(e.src, {})[e.dst] = None
        else:
            preds[e.dst][e.src] = None
            succs[e.src][e.dst] = None


def _extended(index: Mapping[str, tuple[str, ...]], more: Mapping[str, Mapping[str, None]],
              ) -> dict[str, tuple[str, ...]]:
    """``index`` (op -> neighbours) with ``more`` appended, each op's neighbours once in
    first-seen order (as adding them to a dict of the old ones would)."""
    out = dict(index)
    for k, new in more.items():
        old = out[k]
        have = set(old)
        add = tuple(x for x in new if x not in have)
        if add:
            out[k] = old + add
    return out


def _check_outputs_and_consumers(g: Graph, reads: Mapping[str, tuple[TensorId, ...]]) -> None:
    """Step 4: graph outputs are storages; each storage's consumers are the ops reading it."""
    for o in g.outputs:
        if o not in g.tensors:
            raise GraphError(f"graph output {o!r} is not a storage")
    consumers: dict[TensorId, list[OpId]] = {t: [] for t in g.tensors}
    for op in g.ops:
        for s in reads[op.id]:
            if g.tensors[s].producer != op.id:
                consumers[s].append(op.id)
    for t in g.tensors.values():
        if tuple(consumers[t.id]) != tuple(t.consumers):
            raise GraphError(
                f"tensor {t.id!r}: consumers {list(t.consumers)} disagree with the ops "
                f"that read it {consumers[t.id]}"
            )


def _check_acyclic(g: Graph, preds: Mapping[str, Collection[str]],
                   succs: Mapping[str, Collection[str]]) -> None:
    """Step 5: no cycle (Kahn); the error names an op on one."""
    indeg = {k: len(v) for k, v in preds.items()}
    ready = [k for k, d in indeg.items() if d == 0]
    n_done = 0
    while ready:
        k = ready.pop()
        n_done += 1
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if n_done != len(g.ops):
        # walk backwards among the unresolved ops until one repeats: it lies on a cycle
        left = {k for k, d in indeg.items() if d > 0}
        k = next(iter(k for k in preds if k in left))
        path: dict[str, None] = {}
        while k not in path:
            path[k] = None
            k = next(p for p in preds[k] if p in left)
        raise GraphError(f"graph has a cycle through op {k!r}")


def _fingerprint(g: Graph) -> str:
    body = {
        "ops": [
            [o.id, o.target, o.phase.value, list(o.inputs), list(o.outputs), list(o.mutates),
             o.random]
            for o in g.ops
        ],
        "tensors": sorted(
            [t.id, t.size_bytes, t.dtype, list(t.shape), t.kind.value, t.producer]
            for t in g.tensors.values()
        ),
        "aliases": sorted([a.id, a.storage, a.producer or ""] for a in g.aliases),
        "control": sorted([e.src, e.dst, e.reason.value] for e in g.control_edges),
        "outputs": list(g.outputs),
    }
    blob = json.dumps(body, separators=(",", ":"), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
