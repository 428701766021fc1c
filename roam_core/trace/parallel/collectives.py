"""The collectives a rank's step issues, as functional ops (``torch.ops._c10d_functional``).

Each call issues one collective and waits for it at once, so the traced graph holds the
collective op and its ``wait_tensor`` next to each other; the planner may move neither across
another collective (``EdgeReason.COLLECTIVE``).  Under the fake process group they move no
data; on real ranks (gloo) the arena runtime runs the same ops.
"""

from __future__ import annotations

import torch

__all__ = ["all_gather", "all_reduce", "reduce_scatter"]

_funcol = torch.ops._c10d_functional


def all_gather(x: torch.Tensor, world_size: int, group: str) -> torch.Tensor:
    """``[W * n]``: the 1-D ``x`` of every rank, rank after rank."""
    return _funcol.wait_tensor(_funcol.all_gather_into_tensor(x, world_size, group))


def reduce_scatter(x: torch.Tensor, op: str, world_size: int, group: str) -> torch.Tensor:
    """``[n / W]``: this rank's chunk of the element-wise reduction (``op``: sum, avg)."""
    return _funcol.wait_tensor(_funcol.reduce_scatter_tensor(x, op, world_size, group))


def all_reduce(x: torch.Tensor, op: str, group: str) -> torch.Tensor:
    """The element-wise reduction of ``x`` over all ranks (a new tensor)."""
    return _funcol.wait_tensor(_funcol.all_reduce(x, op, group))
