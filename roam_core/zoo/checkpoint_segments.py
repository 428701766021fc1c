"""``torch.utils.checkpoint`` around segments of consecutive blocks of a model, in place.

:func:`checkpoint_segments` finds a model's repeated blocks (the children of its longest
``nn.ModuleList`` or ``nn.Sequential`` of one class) and wraps every run of
``blocks_per_segment`` of them
in one non-reentrant ``torch.utils.checkpoint``: the first block of a segment runs the whole
segment under the checkpoint, the others pass their input through.  Only the segment's input
is saved; the backward re-runs its forward.  Blocks must map their first argument to an
output of the same kind and take the same extra arguments (``x = block(x, *args)``): GPT-2,
the Llama-style and MoE decoders and ViT in this zoo do.  The traced step then holds torch's
own re-runs in its backward, and roam plans it like any other graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from roam_core.base.errors import TraceError

__all__ = ["checkpoint_segments", "repeated_blocks"]


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The children of the model's longest ``nn.ModuleList`` or ``nn.Sequential`` of at least
    two modules of one class (a stack of blocks, not a block's own layers), in order; ``[]``
    when there is none."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList | nn.Sequential)
             and len(m) >= 2 and len({type(c) for c in m}) == 1]
    return list(max(lists, key=len)) if lists else []


def _wrap_segment(group: list[nn.Module]) -> None:
    """Give the blocks of one segment their new forwards: the first runs the segment under a
    checkpoint, the others pass their input through, and inside the segment each block runs
    its own forward (through ``__call__``, so module hooks still see every block)."""
    inside = [False]
    forwards = [b.forward for b in group]

    def run(x: Any, *args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            for b in group:
                x = b(x, *args, **kwargs)
        finally:
            inside[0] = False
        return x

    def make(k: int) -> Callable[..., Any]:
        def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return forwards[k](x, *args, **kwargs)
            if k == 0:
                return checkpoint(run, x, *args, use_reentrant=False, **kwargs)
            return x  # run by the segment's first block

        return forward

    for k, b in enumerate(group):
        b.forward = make(k)  # in place, per instance


def checkpoint_segments(model: nn.Module, blocks_per_segment: int) -> int:
    """Wrap every ``blocks_per_segment`` consecutive blocks of ``model`` in one checkpoint.

    Returns the number of segments (the last one may be shorter).

    Raises
    ------
    TraceError
        ``blocks_per_segment`` is below 1, or the model has no repeated blocks.

    Examples
    --------
    >>> import torch
    >>> m = nn.Sequential(*(nn.Linear(4, 4) for _ in range(5)))
    >>> x = torch.randn(2, 4)
    >>> y = m(x)
    >>> checkpoint_segments(m, 2)
    3
    >>> torch.equal(m(x), y)
    True
    """
    if blocks_per_segment < 1:
        raise TraceError(f"blocks per checkpoint segment must be at least 1, not "
                         f"{blocks_per_segment}")
    blocks = repeated_blocks(model)
    if not blocks:
        raise TraceError(f"{type(model).__name__} has no repeated blocks to checkpoint")
    k = blocks_per_segment
    segments = 0
    for s in range(0, len(blocks), k):
        _wrap_segment(blocks[s:s + k])
        segments += 1
    return segments
