"""The step of one DDP rank, written with functional collectives so that it traces.

DistributedDataParallel's reducer lives in C++ and is invisible to tracing; this module runs
its program as functional ops.  The parameters stay whole (replicas).  Each bucket
(:mod:`.layout`) puts one autograd node in front of its parameters; when every gradient of
the bucket is ready (the reducer's "bucket ready"), the gradients are multiplied by ``1 / W``
and laid out in one flat bucket (DDP's ``mul_out`` into the bucket view), all-reduced with
``sum``, and each parameter's gradient is a view of the reduced bucket.  The bucket is a
``communication`` storage; the reduced bucket holds the gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from roam_core.trace.parallel.collectives import all_reduce
from roam_core.trace.parallel.layout import RankLayout
from roam_core.trace.parallel.param_slots import ParamSlots

__all__ = ["DdpProgram"]


class _Bucket(torch.autograd.Function):
    """Forward: the parameters as they are; backward: the bucket's all-reduce."""

    @staticmethod
    def forward(ctx: Any, bucket: _BucketRun, *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.bucket = bucket
        return tuple(p.view_as(p) for p in params)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        return (None, *ctx.bucket.reduce(grads))


class _BucketRun:
    def __init__(self, program: DdpProgram, params: Sequence[nn.Parameter]) -> None:
        self.program, self.params = program, list(params)

    def reduce(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        prog = self.program
        present = [i for i, g in enumerate(grads) if g is not None]
        out: list[torch.Tensor | None] = [None] * len(grads)
        if not present:
            return out
        bucket = torch.cat([grads[i].reshape(-1) for i in present])  # type: ignore[union-attr]  # present: not None
        bucket.mul_(1.0 / prog.world_size)
        reduced = all_reduce(bucket, "sum", prog.group)
        prog.communication.append(bucket)
        offset = 0
        for i in present:
            n = self.params[i].numel()
            out[i] = reduced.narrow(0, offset, n).view(self.params[i].shape)
            offset += n
        return out


class DdpProgram:
    """Runs the forward and backward of ``model`` as one DDP rank does (see module notes).

    Parameters
    ----------
    model : nn.Module
        The model (whole parameters, fake or real).
    layout : RankLayout
        The buckets (:meth:`RankLayout.build`).
    group : str
        Process group name of the all-reduces.
    """

    def __init__(self, model: nn.Module, layout: RankLayout, group: str) -> None:
        self.model, self.layout, self.group = model, layout, group
        self.world_size = layout.setting.world_size
        self.communication: list[torch.Tensor] = []
        by_name = dict(model.named_parameters(remove_duplicate=False))
        self.buckets = [_BucketRun(self, [by_name[n] for n in u.params])
                        for u in layout.units]
        every = [p for b in self.buckets for p in b.params]
        self.slots = ParamSlots(model, every)

    def _pre_forward(self, module: nn.Module, args: Any) -> None:
        views: list[torch.Tensor] = []
        for b in self.buckets:
            views.extend(_Bucket.apply(b, *b.params))
        self.slots.put(views)

    def _post_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        self.slots.restore()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Hooks for one forward and backward."""
        handles = [self.model.register_forward_pre_hook(self._pre_forward),
                   self.model.register_forward_hook(self._post_forward)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            self.slots.restore()
