"""Replay a traced training step inside one preallocated ``uint8`` arena.

:class:`ArenaRunner` owns the arena and the slots.  :meth:`ArenaRunner.run` compiles the
plan's order into a :class:`~roam_core.runtime.program.Program` (cached per order), runs it
*checked* the first time and through its prepared fast path afterwards (the one-step
verification of ``execute_plan`` and the training loop of ``PlannedStep`` are two modes of
the same program).  Every tensor the plan knows about is at its planned byte offset:

* a new storage is a strided view of the arena,
  ``arena[off:off + nbytes].view(dtype).as_strided(shape, stride, off // esize + so)``, and
  the op writes into it through its ``out=`` overload (``out_variant``);
* factory ops without an ``out=`` overload are special-cased (``fill_``, ``arange(out=)``,
  nothing for ``empty*``);
* every other op that creates a storage runs functionally and its result is copied into the
  slot: a counted **fallback** whose temporary lives outside the arena;
* views, in-place ops and ``getitem`` run unchanged (they add no storage);
* resident storages (parameters, buffers, optimizer state, the batch, tensor constants) get
  arena slots and their real values are copied in before the step; the updated values are
  read back from the slots afterwards.

Checks, each an :class:`~roam_core.base.errors.ExecutorError` naming the op (placement when
the program is built, addresses on checked runs):

* **placement**: a slot lies inside the arena, is aligned to its element size and does not
  overlap a storage that is still live at that step (a corrupted plan is caught before it
  corrupts memory);
* **address**: after every op, every tensor it produced lives at
  ``arena base + planned offset + storage_offset * element size`` with the traced shape and
  stride (catches ``out=`` kernels that reallocate or resize their output);
* **resize**: every slot is its own non-resizable storage of exactly the planned bytes
  (DLPack round-trip), so an ``out=`` kernel that grows its output fails instead of
  writing past the slot; a "was resized" warning that reaches Python is an error too.

Ops whose ``out=`` kernel uses its output as scratch space and resizes it are deny-listed
(``OUT_DENY``: ``mse_loss`` on CPU) and take the fallback path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from roam_core.base.errors import ExecutorError
from roam_core.model.graph import Graph, OpId, TensorId
from roam_core.runtime.program import Program, flat_outputs, storage_key
from roam_core.runtime.rng import RngReplay
from roam_core.trace.precision import AmpGuard
from roam_core.trace.rng import RngTimeline

try:  # private helper (torch >= 2.11 has it); without it every op takes the fallback path
    from torch._library._out_variant import to_out_variant
except ImportError:  # pragma: no cover - depends on the torch build
    to_out_variant = None  # type: ignore[assignment]  # this torch has no out variants

__all__ = [
    "OUT_DENY", "ArenaRunner", "RunStats", "fake_of_value", "flat_outputs", "out_variant",
    "same_strides", "storage_key",
]

_logger = logging.getLogger(__name__)
_aten = torch.ops.aten

#: Ops whose out= kernel resizes (uses ``out`` as scratch): always take the fallback path.
OUT_DENY = frozenset({_aten.mse_loss.default})

_OUT_CACHE: dict[Any, tuple[Any, tuple[str, ...]] | None] = {}


def out_variant(op: Any) -> tuple[Any, tuple[str, ...]] | None:
    """The ``out=`` overload of an ATen op and its output argument names, if usable.

    Parameters
    ----------
    op : torch._ops.OpOverload
        A functional op (``aten.mm.default``).

    Returns
    -------
    tuple or None
        ``(out_overload, names)`` (``names`` such as ``("out",)`` or
        ``("out0", "out1", "out2")``), or ``None`` for in-place/view ops, deny-listed ops and
        ops without an ``out=`` overload.

    Examples
    --------
    >>> import torch
    >>> out_variant(torch.ops.aten.mm.default)[1]
    ('out',)
    >>> out_variant(torch.ops.aten.mse_loss.default) is None
    True
    """
    if op in _OUT_CACHE:
        return _OUT_CACHE[op]
    found = None
    if isinstance(op, torch._ops.OpOverload) and op not in OUT_DENY and _is_functional(op):
        ov = None
        if to_out_variant is not None:
            try:
                ov = to_out_variant(op)
            except RuntimeError:  # not functional (in-place / mutating)
                ov = None
        if ov is None:
            # torch 2.11's helper only finds overloads tagged ``out_variant``, which ATen's
            # own ``.out`` overloads are not: match the schemas ourselves
            ov = _schema_out_overload(op)
        if ov is not None:
            n_base = len(op._schema.arguments)
            names = tuple(a.name for a in ov._schema.arguments[n_base:])
            if len(names) == len(op._schema.returns):
                found = (ov, names)
    _OUT_CACHE[op] = found
    return found


def _is_write(arg: Any) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


def _is_functional(op: Any) -> bool:
    schema = op._schema
    return not schema.name.endswith("_") and not any(_is_write(a) for a in schema.arguments)


def _schema_out_overload(op: Any) -> Any:
    """The overload of ``op``'s packet that is ``op`` plus keyword-only written ``out``
    arguments, one per return, each returned (ATen's ``out=`` convention), if any."""
    schema = op._schema
    plain = [(a.name, str(a.type), repr(a.default_value)) for a in schema.arguments]
    packet = op.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        cs = cand._schema
        outs = [a for a in cs.arguments if _is_write(a)]
        if not outs or len(outs) != len(schema.returns) or not all(a.kwarg_only for a in outs):
            continue
        rest = [(a.name, str(a.type), repr(a.default_value)) for a in cs.arguments
                if not _is_write(a)]
        if rest != plain or [a.name for a in cs.arguments[len(plain):]] != [
                a.name for a in outs]:
            continue
        if len(cs.returns) not in (0, len(outs)):
            continue
        return cand
    return None


def fake_of_value(gm: Any, values: Mapping[str, Any], value_id: str) -> Any:
    """The traced (fake) tensor of a graph value, from the tracer's value map.

    ``values[value_id]`` is a ``ValueRef(op, index, fx_node)``: the FX node computing the
    value and its position in that node's output tuple (``None``: the whole output).
    """
    ref = values[value_id]
    node = _node_by_name(gm)[ref.op]
    val = node.meta.get("val")
    return val if ref.index is None else val[ref.index]


def _node_by_name(gm: Any) -> dict[str, Any]:
    # keyed by the FX graph: a recompute plan's expanded view of a step forwards attribute
    # reads to the step's module, whose cache holds the nodes of the unexpanded graph
    cached = getattr(gm, "_roam_nodes", None)
    if cached is None or cached[0] is not gm.graph:
        cached = (gm.graph, {n.name: n for n in gm.graph.nodes})
        gm._roam_nodes = cached
    return cached[1]


@dataclass(frozen=True, slots=True)
class RunStats:
    """What one planned replay did.

    Parameters
    ----------
    out_variant_ops : int
        Ops that wrote their new storages in place through an ``out=`` overload.
    factory_ops : int
        Factory ops filled in place (``ones_like``, ``arange``, ``empty``...).
    fallback_ops : int
        Ops run functionally whose results were copied into their slots.
    extra_bytes : int
        Peak bytes of fallback temporaries alive at once (outside the arena).
    extra_bytes_total : int
        Sum of all fallback temporaries' bytes.
    fallback_targets : tuple of str
        Distinct ATen targets that took the fallback path.
    checked_values : int
        Tensors whose address was verified.
    """

    out_variant_ops: int
    factory_ops: int
    fallback_ops: int
    extra_bytes: int
    extra_bytes_total: int
    fallback_targets: tuple[str, ...]
    checked_values: int


class ArenaRunner:
    """Interpreter that replays ``gm`` in ``order`` with every storage at its planned offset.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced step; every node's ``meta["val"]`` holds its fake value.
    graph : Graph
        The memory graph of ``gm`` (ids are FX node names).
    values : Mapping
        Tracer value map: graph value id -> ``ValueRef(op, index, fx_node)``.
    offsets : Mapping of TensorId to int
        Byte offset of every storage (resident and planned) in the arena.
    arena_bytes : int
        Arena size.
    device : str or torch.device
        Where the arena lives.
    check_addresses : bool
        Verify every produced tensor's address after each op.
    rng : RngTimeline, optional
        The step's RNG timeline (``TracedStep.rng``): RNG rewinds such as
        ``torch.utils.checkpoint``'s are replayed (:class:`~roam_core.runtime.rng.RngReplay`).
    amp : AmpGuard, optional
        A grad scaler's update ops and inf flag (``TracedStep.amp``): a step whose flag is
        set skips them, as ``GradScaler.step`` does.
    external : Mapping of TensorId to Tensor, optional
        Resident storages that live outside the arena, each given as its bytes (a ``uint8``
        tensor of at least the storage's size): the parameters, buffers and optimizer state
        that the plans of several batch shapes share
        (:class:`~roam_core.runtime.resident_store.ResidentStore`).  Their planned offsets
        are ignored; the rest of the plan keeps its offsets.
    workspace : Tensor, optional
        A ``uint8`` buffer to hold the arena instead of a new one: only the plan's byte range
        ``[low, arena_bytes)`` of the storages not in ``external`` is backed
        (:attr:`window`), so several plans that never run at once can share one buffer.
    """

    def __init__(self, gm: torch.fx.GraphModule, graph: Graph, values: Mapping[str, Any],
                 offsets: Mapping[TensorId, int], arena_bytes: int,
                 device: str | torch.device = "cpu", *, check_addresses: bool = True,
                 rng: RngTimeline | None = None, amp: AmpGuard | None = None,
                 external: Mapping[TensorId, torch.Tensor] | None = None,
                 workspace: torch.Tensor | None = None) -> None:
        self.gm, self.graph = gm, graph
        self.amp = amp
        self.device = torch.device(device)
        self.check_addresses = check_addresses
        self.nodes = _node_by_name(gm)
        self.arena_bytes = int(arena_bytes)
        self.rng = RngReplay(rng if rng is not None else RngTimeline(), self.device)
        # storage key of the fake -> (storage id, offset)
        self.slot: dict[StorageWeakRef, tuple[TensorId, int]] = {}
        self._fakes: list[Any] = []  # keep fakes alive: the weak keys must stay unique
        #: storages on another device than the arena (CPU scalars, meta RNG placeholders of
        #: CUDA attention kernels): they run where their op puts them, unplaced
        self.off_device: list[TensorId] = []
        self.external = dict(external or {})
        low, high = self.arena_bytes, 0
        for tid in graph.tensors:
            if tid not in offsets:
                raise ExecutorError(f"the plan has no offset for storage {tid!r}")
            fake = fake_of_value(gm, values, tid)
            if not isinstance(fake, torch.Tensor):
                continue
            if fake.device.type != self.device.type:
                self.off_device.append(tid)
                continue
            self._fakes.append(fake)
            self.slot[storage_key(fake)] = (tid, int(offsets[tid]))
            nbytes = fake.untyped_storage().nbytes()
            if tid in self.external:
                if self.external[tid].numel() < nbytes:
                    raise ExecutorError(f"storage {tid!r} needs {nbytes} B, its external "
                                        f"slot has {self.external[tid].numel()} B")
            elif nbytes:
                low = min(low, int(offsets[tid]))
                high = max(high, int(offsets[tid]) + nbytes)
        low = min(low, high)
        #: the plan's byte range the arena buffer backs (``[0, arena_bytes)`` without
        #: external storages and a plan whose residents start at 0)
        self.window = (low, max(high, low))
        size = self.window[1] - low
        if workspace is None:
            keep = torch.empty(size, dtype=torch.uint8, device=self.device)
        elif workspace.numel() < size or workspace.device.type != self.device.type:
            raise ExecutorError(f"the workspace has {workspace.numel()} B on "
                                f"{workspace.device}, the plan needs {size} B on {self.device}")
        else:
            keep = workspace[:size]
        # Same memory, but a storage that cannot be resized: an out= kernel that tries to
        # grow its output fails instead of reallocating behind our back.
        self.arena = torch.from_dlpack(keep)
        self._keep = keep
        #: address of plan offset 0 (the arena buffer holds offsets from ``window[0]`` on)
        self.base = self.arena.data_ptr() - low
        self.env: dict[str, Any] = {}
        self._stats = {"checked": 0}
        self._programs: dict[tuple[tuple[OpId, ...], bool, int | None], Program] = {}
        self._last: Program | None = None

    # ------------------------------------------------------------------ slots
    def slot_view(self, fake: torch.Tensor, offset: int, nbytes: int,
                  tid: TensorId | None = None) -> torch.Tensor:
        """A tensor with ``fake``'s dtype, shape and stride whose storage starts at plan
        offset ``offset`` (or in storage ``tid``'s external slot)."""
        # bytes [offset, offset + nbytes) as their own non-resizable storage (DLPack
        # round-trip), so an out= kernel that grows its output fails instead of writing
        # past the slot; then reinterpreted as dtype and strided like the fake
        if tid is not None and tid in self.external:
            raw = self.external[tid][:nbytes]
        else:
            lo = offset - self.window[0]
            raw = self.arena[lo:lo + nbytes]
        flat = torch.from_dlpack(raw).view(fake.dtype)
        return flat.as_strided(fake.shape, fake.stride(), fake.storage_offset())

    def address(self, tid: TensorId, offset: int) -> int:
        """Where storage ``tid`` (planned at ``offset``) starts in memory."""
        ext = self.external.get(tid)
        return ext.data_ptr() if ext is not None else self.base + offset

    def load_resident(self, node_name: str, real: torch.Tensor) -> torch.Tensor:
        """Copy a resident value (placeholder or constant) into its slot; returns the slot."""
        fake = self.nodes[node_name].meta["val"]
        if fake.device.type != self.device.type:  # not in the arena: keep it where it is
            self.env[node_name] = real.to(fake.device)
            return self.env[node_name]
        tid, off = self._planned(fake, node_name)
        self.check_slot(node_name, tid, fake, off)
        if tuple(real.shape) != tuple(fake.shape) or real.dtype != fake.dtype:
            raise ExecutorError(
                f"input {node_name!r}: got {tuple(real.shape)} {real.dtype}, the traced step "
                f"expects {tuple(fake.shape)} {fake.dtype}")
        view = self.slot_view(fake, off, fake.untyped_storage().nbytes(), tid)
        view.copy_(real)
        self.env[node_name] = view
        return view

    def bind_external(self, node_name: str) -> torch.Tensor:
        """Make a resident value that lives in its external slot readable by the program
        (no copy: the slot holds the value already); returns the view."""
        fake = self.nodes[node_name].meta["val"]
        tid, _ = self._planned(fake, node_name)
        if tid not in self.external:
            raise ExecutorError(f"input {node_name!r} has no external slot")
        view = self.slot_view(fake, 0, fake.untyped_storage().nbytes(), tid)
        self.env[node_name] = view
        return view

    def read(self, node_name: str) -> torch.Tensor:
        """The current value of a resident value (its slot), e.g. an updated parameter."""
        return self.env[node_name]

    def read_storage(self, tid: TensorId, values: Mapping[str, Any]) -> torch.Tensor:
        """The slot of any storage, shaped like the value that created it."""
        fake = fake_of_value(self.gm, values, tid)
        _, off = self.slot[storage_key(fake)]
        return self.slot_view(fake, off, fake.untyped_storage().nbytes(), tid)

    def _planned(self, fake: torch.Tensor, where: str) -> tuple[TensorId, int]:
        try:
            return self.slot[storage_key(fake)]
        except KeyError:
            raise ExecutorError(f"op {where!r}: its output storage is not in the graph") \
                from None

    def check_slot(self, op: str, tid: TensorId, fake: torch.Tensor, off: int) -> None:
        if tid in self.external:
            return  # checked against its external slot when the runner was built
        nbytes = fake.untyped_storage().nbytes()
        if off < 0 or off + nbytes > self.arena_bytes:
            raise ExecutorError(
                f"op {op!r}: storage {tid!r} at offset {off} ({nbytes} B) lies outside the "
                f"arena of {self.arena_bytes} B")
        if off % fake.element_size():
            raise ExecutorError(
                f"op {op!r}: storage {tid!r} offset {off} is not a multiple of its element "
                f"size {fake.element_size()}")

    # ------------------------------------------------------------------ run
    def program(self, order: Sequence[OpId], *, check_live: bool = True,
                scalar_slots: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> Program:
        """The prepared :class:`~roam_core.runtime.program.Program` of ``order`` (cached)."""
        key = (tuple(order), check_live, None if scalar_slots is None else id(scalar_slots))
        prog = self._programs.get(key)
        if prog is None:
            prog = Program(self, order, scalar_slots, check_live=check_live)
            self._programs[key] = prog
        return prog

    def load_constants(self, *, again: bool = False) -> None:
        """Copy the graph's tensor constants (``get_attr`` nodes) into their slots (once;
        ``again=True``: also the ones loaded before, after another plan used the arena)."""
        for n in self.gm.graph.nodes:
            if n.op == "get_attr" and (again or n.name not in self.env):
                real = getattr(self.gm, n.target)
                if isinstance(real, torch.Tensor) and n.name in self.graph.tensors:
                    self.load_resident(n.name, real.to(self.device))
                else:
                    self.env[n.name] = real

    def run(self, order: Sequence[OpId], *, check_live: bool = True,
            checked: bool | None = None) -> Any:
        """Run the step's ops in ``order``; returns the FX graph's output (``[loss]``).

        Every placeholder must have been loaded with :meth:`load_resident` (constants are
        loaded here).  The first run of an order is *checked* (errors name the op; with
        ``check_addresses``, every output's address is verified); later runs take the
        prepared fast path unless ``checked=True``.  Nodes that are not graph ops
        (``getitem``) run just before their first reader.
        """
        for n in self.gm.graph.nodes:
            if n.op == "placeholder" and n.name not in self.env:
                raise ExecutorError(f"input {n.name!r} was not loaded into the arena")
        self.load_constants()
        prog = self.program(order, check_live=check_live)
        self._last = prog
        if checked or (checked is None and not prog.checked_runs):
            return prog.run_checked(self.env, check_addresses=self.check_addresses)
        return prog.run_fast(self.env)

    def stats(self) -> RunStats:
        """Counters of the last run's program (extra bytes: its last checked run)."""
        p = self._last
        if p is None:
            return RunStats(0, 0, 0, 0, 0, (), 0)
        return RunStats(p.counts["out"], p.counts["factory"], p.counts["fallback"],
                        p.extra_peak, p.extra_total, tuple(p.fallback_targets),
                        p.checked_values)

    @staticmethod
    def out_variant(op: Any) -> tuple[Any, tuple[str, ...]] | None:
        """:func:`out_variant` (looked up at call time, so a patched one is used)."""
        return out_variant(op)

    def new_storages(self, node: torch.fx.Node, fakes: list[torch.Tensor]) -> list[Any]:
        """``(fake, storage id, offset)`` of the storages ``node`` allocates (graph producer)."""
        out, seen = [], set()
        for f in fakes:
            k = storage_key(f)
            if k in self.slot and k not in seen:
                tid, off = self.slot[k]
                if self.graph.tensors[tid].producer == node.name:
                    out.append((f, tid, off))
                    seen.add(k)
        return out

    def check_outputs(self, node: torch.fx.Node, val: Any, result: Any) -> int:
        """Verify the address, shape and strides of every output of ``node`` in the arena.

        Returns the number of tensors checked; raises :class:`ExecutorError` naming the op.
        """
        before = self._stats["checked"]
        self._check_addresses(node, val, result)
        return self._stats["checked"] - before

    def _check_addresses(self, node: torch.fx.Node, val: Any, result: Any) -> None:
        fakes = flat_outputs(val)
        reals = flat_outputs(result)
        if len(fakes) != len(reals):
            raise ExecutorError(f"op {node.name!r} ({node.target}) produced {len(reals)} "
                                f"values, the trace recorded {len(fakes)}")
        for i, (f, r) in enumerate(zip(fakes, reals, strict=True)):
            if not isinstance(f, torch.Tensor):
                continue
            k = storage_key(f)
            if k not in self.slot or f.untyped_storage().nbytes() == 0 or f.numel() == 0:
                continue
            tid, off = self.slot[k]
            if not isinstance(r, torch.Tensor):
                raise ExecutorError(f"op {node.name!r}: output {i} is not a tensor")
            want = self.address(tid, off) + f.storage_offset() * f.element_size()
            if (r.data_ptr() != want or r.shape != f.shape
                    or not same_strides(f.shape, r.stride(), f.stride())):
                got = r.data_ptr() - self.base
                where = (f"arena offset {got}" if self.window[0] <= got < self.window[1]
                         else "memory outside the arena")
                raise ExecutorError(
                    f"op {node.name!r} ({node.target}): output {i} (storage {tid!r}) is at "
                    f"{where} with shape {tuple(r.shape)} stride {r.stride()}, planned offset "
                    f"{want - self.base} with shape {tuple(f.shape)} stride {f.stride()}")
            self._stats["checked"] += 1


def same_strides(shape: Sequence[int], got: Sequence[int], want: Sequence[int]) -> bool:
    """Whether two strides address the same elements of a tensor of ``shape``.

    Only dimensions of size > 1 count: a size-1 dimension is never stepped along, so its
    stride has no meaning (PyTorch itself picks different ones for the same layout, e.g.
    ``(64, 1, 64)`` and ``(49152, 1, 64)`` for a ``(1, 64, 768)`` view).  A tensor with no
    elements has no layout to compare.

    Examples
    --------
    >>> same_strides((1, 64, 768), (64, 1, 64), (49152, 1, 64))
    True
    >>> same_strides((2, 3), (3, 1), (1, 2))
    False
    """
    if len(got) != len(shape) or len(want) != len(shape):
        return False
    if any(d == 0 for d in shape):
        return True
    return all(d == 1 or a == b for d, a, b in zip(shape, got, want, strict=True))
