"""FX training-step graph -> :class:`~roam_core.model.graph.Graph` (storages, aliases, edges).

Used by :func:`roam_core.trace.trace_fx`.  Storages come from fake storage identity
(``StorageWeakRef(val.untyped_storage())``): the first value in a storage allocates it, later
values in it are aliases.  ``getitem`` nodes of multi-output ops are folded into the op (the
element value takes the getitem's name, or ``"<op>.<i>"`` when nothing extracts it).
In-place writes come from the op schemas (``alias_info.is_write``) plus the batch-norm ops
that update running statistics without saying so.  See :func:`build_graph`.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from roam_core.base.errors import TraceError
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
)
from roam_core.model.parallel import is_collective, is_wait

__all__ = ["ValueRef", "build_graph", "is_random"]

_logger = logging.getLogger(__name__)
_getitem = operator.getitem


@dataclass(frozen=True, slots=True)
class ValueRef:
    """Where a graph value lives in the FX graph.

    Parameters
    ----------
    op : str
        The FX node that computes it (the graph op id, or the placeholder name).
    index : int or None
        Position in that node's output tuple/list, ``None`` for a single output.
    fx_node : str or None
        The FX node whose runtime value *is* this value (the op itself, or the ``getitem``
        node that extracts it); ``None`` when no node extracts an unused element.
    """

    op: str
    index: int | None
    fx_node: str | None


@dataclass(frozen=True, slots=True)
class _TargetInfo:
    """What the graph build needs of one FX call target, derived once per target.

    ``written``: schema positions written in place (``alias_info.is_write``; the batch-norm
    ops' running statistics 3, 4 are added per node, when ``training``); ``dropout_p`` /
    ``generator``: schema positions of those arguments; ``flop``: torch's FLOP formula;
    ``collective``: a collective or its wait (never re-run); ``wait``: a wait, whose result
    is its input (fake tensors give it a storage of its own, which it does not have).
    """

    name: str
    overload: bool
    seeded: bool
    replayable: bool
    schema_args: Any = ()
    collective: bool = False
    wait: bool = False
    written: tuple[int, ...] = ()
    batch_norm_stats: bool = False
    dropout_p: int | None = None
    generator: int | None = None
    flop: Any = None


def _target_info(target: Any) -> _TargetInfo:
    if not isinstance(target, torch._ops.OpOverload):
        return _TargetInfo(_target_name(target), False, False, False)
    tags = target.tags
    schema_args = target._schema.arguments
    written = tuple(i for i, a in enumerate(schema_args)
                    if a.alias_info is not None and a.alias_info.is_write)
    names = [a.name for a in schema_args]
    name = _target_name(target)
    return _TargetInfo(
        name, True, torch.Tag.nondeterministic_seeded in tags,
        torch.Tag.nondeterministic_bitwise not in tags, schema_args,
        is_collective(name) or is_wait(name), is_wait(name), written,
        target.name() in _BATCH_NORM_STATS,
        names.index("dropout_p") if "dropout_p" in names else None,
        len(names) - 1 - names[::-1].index("generator") if "generator" in names else None,
        _flop_formula(target))


class _PendingOp:
    """An op while the graph is built (mutable: the module is set at the end)."""

    __slots__ = ("bytes_read", "bytes_written", "flops", "id", "inputs", "module", "mutates",
                 "outputs", "phase", "random", "recomputable", "source", "target")

    def __init__(self, id: str, target: str, phase: Phase, inputs: tuple[str, ...],
                 outputs: tuple[str, ...], mutates: tuple[TensorId, ...], random: bool,
                 flops: int, bytes_read: int, bytes_written: int,
                 recomputable: bool | None) -> None:
        self.id, self.target, self.phase = id, target, phase
        self.inputs, self.outputs, self.mutates, self.random = inputs, outputs, mutates, random
        self.module = ""
        self.source = ""
        self.flops, self.bytes_read, self.bytes_written = flops, bytes_read, bytes_written
        self.recomputable = recomputable

    def op(self) -> Op:
        return Op(OpId(self.id), self.target, self.phase, self.inputs, self.outputs,
                  self.mutates, self.random, self.module, self.flops, self.bytes_read,
                  self.bytes_written, self.recomputable, source=self.source)


class _Builder:
    """Turns the FX graph into storages, aliases, ops and control edges."""

    def __init__(self, resident_kind: Mapping[str, TensorKind]) -> None:
        self.resident_kind = resident_kind
        self.sref: dict[Any, str] = {}
        self.tensors: dict[str, list[Any]] = {}  # id -> [size, dtype, shape, producer]
        self.aliases: list[Alias] = []
        self.storage_of: dict[str, str] = {}
        self.values: dict[str, ValueRef] = {}
        self.node_values: dict[str, tuple[str, ...]] = {}
        self.ops: list[_PendingOp] = []
        self.info: dict[Any, _TargetInfo] = {}
        self.dtype_names: dict[Any, str] = {}
        self.nbytes: dict[Any, int] = {}  # FX node -> bytes of its (tensor) value

    def value(self, vid: str, val: Any, producer: str | None, ref: ValueRef,
              used: bool = False) -> str | None:
        """Register a value; returns its id, or ``None`` for an unused non-tensor value.

        A non-tensor value (a Python scalar, or a value make_fx did not record) that later
        nodes read becomes a 0-byte ``"scalar"`` storage so that the data edge exists.
        """
        if isinstance(val, torch.Tensor):
            storage = val.untyped_storage()
            key = StorageWeakRef(storage)
            sid = self.sref.get(key)
            if sid is None:
                self.sref[key] = vid
                dtype = self.dtype_names.get(val.dtype)
                if dtype is None:
                    dtype = self.dtype_names[val.dtype] = str(val.dtype).removeprefix("torch.")
                self.tensors[vid] = [int(storage.nbytes()), dtype, tuple(map(int, val.shape)),
                                     producer]
                self.storage_of[vid] = vid
            else:
                self.aliases.append(Alias(vid, TensorId(sid), OpId(producer) if producer else
                                          None))
                self.storage_of[vid] = sid
        elif used or isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat)):
            self.tensors[vid] = [0, "scalar", (), producer]
            self.storage_of[vid] = vid
        else:
            return None
        self.values[vid] = ref
        return vid

    def node_nbytes(self, node: Any) -> int:
        """Bytes of the tensor value of ``node`` (0 for a non-tensor value)."""
        n = self.nbytes.get(node)
        if n is None:
            n = self.nbytes[node] = _nbytes(node.meta.get("val"))
        return n

    def add_node(self, node: Any, phase: Phase) -> None:
        val = node.meta.get("val")
        outs: list[str] = []
        name = node.name
        target = node.target
        info = self.info.get(target)
        if info is None:
            info = self.info[target] = _target_info(target)
        if info.wait and isinstance(val, torch.Tensor) and node.all_input_nodes:
            waited = self.node_values.get(node.all_input_nodes[0].name, ())
            if waited:  # the result is the waited tensor: an alias of its storage
                self.sref.setdefault(StorageWeakRef(val.untyped_storage()),
                                     self.storage_of[waited[0]])
        if isinstance(val, (tuple, list)):
            getitems = {u.args[1]: u for u in node.users if u.target is _getitem}
            for i, v in enumerate(val):
                g = getitems.get(i)
                vid = g.name if g is not None else f"{name}.{i}"
                got = self.value(vid, v, name,
                                 ValueRef(name, i, g.name if g is not None else None))
                if got is not None:
                    outs.append(got)
                if g is not None:
                    self.node_values[g.name] = (got,) if got is not None else ()
        elif node.users or val is not None:
            got = self.value(name, val, name, ValueRef(name, None, name),
                             used=bool(node.users))
            if got is not None:
                outs.append(got)
        self.node_values[name] = tuple(outs)
        inputs: dict[str, None] = {}
        node_values = self.node_values
        for a in node.all_input_nodes:
            for v in node_values.get(a.name, ()):
                inputs[v] = None
        mutates = _mutated_storages(node, info, self)
        random = _random(node, info)
        flops, read, wrote = _costs(node, val, info, outs, mutates, self)
        # None: the structural rule (roam_core.model.recompute_ops) decides; False: the executor
        # could not replay the op (not an ATen overload) or it is not bit-reproducible;
        # True (random ops): the RNG timeline records its draw, a re-run replays it
        rec: bool | None = None if info.replayable else False
        if random and info.replayable:
            rec = _draw_replayable(node, info)
        if info.collective:  # a re-run would add a collective on every rank
            rec = False
        self.ops.append(_PendingOp(name, info.name, phase, tuple(inputs), tuple(outs),
                                   tuple(mutates), bool(random), flops, read, wrote, rec))


def _nbytes(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return int(v.numel()) * v.element_size()
    return 0


def _flop_formula(target: Any) -> Any:
    """torch's registered FLOP formula for an ATen overload (``None`` when it has none).

    The CPU flash-attention kernels have no entry in torch's table (torch 2.13); they take
    the formula of the CUDA flash kernels, whose leading arguments (query, key, value; and
    grad_out first for the backward) are the same.
    """
    from torch.utils.flop_counter import flop_registry

    packet = target.overloadpacket
    f = flop_registry.get(packet)
    if f is None:
        alias = _FLOP_ALIASES.get(str(packet))
        if alias is not None:
            f = flop_registry.get(getattr(torch.ops.aten, alias))
    return f


_FLOP_ALIASES = {
    "aten._scaled_dot_product_flash_attention_for_cpu": "_scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward":
        "_scaled_dot_product_flash_attention_backward",
}


def _fake(n: Any) -> Any:
    return n.meta.get("val")


def _costs(node: Any, val: Any, info: _TargetInfo, outs: Sequence[str],
           mutates: Sequence[TensorId], b: _Builder) -> tuple[int, int, int]:
    """``(flops, bytes read, bytes written)`` of one node, from its fake values.

    FLOPs use torch's own formulas (``torch.utils.flop_counter.flop_registry``, the table
    behind ``FlopCounterMode``) on the traced shapes; ops without a formula count 0, as in
    ``FlopCounterMode``.  Bytes are the sizes of the tensor values read and of the new or
    written ones; a pure view (no new storage, no write) moves 0 bytes.
    """
    flops = 0
    f = info.flop
    if f is not None:
        try:
            args = torch.fx.node.map_arg(node.args, _fake)
            kwargs = torch.fx.node.map_arg(node.kwargs, _fake)
            flops = int(f(*args, **kwargs, out_val=val))
        except Exception as e:  # a formula that cannot read these args: count 0
            _logger.debug("no FLOP count for %s (%s): %s", node.name, node.target, e)
    if not mutates:
        storage_of = b.storage_of
        if not any(storage_of.get(v) == v for v in outs):
            return flops, 0, 0
    read = sum(b.node_nbytes(a) for a in node.all_input_nodes)
    if isinstance(val, (tuple, list)):
        wrote = sum(_nbytes(x) for x in val)
    else:
        wrote = b.node_nbytes(node)
    return flops, read, wrote


def _draw_replayable(node: Any, info: _TargetInfo) -> bool:
    """Whether a re-run of the random op ``node`` draws the forward's numbers when the
    device's default generator is set back to the state the op drew at (what
    :mod:`roam_core.runtime.rng` does): it draws from the default CPU or CUDA generator (no
    explicit ``generator=`` argument, whose state the timeline does not follow)."""
    gen = node.kwargs.get("generator")
    if gen is None and info.generator is not None:
        gen = _arg(node, info.schema_args, info.generator)
    if gen is not None:
        return False
    from torch.utils._pytree import tree_leaves

    devs = {v.device.type for v in tree_leaves(node.meta.get("val"))
            if isinstance(v, torch.Tensor)}
    return bool(devs) and devs <= {"cpu", "cuda", "meta"}


def _random(node: Any, info: _TargetInfo) -> bool:
    """:func:`is_random` from a target's cached :class:`_TargetInfo`."""
    if not info.seeded:
        return False
    if info.dropout_p is not None:
        return _arg(node, info.schema_args, info.dropout_p) not in (0, 0.0)
    return True


def is_random(node: Any) -> bool:
    """Seeded-random op; attention kernels count only when their ``dropout_p`` is non-zero."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or (
            torch.Tag.nondeterministic_seeded not in target.tags):
        return False
    schema_args = target._schema.arguments
    for i, a in enumerate(schema_args):
        if a.name == "dropout_p":
            return _arg(node, schema_args, i) not in (0, 0.0)
    return True


def _target_name(target: Any) -> str:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return getattr(target, "__qualname__", None) or str(target)


def _mutated_storages(node: Any, info: _TargetInfo, b: _Builder) -> list[TensorId]:
    if not info.overload:
        return []
    schema_args = info.schema_args
    written = list(info.written)
    if info.batch_norm_stats and _arg(node, schema_args, 5):
        written += [3, 4]  # running_mean / running_var: updated in place, not in the schema
    if not written:
        return []
    out: dict[TensorId, None] = {}
    for i in written:
        passed = _arg(node, schema_args, i)
        nodes: list[Any] = []
        torch.fx.node.map_arg(passed, nodes.append)
        for n in nodes:
            for v in b.node_values.get(n.name, ()):
                out[TensorId(b.storage_of[v])] = None
    return list(out)


#: Ops that update their running statistics (args 3, 4) in place when ``training`` (arg 5)
#: is true, although their schemas carry no write annotation.
_BATCH_NORM_STATS = frozenset({"aten::native_batch_norm", "aten::cudnn_batch_norm",
                               "aten::miopen_batch_norm"})


def _arg(node: Any, schema_args: Any, i: int) -> Any:
    if i < len(node.args):
        return node.args[i]
    return node.kwargs.get(schema_args[i].name, schema_args[i].default_value)


def build_graph(
    gm: Any,
    phases: Mapping[str, Phase],
    resident_kind: Mapping[str, TensorKind],
    grads: Sequence[torch.Tensor],
    state: Sequence[torch.Tensor],
    *,
    name: str,
    origin: Mapping[str, Any],
    modules: Mapping[str, str] | None = None,
    sources: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
    named: Sequence[tuple[str, torch.Tensor]] = (),
    extra_inputs: Mapping[str, Sequence[str]] | None = None,
    communication: Sequence[torch.Tensor] = (),
) -> tuple[Graph, dict[str, ValueRef], str]:
    """Build the memory graph of a traced step.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced step (every node with a fake ``meta["val"]``); it returns the loss first
        (a clipping step also returns its gradient norm; every returned storage is an
        ``output``, live to the end of the step).
    phases : Mapping of str to Phase
        FX node name -> phase (missing names are ``OTHER``); the op producing the loss is
        always ``LOSS``.
    resident_kind : Mapping of str to TensorKind
        Kind of each placeholder / ``get_attr`` storage.
    grads, state : sequence of Tensor
        The parameters' ``.grad`` tensors and the optimizer state seen during tracing
        (their storages become ``gradient`` / ``optimizer_state``).
    name, origin
        Stored on the graph.
    modules : Mapping of str to str, optional
        FX node name -> module path (``Op.module``); optimizer-phase ops are attributed to
        the module of the parameter whose storages they touch instead.
    sources : Mapping of str to str, optional
        FX node name -> ``"path:line in function"`` of the user code that made it
        (``Op.source``; :mod:`roam_core.trace.sources`).
    names : Mapping of str to str, optional
        Placeholder node name -> ``Tensor.name`` (parameters, buffers, resident state).
    named : sequence of (str, Tensor)
        ``Tensor.name`` of the storages of gradients and optimizer state seen in the step
        (the first name of a storage wins).
    extra_inputs : Mapping of str to sequence of str, optional
        FX node name -> value ids the op also reads although no FX argument passes them:
        a grad scaler's update ops read its ``found_inf`` flag (they run only when it is
        zero), which orders them after the inf check and keeps the flag live until then.
    communication : sequence of Tensor
        Values in the storages a data-parallel step stages its collectives in (gathered
        parameters, all-gather, reduce-scatter and bucket buffers): kind ``communication``
        unless they hold gradients.

    Returns
    -------
    (Graph, dict of str to ValueRef, str)
        The graph, the value map, and the loss value id.

    Raises
    ------
    TraceError
        Naming the FX node that could not be converted.
    """
    b = _Builder(resident_kind)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    returned: list[Any] = []
    torch.fx.node.map_arg(out_node.args[0], returned.append)
    loss_node = returned[0]  # the loss; a clipping step also returns its gradient norm
    loss_producer = loss_node.args[0] if loss_node.target is _getitem else loss_node
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            vid = b.value(node.name, node.meta.get("val"), None,
                          ValueRef(node.name, None, node.name))
            b.node_values[node.name] = (vid,) if vid is not None else ()
            continue
        if node.op == "output" or (node.target is _getitem and node.name in b.node_values):
            continue
        try:
            phase = Phase.LOSS if node is loss_producer else phases.get(node.name, Phase.OTHER)
            b.add_node(node, phase)
        except Exception as e:
            raise TraceError(f"op {node.name} ({node.target}): {type(e).__name__}: {e}") from e
    for op in b.ops:
        more = [v for v in (extra_inputs or {}).get(op.id, ()) if v not in op.inputs]
        if more:
            op.inputs = op.inputs + tuple(more)
    loss_value = b.node_values[loss_node.name][0]
    out_sids = list(dict.fromkeys(b.storage_of[b.node_values[n.name][0]] for n in returned))
    kinds = _kinds(b, grads, state, set(out_sids), communication)
    storage_names = _storage_names(b, names or {}, named)
    if modules:
        _set_modules(b, modules, storage_names)
    for op in b.ops:
        op.source = (sources or {}).get(op.id, "")
    tensors = [Tensor(TensorId(sid), f[0], f[1], f[2], kinds[sid],
                      OpId(f[3]) if f[3] else None, name=storage_names.get(sid))
               for sid, f in b.tensors.items()]
    edges = _control_edges(b)
    graph = Graph.build([p.op() for p in b.ops], tensors, b.aliases, edges,
                        outputs=[TensorId(s) for s in out_sids], name=name, origin=origin)
    return graph, b.values, loss_value


def _storage_names(b: _Builder, names: Mapping[str, str],
                   named: Sequence[tuple[str, torch.Tensor]]) -> dict[str, str]:
    out = {sid: names[sid] for sid in b.tensors if sid in names}
    for qualified, t in named:
        sid = b.sref.get(StorageWeakRef(t.untyped_storage()))
        if sid is not None:
            out.setdefault(sid, qualified)
    return out


def _param_of(name: str) -> str:
    """The parameter a storage name belongs to: ``fc.weight.exp_avg`` -> ``fc.weight``."""
    return name.rpartition(".")[0] if "." in name else name


def _set_modules(b: _Builder, modules: Mapping[str, str],
                 storage_names: Mapping[str, str]) -> None:
    """Set every op's ``module``; optimizer ops take their parameter's module.

    An optimizer op touching a parameter's storage (the parameter, its gradient or its
    state, named ``<param>[.grad|.<state>]``) belongs to the module owning that parameter;
    one touching none takes the module of its inputs' producers (temporaries of the update).
    """
    owner: dict[str, str] = {}  # storage -> module, for optimizer-phase storages
    for sid, n in storage_names.items():
        own = b.resident_kind.get(sid) in (TensorKind.PARAMETER, TensorKind.BUFFER)
        param = n if own else _param_of(n)
        owner[sid] = param.rpartition(".")[0]
    op_module: dict[str, str] = {}
    for op in b.ops:
        mod = modules.get(op.id, "")
        if op.phase is Phase.OPTIMIZER:
            touched = ([b.storage_of[v] for v in op.inputs] + list(op.mutates)
                       + [b.storage_of[v] for v in op.outputs])
            found = next((owner[s] for s in touched if s in owner), None)
            if found is None:
                found = next((op_module[b.values[v].op] for v in op.inputs
                              if b.values[v].op in op_module), "")
            mod = found
            for v in op.outputs:
                owner.setdefault(b.storage_of[v], mod)
        op_module[op.id] = mod
        op.module = mod


def _kinds(b: _Builder, grads: Sequence[torch.Tensor], state: Sequence[torch.Tensor],
           output_sids: set[str], communication: Sequence[torch.Tensor] = ()
           ) -> dict[str, TensorKind]:
    def sids(ts: Sequence[torch.Tensor]) -> set[str]:
        found = (b.sref.get(StorageWeakRef(t.untyped_storage())) for t in ts)
        return {s for s in found if s is not None}

    grad_s, state_s, comm_s = sids(grads), sids(state), sids(communication)
    phase_of = {op.id: op.phase for op in b.ops}
    read_in_bwd: set[str] = set()
    for op in b.ops:
        if op.phase is Phase.BACKWARD:
            read_in_bwd.update(b.storage_of[v] for v in op.inputs)
    kinds: dict[str, TensorKind] = {}
    for sid, (_, _, _, producer) in b.tensors.items():
        if producer is None:
            kinds[sid] = b.resident_kind.get(sid, TensorKind.INPUT)
        elif sid in output_sids:
            kinds[sid] = TensorKind.OUTPUT
        elif sid in grad_s:
            kinds[sid] = TensorKind.GRADIENT
        elif sid in state_s:
            kinds[sid] = TensorKind.OPTIMIZER_STATE
        elif sid in comm_s:
            kinds[sid] = TensorKind.COMMUNICATION
        elif phase_of[producer] in (Phase.FORWARD, Phase.LOSS) and sid in read_in_bwd:
            kinds[sid] = TensorKind.ACTIVATION
        else:
            kinds[sid] = TensorKind.TEMPORARY
    return kinds


def _control_edges(b: _Builder) -> list[ControlEdge]:
    """MUTATION edges around every in-place write, the RNG chain and the collective chain."""
    data_preds: dict[str, set[str]] = {}
    accesses: dict[str, list[tuple[str, bool]]] = {}
    mutated: dict[str, None] = {}  # program order: the edges come out in a fixed order
    for op in b.ops:
        preds = {b.values[v].op for v in op.inputs}
        data_preds[op.id] = preds
        touched: dict[str, None] = {b.storage_of[v]: None for v in op.inputs}
        touched.update(dict.fromkeys(op.mutates))
        for s in touched:
            if b.tensors[s][3] != op.id:
                accesses.setdefault(s, []).append((op.id, s in op.mutates))
        mutated.update(dict.fromkeys(op.mutates))
    edges: dict[tuple[str, str], EdgeReason] = {}

    def add(src: str, dst: str, reason: EdgeReason) -> None:
        if src != dst and src not in data_preds[dst] and (src, dst) not in edges:
            edges[(src, dst)] = reason

    for s in mutated:
        last_write: str | None = None
        reads: list[str] = []
        for op_id, is_write in accesses.get(s, ()):
            if is_write:
                for r in reads:
                    add(r, op_id, EdgeReason.MUTATION)
                if last_write is not None and not reads:
                    add(last_write, op_id, EdgeReason.MUTATION)
                last_write, reads = op_id, []
            else:
                if last_write is not None:
                    add(last_write, op_id, EdgeReason.MUTATION)
                reads.append(op_id)
    prev: str | None = None
    for op in b.ops:
        if op.random:
            if prev is not None:
                add(prev, op.id, EdgeReason.RNG)
            prev = op.id
    prev = None
    for op in b.ops:  # every rank issues its collectives in this order
        if is_collective(op.target):
            if prev is not None:
                add(prev, op.id, EdgeReason.COLLECTIVE)
            prev = op.id
    return [ControlEdge(OpId(s), OpId(d), r) for (s, d), r in edges.items()]
