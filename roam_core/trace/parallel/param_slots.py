"""Where a module tree holds each parameter, to put other tensors there for a forward.

FSDP2 swaps a unit's sharded parameters for the gathered ones before the unit's forward
and back after it; DDP's buckets put an autograd node in front of every parameter.  Both do
it by writing the module's ``_parameters`` entries (as ``fully_shard`` does), for every
module that holds the parameter (tied weights are held twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["ParamSlots", "cast_floats"]


class ParamSlots:
    """The ``(module, attribute)`` places of a set of parameters.

    Parameters
    ----------
    model : nn.Module
        The module tree.
    params : sequence of nn.Parameter
        The parameters to find (by identity).
    """

    def __init__(self, model: nn.Module, params: Sequence[nn.Parameter]) -> None:
        index = {id(p): i for i, p in enumerate(params)}
        self.params = list(params)
        self.places: list[list[tuple[nn.Module, str]]] = [[] for _ in params]
        for m in model.modules():
            for k, v in m._parameters.items():
                if v is not None and id(v) in index:
                    self.places[index[id(v)]].append((m, k))

    def put(self, tensors: Sequence[Any]) -> None:
        """Hold ``tensors[i]`` where parameter ``i`` was held."""
        for places, t in zip(self.places, tensors, strict=True):
            for m, k in places:
                m._parameters[k] = t

    def restore(self) -> None:
        """Hold the parameters again."""
        self.put(self.params)


def cast_floats(x: Any, dtype: torch.dtype) -> Any:
    """``x`` with every floating-point tensor in it cast to ``dtype`` (FSDP2's input cast)."""
    from torch.utils._pytree import tree_map

    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype:
            return t.to(dtype)
        return t

    return tree_map(cast, x)
