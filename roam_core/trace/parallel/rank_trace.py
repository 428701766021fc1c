"""What the tracer needs to trace one rank: the setting, the layout, the shard shapes.

A model is traced either whole (real or meta parameters: the tracer fakes each parameter at
its shard's shape) or as :func:`shard_model` left it (the real shards of one rank, for the
runtime: it carries its layout, and its parameters already have the shard shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from roam_core.base.errors import TraceError
from roam_core.model.parallel import ParallelSetting
from roam_core.trace.parallel.layout import RankLayout
from roam_core.trace.parallel.program import rank_program
from roam_core.trace.params import unique_named_parameters

__all__ = ["LAYOUT_ATTRIBUTE", "RankTrace", "as_parallel_setting", "shard_model"]

#: Attribute a model made by :func:`shard_model` carries: its :class:`RankLayout`.
LAYOUT_ATTRIBUTE = "_roam_rank_layout"


def as_parallel_setting(parallel: str | ParallelSetting | None, world_size: int = 1,
                        reshard_after_forward: bool = True,
                        fsdp_wrap: str = "blocks") -> ParallelSetting:
    """The :class:`ParallelSetting` of the tracer's keyword arguments."""
    if isinstance(parallel, ParallelSetting):
        return parallel
    if parallel in (None, "none"):
        return ParallelSetting("none", world_size)
    return ParallelSetting(str(parallel), world_size, bool(reshard_after_forward), fsdp_wrap)


@dataclass(frozen=True)
class RankTrace:
    """One rank's setting, layout and process group, for one trace.

    Parameters
    ----------
    setting : ParallelSetting
    layout : RankLayout
    group : str
        Process group name.
    precision : str
    shapes : dict of int to tuple of int
        ``id(parameter)`` -> the shape to fake it at (empty for a model already sharded).
    """

    setting: ParallelSetting
    layout: RankLayout
    group: str
    precision: str
    shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def make(cls, model: nn.Module, setting: ParallelSetting, group: str,
             precision: str) -> RankTrace:
        """The rank trace of a whole model, or of one made by :func:`shard_model`."""
        own = getattr(model, LAYOUT_ATTRIBUTE, None)
        if own is not None:
            if own.setting != setting:
                raise TraceError(f"the model holds the shards of {own.setting.describe()}, "
                                 f"not {setting.describe()}")
            return cls(setting, own, group, precision)
        layout = RankLayout.build(model, setting)
        shapes = {id(p): layout.local_shape(n) for n, p in unique_named_parameters(model)}
        return cls(setting, layout, group, precision, shapes)

    def program(self, model: nn.Module) -> Any:
        """The rank program over ``model`` (its parameters already faked at shard shapes)."""
        return rank_program(model, self.layout, self.group, self.precision)


def shard_model(model: nn.Module, setting: ParallelSetting, rank: int) -> RankLayout:
    """Replace every parameter of ``model`` by rank ``rank`` 's padded shard, in place.

    The model then holds what one FSDP rank holds (DDP: the whole parameters, unchanged) and
    traces with ``parallel=setting`` to the same graph as the whole model.  Tied parameters
    stay tied.  Returns the layout (also kept on the model).

    Raises
    ------
    TraceError
        The model has meta parameters, or is sharded already.
    """
    if getattr(model, LAYOUT_ATTRIBUTE, None) is not None:
        raise TraceError("the model is sharded already")
    layout = RankLayout.build(model, setting)
    if setting.kind == "fsdp":
        new: dict[int, nn.Parameter] = {}
        for name, p in unique_named_parameters(model):
            if p.is_meta:
                raise TraceError(f"parameter {name!r} is on the meta device; shard real values")
            with torch.no_grad():
                shard = layout.params[name].shard(p, rank)
            new[id(p)] = nn.Parameter(shard, requires_grad=p.requires_grad)
        for m in model.modules():
            for k, v in list(m._parameters.items()):
                if v is not None and id(v) in new:
                    m._parameters[k] = new[id(v)]
    setattr(model, LAYOUT_ATTRIBUTE, layout)
    return layout
