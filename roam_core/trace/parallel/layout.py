"""Which parameters each rank holds and how they are grouped: FSDP2 units, DDP buckets.

FSDP2 (``fully_shard``) shards every parameter along dim 0 as ``torch.chunk`` does: each
rank holds ``ceil(d0 / W)`` rows, the last ranks' shards padded with zero rows so that every
rank holds the same shape (``_fsdp_param.py``: the padded sharded size).  Because the padded
shapes are the same on every rank, the program of rank 0 is the program of every rank.

A parameter belongs to the innermost unit (a module given to ``fully_shard``) that contains
it; the root unit holds the rest.  Units, in the policies of
:data:`~roam_core.model.parallel.WRAP_POLICIES`:

* ``blocks``: each repeated block (:func:`~roam_core.trace.blocks.block_modules`: the
  transformer layers in a ``ModuleList`` or a ``Sequential``, an encoder's and a decoder's,
  ResNet's bottlenecks), plus the root (torchtitan's policy); a model without blocks uses
  each child of the root that owns parameters;
* ``leaves``: every module that owns parameters directly, plus the root;
* ``root``: one unit, the whole model.

DDP groups the gradients into buckets in reverse parameter order, the first bucket capped
at ``first_bucket_bytes`` and the others at ``bucket_bytes``
(``torch.distributed._compute_bucket_assignment_by_size``).

Examples
--------
>>> import torch
>>> from roam_core.model.parallel import ParallelSetting
>>> m = torch.nn.Sequential(torch.nn.Linear(4, 10), torch.nn.Linear(10, 3))
>>> lay = RankLayout.build(m, ParallelSetting("fsdp", 4))
>>> [(u.path, u.params) for u in lay.units]
[('', ()), ('0', ('0.weight', '0.bias')), ('1', ('1.weight', '1.bias'))]
>>> lay.params["0.weight"].local_shape, lay.params["1.bias"].local_shape
((3, 4), (1,))
>>> lay.params["0.weight"].rows_of(3)    # rank 3 holds row 9 and one padding row
(9, 10)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from roam_core.base.errors import TraceError
from roam_core.model.parallel import ParallelSetting
from roam_core.trace.blocks import block_modules
from roam_core.trace.params import unique_named_parameters

__all__ = ["RankLayout", "ShardedParam", "Unit", "shard_rows"]


def shard_rows(d0: int, world_size: int) -> int:
    """Rows each rank holds of a dim-0 size ``d0`` (``ceil(d0 / W)``; FSDP2's padded size)."""
    return max(1, math.ceil(d0 / world_size))


@dataclass(frozen=True, slots=True)
class ShardedParam:
    """One parameter as a rank holds it.

    Parameters
    ----------
    name : str
        Qualified name (first name of a tied parameter).
    full_shape : tuple of int
        Shape of the whole parameter.
    rows : int
        Rows of dim 0 on each rank (padded; ``full_shape[0]`` when not sharded).
    sharded : bool
        FSDP shards it; DDP (and one device) keeps it whole.
    """

    name: str
    full_shape: tuple[int, ...]
    rows: int
    sharded: bool

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Shape of the rank's (padded) shard."""
        return (self.rows, *self.full_shape[1:]) if self.sharded else self.full_shape

    @property
    def row_numel(self) -> int:
        """Elements per row of dim 0."""
        return math.prod(self.full_shape[1:])

    def rows_of(self, rank: int) -> tuple[int, int]:
        """``(start, stop)`` of the real rows rank ``rank`` holds (the rest is padding)."""
        if not self.sharded:
            return 0, self.full_shape[0]
        start = min(rank * self.rows, self.full_shape[0])
        return start, min(start + self.rows, self.full_shape[0])

    def shard(self, full: torch.Tensor, rank: int) -> torch.Tensor:
        """The rank's padded shard of the whole tensor ``full`` (a new tensor)."""
        if not self.sharded:
            return full.detach().clone()
        out = full.new_zeros(self.local_shape)
        start, stop = self.rows_of(rank)
        out[:stop - start].copy_(full.detach()[start:stop])
        return out


@dataclass(frozen=True, slots=True)
class Unit:
    """A group of parameters gathered (FSDP) or reduced (DDP bucket) together.

    Parameters
    ----------
    path : str
        Module path of an FSDP unit (``""``: the root); ``"bucket<i>"`` for DDP.
    params : tuple of str
        Qualified names of its parameters, in the order their bytes are laid out.
    """

    path: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class RankLayout:
    """The parameters of one rank and their units (FSDP) or buckets (DDP).

    Parameters
    ----------
    setting : ParallelSetting
        The parallel setting.
    params : dict of str to ShardedParam
        Every distinct parameter, in ``unique_named_parameters`` order.
    units : tuple of Unit
        FSDP units (root first, then in module order) or DDP buckets (in reduction order).
    """

    setting: ParallelSetting
    params: dict[str, ShardedParam]
    units: tuple[Unit, ...]

    @classmethod
    def build(cls, model: nn.Module, setting: ParallelSetting) -> RankLayout:
        """The layout of ``model`` (real or meta parameters, never already sharded)."""
        named = unique_named_parameters(model)
        sharded = setting.kind == "fsdp"
        params: dict[str, ShardedParam] = {}
        for name, p in named:
            shape = tuple(int(s) for s in p.shape)
            if sharded and not shape:
                raise TraceError(f"FSDP shards dim 0, and parameter {name!r} is a scalar")
            rows = shard_rows(shape[0], setting.world_size) if sharded else (
                shape[0] if shape else 1)
            params[name] = ShardedParam(name, shape, rows, sharded)
        if setting.kind == "fsdp":
            units = _fsdp_units(model, setting.wrap, named)
        elif setting.kind == "ddp":
            units = _ddp_buckets(named, setting)
        else:
            units = ()
        return cls(setting, params, units)

    def local_shape(self, name: str) -> tuple[int, ...]:
        """Shape of parameter ``name`` on a rank."""
        return self.params[name].local_shape

    def bytes_per_rank(self, element_size: int = 4) -> int:
        """Parameter bytes one rank holds (padded shards), at ``element_size`` bytes each."""
        return sum(math.prod(p.local_shape) for p in self.params.values()) * element_size


def _fsdp_units(model: nn.Module, wrap: str,
                named: Sequence[tuple[str, nn.Parameter]]) -> tuple[Unit, ...]:
    paths = ["", *_wrapped_paths(model, wrap)]
    owner: dict[int, str] = {}
    # a parameter belongs to the innermost unit holding it: the longest matching path wins
    for name, p in named:
        best = ""
        for path in paths:
            if path and (name.startswith(path + ".")) and len(path) > len(best):
                best = path
        owner[id(p)] = best
    groups: dict[str, list[str]] = {path: [] for path in paths}
    for name, p in named:
        groups[owner[id(p)]].append(name)
    return tuple(Unit(path, tuple(groups[path])) for path in paths)


def _wrapped_paths(model: nn.Module, wrap: str) -> list[str]:
    if wrap == "root":
        return []
    if wrap == "leaves":
        return [path for path, m in model.named_modules()
                if path and any(True for _ in m.parameters(recurse=False))]
    blocks = [path for path, m in block_modules(model)
              if any(True for _ in m.parameters())]
    if blocks:
        return blocks
    return [name for name, child in model.named_children()
            if any(True for _ in child.parameters())]


def _ddp_buckets(named: Sequence[tuple[str, nn.Parameter]],
                 setting: ParallelSetting) -> tuple[Unit, ...]:
    buckets: list[list[str]] = []
    current: list[str] = []
    size = 0
    cap = setting.first_bucket_bytes
    for name, p in reversed(list(named)):  # gradients become ready roughly in reverse
        if not p.requires_grad:
            continue
        current.append(name)
        size += p.numel() * p.element_size()
        if size >= cap:  # a bucket closes once it reaches its cap
            buckets.append(current)
            current, size, cap = [], 0, setting.bucket_bytes
    if current:
        buckets.append(current)
    return tuple(Unit(f"bucket{i}", tuple(b)) for i, b in enumerate(buckets))
