"""The values every plan of one model shares: :class:`ResidentStore`.

A planned step keeps the model's parameters and buffers, the optimizer's state and (with
gradient accumulation) the gradient accumulators from one call to the next.  When one
:class:`~roam_core.runtime.planned_step.PlannedStep` runs plans of several batch shapes, they
must all train the *same* tensors: one set of parameters and one optimizer state per
parameter.  The store holds them in one buffer of their own (stacked in placeholder order,
each at a multiple of 512 bytes, like a plan's residents), and every plan's
:class:`~roam_core.runtime.arena_runner.ArenaRunner` reads them there as *external* slots;
only the plan's other storages (the batch, constants, activations, temporaries) live in its
arena, which the shapes share as one workspace.

After :meth:`ResidentStore.bind`, each parameter's and buffer's ``.data`` is its slot and
``optimizer.state[p][key]`` holds slot views, so ``state_dict()``, ``torch.save`` and
``load_state_dict`` work as in an ordinary loop.  :meth:`ResidentStore.sync` takes in what
the user put in place of the views between calls (``p.data = t``,
``optimizer.load_state_dict``) by copying it into the slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from roam_core.base.errors import ExecutorError
from roam_core.model.graph import TensorId, TensorKind, round_size
from roam_core.runtime.scalars import fresh_state

if TYPE_CHECKING:
    from roam_core.trace.traced_step import PlaceholderRole, TracedStep

__all__ = ["SHARED_KINDS", "ResidentStore"]

#: Placeholder kinds the plans of one model share (the batch and constants are per plan).
SHARED_KINDS = frozenset({TensorKind.PARAMETER, TensorKind.BUFFER, TensorKind.OPTIMIZER_STATE,
                          TensorKind.GRADIENT})
_ALIGN = 512


@dataclass
class _Entry:
    """One shared value: its typed slot view, and its bytes when it lives in the buffer."""

    kind: TensorKind
    name: str
    view: torch.Tensor
    raw: torch.Tensor | None  # None: a value on another device (a CPU step counter)
    meta: tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype, str]


def _meta(fake: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype, str]:
    return (tuple(fake.shape), tuple(fake.stride()), int(fake.storage_offset()), fake.dtype,
            fake.device.type)


class ResidentStore:
    """The shared resident values of one model's plans, in one buffer (see module notes).

    Parameters
    ----------
    traced : TracedStep
        A traced step of the model (the first plan's): its placeholders of the kinds in
        :data:`SHARED_KINDS` define the entries.
    device : torch.device
        Where the buffer lives.
    """

    def __init__(self, traced: TracedStep, device: torch.device) -> None:
        self.device = device
        shared = [r for r in traced.placeholders if r.kind in SHARED_KINDS]
        nodes = {n.name: n for n in traced.gm.graph.nodes if n.op == "placeholder"}
        offsets: list[int] = []
        top = 0
        metas = []
        for r in shared:
            fake = nodes[r.node].meta["val"]
            metas.append(fake)
            if fake.device.type == device.type:
                offsets.append(top)
                top += round_size(fake.untyped_storage().nbytes(), _ALIGN)
            else:
                offsets.append(-1)
        #: one buffer for every on-device entry
        self.buffer = torch.empty(max(top, 1), dtype=torch.uint8, device=device)
        self.entries: dict[tuple[TensorKind, str], _Entry] = {}
        for r, fake, off in zip(shared, metas, offsets, strict=True):
            if off < 0:
                view = torch.zeros(fake.shape, dtype=fake.dtype, device=fake.device)
                raw = None
            else:
                raw = torch.from_dlpack(self.buffer[off:off + fake.untyped_storage().nbytes()])
                view = raw.view(fake.dtype).as_strided(fake.shape, fake.stride(),
                                                       fake.storage_offset())
            self.entries[(r.kind, r.name)] = _Entry(r.kind, r.name, view, raw, _meta(fake))
        self._tensors: list[tuple[torch.Tensor, _Entry]] = []
        self._state: list[tuple[nn.Parameter, str, _Entry]] = []

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer (parameters, buffers, optimizer state, accumulators)."""
        return int(self.buffer.numel())

    def entry(self, role: PlaceholderRole) -> _Entry:
        e = self.entries.get((role.kind, role.name))
        if e is None:
            raise ExecutorError(f"{role.kind.value} {role.name!r} is not among the values the "
                                "first plan of this step holds: the model, the optimizer or "
                                "the accumulation differ; build a new PlannedStep")
        return e

    def slots_for(self, traced: TracedStep) -> tuple[dict[TensorId, torch.Tensor],
                                                      dict[str, torch.Tensor]]:
        """``(external bytes by storage id, off-device values by node)`` for a traced step's
        shared placeholders; raises if one differs from this store's entry."""
        nodes = {n.name: n for n in traced.gm.graph.nodes if n.op == "placeholder"}
        external: dict[TensorId, torch.Tensor] = {}
        other: dict[str, torch.Tensor] = {}
        for r in traced.placeholders:
            if r.kind not in SHARED_KINDS:
                continue
            e = self.entry(r)
            if _meta(nodes[r.node].meta["val"]) != e.meta:
                raise ExecutorError(f"{r.kind.value} {r.name!r} has another shape, stride or "
                                    "dtype in this plan's step than in the first one")
            if e.raw is None:
                other[r.node] = e.view
            else:  # a placeholder's storage id is its node name
                external[TensorId(r.node)] = e.raw
        return external, other

    # ------------------------------------------------------------------ values
    def load(self, named_params: Sequence[tuple[str, nn.Parameter]],
             named_buffers: Sequence[tuple[str, torch.Tensor]],
             optimizer: torch.optim.Optimizer) -> None:
        """Copy the parameters and buffers in, the optimizer's fresh state, and ``-0.0``
        into every accumulator (the identity of ``+``: the first add is an exact copy)."""
        params = dict(named_params)
        values: dict[str, torch.Tensor] = {**params, **dict(named_buffers)}
        with torch.no_grad():
            for (kind, name), e in self.entries.items():
                if kind in (TensorKind.PARAMETER, TensorKind.BUFFER):
                    src = values.get(name)
                    if src is None:
                        raise ExecutorError(f"the model has no {kind.value} {name!r}")
                    if tuple(src.shape) != e.meta[0] or src.dtype != e.meta[3]:
                        raise ExecutorError(f"{kind.value} {name!r} is {tuple(src.shape)} "
                                            f"{src.dtype}, the step expects {e.meta[0]} "
                                            f"{e.meta[3]}")
                    e.view.copy_(src.detach())
                elif kind is TensorKind.OPTIMIZER_STATE:
                    pname, _, key = name.rpartition(":")
                    like = torch.zeros(e.meta[0], dtype=e.meta[3])
                    e.view.copy_(fresh_state(optimizer, params[pname], key, like))
                else:  # gradient accumulator
                    e.view.fill_(-0.0)

    def bind(self, named_params: Sequence[tuple[str, nn.Parameter]],
             named_buffers: Sequence[tuple[str, torch.Tensor]],
             optimizer: torch.optim.Optimizer) -> None:
        """Make the model's tensors and the optimizer's state views of the slots."""
        values = {**dict(named_params), **dict(named_buffers)}
        params = dict(named_params)
        self._tensors, self._state = [], []
        with torch.no_grad():
            for (kind, name), e in self.entries.items():
                if kind in (TensorKind.PARAMETER, TensorKind.BUFFER):
                    t = values[name]
                    t.data = e.view
                    self._tensors.append((t, e))
                elif kind is TensorKind.OPTIMIZER_STATE:
                    pname, _, key = name.rpartition(":")
                    p = params[pname]
                    optimizer.state[p][key] = e.view
                    self._state.append((p, key, e))

    def accumulators(self) -> dict[str, torch.Tensor]:
        """Parameter name -> its gradient accumulator (empty without accumulation)."""
        return {name: e.view for (kind, name), e in self.entries.items()
                if kind is TensorKind.GRADIENT}

    def sync(self, optimizer: torch.optim.Optimizer) -> bool:
        """Take in values the user put in place of the slot views since the last call.

        ``optimizer.load_state_dict`` (resuming from a checkpoint) replaces the state
        tensors, ``p.data = t`` a parameter's: their values are copied into the slots and the
        views put back.  Returns whether optimizer state was taken in (the caller then
        sets the scalar probes' step counters from it).
        """
        loaded = False
        with torch.no_grad():
            for p, key, e in self._state:
                cur = optimizer.state.get(p, {}).get(key)
                if cur is e.view:
                    continue
                if not isinstance(cur, torch.Tensor) or cur.shape != e.view.shape:
                    raise ExecutorError(
                        f"optimizer state {key!r} of a parameter of shape {tuple(p.shape)} was "
                        f"replaced by {type(cur).__name__} "
                        f"{tuple(cur.shape) if isinstance(cur, torch.Tensor) else ''}: "
                        "PlannedStep needs the state the plan was traced with")
                e.view.copy_(cur)
                optimizer.state[p][key] = e.view
                loaded = True
            for t, e in self._tensors:
                slot = e.view
                if t.data_ptr() != slot.data_ptr():
                    if t.shape != slot.shape or t.dtype != slot.dtype:
                        raise ExecutorError(
                            f"{e.kind.value} {e.name!r} of shape {tuple(slot.shape)} "
                            f"{slot.dtype} was replaced by one of shape {tuple(t.shape)} "
                            f"{t.dtype}")
                    slot.copy_(t.detach())
                    t.data = slot
        return loaded
