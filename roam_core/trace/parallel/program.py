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
from roam_core.model.parallel import PARALLEL_PRECISIONS
from roam_core.trace.parallel.ddp import DdpProgram
from roam_core.trace.parallel.fsdp import FsdpProgram
from roam_core.trace.parallel.layout import RankLayout

__all__ = ["PARALLEL_PRECISIONS", "RankProgram", "check_parallel_precision", "rank_program"]

RankProgram = FsdpProgram | DdpProgram


def check_parallel_precision(kind: str, precision: str) -> None:
    """Refuse a precision that the ``kind`` data-parallel step does not trace in.

    The precisions of one device (:mod:`roam_core.trace.precision`) that a rank program
    does not run (pure ``bf16``, ``fp16-mixed``'s grad scaler, whose inf check would have to
    be all-reduced) are refused rather than traced as a different step.

    Raises
    ------
    ConfigError
        ``precision`` is not in ``PARALLEL_PRECISIONS[kind]``.
    """
    allowed = PARALLEL_PRECISIONS.get(kind, ())
    if precision not in allowed:
        raise ConfigError(f"precision {precision!r} with --parallel {kind} is not supported; "
                          f"choose one of: {', '.join(allowed)}")


def rank_program(model: nn.Module, layout: RankLayout, group: str,
                 precision: str = "fp32") -> Any:
    """The :class:`FsdpProgram` or :class:`DdpProgram` of ``layout.setting``.

    Raises
    ------
    ConfigError
        A precision this parallel kind does not trace in.
    """
    kind = layout.setting.kind
    check_parallel_precision(kind, precision)
    if kind == "fsdp":
        mixed = precision == "bf16-mixed"
        return FsdpProgram(model, layout, group,
                           param_dtype=torch.bfloat16 if mixed else None,
                           reduce_dtype=torch.float32 if mixed else None)
    return DdpProgram(model, layout, group)
