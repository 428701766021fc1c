"""The step of one FSDP2 rank, written with functional collectives so that it traces.

FSDP2's eager hooks (``fully_shard``) issue c10d collectives into buffers they keep across
the step and free by resizing storages, which a graph of storages cannot follow.  This module
runs the same program as functional ops on the rank's shards:

* **before a unit's forward** (FSDP2's pre-forward unshard): the unit's shards are copied into
  one flat buffer (cast to ``param_dtype`` under mixed precision), all-gathered into
  ``[W * n]``, and copied out into one unsharded buffer per parameter
  (``split_with_sizes_copy``, FSDP2's copy-out), whose dim-0 prefix is the parameter; the
  module holds those until its forward returns;
* **reshard after forward** (FSDP2's default, never for the root): tensors the forward saves
  for the backward that live in gathered buffers are packed (``saved_tensors_hooks``); the
  first backward op that unpacks one gathers the unit again, and prefetches the unit that ran
  before it in the forward (FSDP2's backward prefetch);
* **after a unit's backward** (FSDP2's post-backward reduce): the unsharded gradients are laid
  out per rank (``_chunk_cat``, FSDP2's reduce-scatter copy-in, in ``reduce_dtype``),
  reduce-scattered with ``avg``, and each shard's gradient is a view of this rank's chunk.

The gathered buffers, the all-gather and the reduce-scatter inputs are ``communication``
storages (:attr:`FsdpProgram.communication`); the reduce-scatter output holds the gradients.
Every value is a copy or the same reduction FSDP2 makes, so on real ranks the planned step
gives FSDP2's numbers.  The layout of bytes per rank is :mod:`.layout`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from roam_core.base.errors import TraceError
from roam_core.trace.parallel.collectives import all_gather, reduce_scatter
from roam_core.trace.parallel.layout import RankLayout, ShardedParam
from roam_core.trace.parallel.param_slots import ParamSlots, cast_floats

__all__ = ["FsdpProgram"]


@dataclass(frozen=True, slots=True)
class _Packed:
    """A saved tensor that lives in a gathered buffer: where, to gather it again."""

    unit: _UnitRun
    index: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class _Gather(torch.autograd.Function):
    """Forward: gather a unit's shards; backward: reduce-scatter its gradients."""

    @staticmethod
    def forward(ctx: Any, unit: _UnitRun, *shards: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.unit = unit
        return tuple(unit.views(unit.gather(shards)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        return (None, *ctx.unit.reduce(grads))


class _UnitRun:
    """One FSDP unit during a traced step."""

    def __init__(self, program: FsdpProgram, path: str, module: nn.Module,
                 params: Sequence[ShardedParam], shards: Sequence[nn.Parameter],
                 reshard: bool) -> None:
        self.program, self.path, self.module = program, path, module
        self.params, self.shards, self.reshard = list(params), list(shards), reshard
        self.slots = ParamSlots(program.model, self.shards)
        self.regathered: list[torch.Tensor] | None = None
        self.packed = False  # the forward saved tensors of its gathered buffers
        self.backward_started = False

    # ------------------------------------------------------------------ data
    def gather(self, shards: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The unsharded (padded) buffer of every parameter: copy-in, all-gather, copy-out."""
        prog = self.program
        dtype = prog.param_dtype or shards[0].dtype
        flat = torch.cat([s.reshape(-1).to(dtype) for s in shards])
        gathered = all_gather(flat, prog.world_size, prog.group)
        sizes = [s.numel() for s in shards]
        outs = list(torch.ops.aten.split_with_sizes_copy.default(
            gathered.view(prog.world_size, -1), sizes, 1))
        prog.communication.extend([flat, gathered, *outs])
        return outs

    def views(self, bufs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The parameters inside their unsharded buffers (the padding rows cut off)."""
        out = []
        for p, b in zip(self.params, bufs, strict=True):
            full = b.view(self.program.world_size * p.rows, *p.full_shape[1:])
            out.append(full.narrow(0, 0, p.full_shape[0]))
        return out

    def reduce(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """Each shard's gradient: this rank's chunk of the averaged unsharded gradients.

        Parameters without a gradient take no part (as in FSDP2) and get none.
        """
        prog = self.program
        present = [i for i, g in enumerate(grads) if g is not None]
        out: list[torch.Tensor | None] = [None] * len(grads)
        if not present:
            return out
        gs = [g for g in grads if g is not None]  # the grads of ``present``, in order
        dtype = prog.reduce_dtype or self.shards[0].dtype
        numels = [self.shards[i].numel() for i in present]
        total = sum(numels)
        staged = torch.empty(prog.world_size * total, dtype=dtype, device=gs[0].device)
        torch._chunk_cat(gs, 0, prog.world_size, out=staged.view(prog.world_size, total))
        mine = reduce_scatter(staged, "avg", prog.world_size, prog.group)
        prog.communication.append(staged)
        offset = 0
        for i, n in zip(present, numels, strict=True):
            out[i] = mine.narrow(0, offset, n).view(self.shards[i].shape)
            offset += n
        return out

    def gather_again(self) -> list[torch.Tensor]:
        """The unit's buffers in the backward: gathered at its first use there, when it also
        prefetches the unit whose forward ran before (FSDP2's backward prefetch)."""
        if not self.backward_started:
            self.backward_started = True
            self._gather_now()
            before = self.program.unit_before(self)
            if before is not None and before.packed:
                before._gather_now()
        assert self.regathered is not None
        return self.regathered

    def _gather_now(self) -> None:
        if self.regathered is None:
            with torch.no_grad():
                self.regathered = self.gather(self.shards)

    # ------------------------------------------------------------------ hooks
    def pre_forward(self, module: nn.Module, args: Any, kwargs: Any) -> Any:
        prog = self.program
        prog.forward_order.append(self)
        if self.shards:
            params = _Gather.apply(self, *self.shards)
            self.slots.put(params)
            if self.reshard:
                for i, t in enumerate(params):
                    prog.gathered[StorageWeakRef(t.untyped_storage())] = (self, i)
        if prog.param_dtype is not None:
            return cast_floats(args, prog.param_dtype), cast_floats(kwargs, prog.param_dtype)
        return None

    def post_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        self.slots.restore()


class FsdpProgram:
    """Runs the forward and backward of ``model`` as one FSDP2 rank does (see module notes).

    Parameters
    ----------
    model : nn.Module
        The model holding the rank's shards (fake or real ``nn.Parameter`` s of the padded
        local shapes).
    layout : RankLayout
        Units and shapes (:meth:`RankLayout.build` of the unsharded model).
    group : str
        Process group name of the collectives.
    param_dtype, reduce_dtype : torch.dtype, optional
        FSDP2's ``MixedPrecisionPolicy``: gather (and compute) in ``param_dtype``, reduce the
        gradients in ``reduce_dtype`` (default: the shards' dtype).
    """

    def __init__(self, model: nn.Module, layout: RankLayout, group: str, *,
                 param_dtype: torch.dtype | None = None,
                 reduce_dtype: torch.dtype | None = None) -> None:
        if reduce_dtype is not None and reduce_dtype not in (torch.float32, torch.bfloat16):
            raise TraceError(f"FSDP reduce dtype {reduce_dtype} is not supported: FSDP2 "
                             "reduces it with divide factors; use float32 or bfloat16")
        self.model, self.layout, self.group = model, layout, group
        self.world_size = layout.setting.world_size
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
        self.communication: list[torch.Tensor] = []
        self.forward_order: list[_UnitRun] = []
        self.gathered: dict[StorageWeakRef, tuple[_UnitRun, int]] = {}
        by_name = dict(model.named_parameters(remove_duplicate=False))
        modules = dict(model.named_modules())
        self.units: list[_UnitRun] = []
        for u in layout.units:
            shards = [by_name[n] for n in u.params]
            for n, s in zip(u.params, shards, strict=True):
                if tuple(s.shape) != layout.local_shape(n):
                    raise TraceError(f"parameter {n!r} is {tuple(s.shape)}, its FSDP shard "
                                     f"should be {layout.local_shape(n)}")
            reshard = layout.setting.reshard_after_forward and u.path != ""
            self.units.append(_UnitRun(self, u.path, modules[u.path],
                                       [layout.params[n] for n in u.params], shards, reshard))

    def unit_before(self, unit: _UnitRun) -> _UnitRun | None:
        """The unit whose forward ran just before ``unit`` 's (FSDP2's backward prefetch)."""
        order = self.forward_order
        for i, u in enumerate(order):
            if u is unit:
                return order[i - 1] if i > 0 else None
        return None

    def _pack(self, t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        hit = self.gathered.get(StorageWeakRef(t.untyped_storage()))
        if hit is None:
            return t
        unit, i = hit
        unit.packed = True
        return _Packed(unit, i, tuple(t.shape), tuple(t.stride()), int(t.storage_offset()))

    @staticmethod
    def _unpack(x: Any) -> Any:
        if not isinstance(x, _Packed):
            return x
        buf = x.unit.gather_again()[x.index]
        return buf.as_strided(x.shape, x.stride, x.offset)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Hooks for one forward and backward (the saved-tensor packing included)."""
        handles = []
        for u in self.units:
            handles.append(u.module.register_forward_pre_hook(u.pre_forward, with_kwargs=True))
            handles.append(u.module.register_forward_hook(u.post_forward))
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            for h in handles:
                h.remove()
            for u in self.units:
                u.slots.restore()
                u.regathered, u.packed, u.backward_started = None, False, False
            self.gathered.clear()
            self.forward_order.clear()
