"""The program of one rank: pick FSDP or DDP, and what a precision means for it.

Precision under FSDP is FSDP2's ``MixedPrecisionPolicy``: ``bf16-mixed`` gathers the
parameters in bfloat16 (the forward and backward compute in it) and reduces the gradients in
float32 into float32 shards (fp32 master weights and optimizer state), as torchtitan trains.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from roam_core.base.errors import ConfigError
from roam_core.trace.parallel.ddp import DdpProgram
from roam_core.trace.parallel.fsdp import FsdpProgram
from roam_core.trace.parallel.layout import RankLayout

__all__ = ["PARALLEL_PRECISIONS", "RankProgram", "rank_program"]

#: Precisions a data-parallel step traces in, per parallel kind.
PARALLEL_PRECISIONS = {"fsdp": ("fp32", "bf16-mixed"), "ddp": ("fp32",)}

RankProgram = FsdpProgram | DdpProgram


def rank_program(model: nn.Module, layout: RankLayout, group: str,
                 precision: str = "fp32") -> Any:
    """The :class:`FsdpProgram` or :class:`DdpProgram` of ``layout.setting``.

    Raises
    ------
    ConfigError
        A precision this parallel kind does not trace in.
    """
    kind = layout.setting.kind
    allowed = PARALLEL_PRECISIONS.get(kind, ())
    if precision not in allowed:
        raise ConfigError(f"precision {precision!r} with --parallel {kind} is not supported; "
                          f"choose one of: {', '.join(allowed)}")
    if kind == "fsdp":
        mixed = precision == "bf16-mixed"
        return FsdpProgram(model, layout, group,
                           param_dtype=torch.bfloat16 if mixed else None,
                           reduce_dtype=torch.float32 if mixed else None)
    return DdpProgram(model, layout, group)
