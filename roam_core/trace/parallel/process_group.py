"""A process group for tracing one rank: torch's fake group, made and destroyed in a block.

``dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=W)`` lets one process
trace the step of one rank of a world of any size: collectives are recorded, move no data,
and return tensors of the right shapes (``docs/design/ranks_notes.md``).  The default group is
process-wide state, so :func:`rank_process_group` creates it for the block and destroys it
after, and never replaces a group the caller made: inside a real run (``roam train
--parallel``, gloo ranks) the existing group is used as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.distributed as dist

from roam_core.base.errors import TraceError

__all__ = ["rank_process_group"]


@contextlib.contextmanager
def rank_process_group(world_size: int) -> Iterator[str]:
    """The default process group for tracing, as a block; yields its group name.

    Parameters
    ----------
    world_size : int
        Ranks in the world.  A default group that already exists (a real run) must have
        this size; otherwise a fake one of rank 0 is made and destroyed on exit.

    Raises
    ------
    TraceError
        torch has no ``torch.distributed``, or an existing default group has another size.
    """
    if not dist.is_available():
        raise TraceError("parallel tracing needs torch.distributed, which this torch lacks")
    if dist.is_initialized():
        have = dist.get_world_size()
        if have != world_size:
            raise TraceError(f"a process group of world size {have} exists; cannot trace "
                             f"world size {world_size} in it")
        yield dist.group.WORLD.group_name  # type: ignore[union-attr]  # WORLD set by init
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield dist.group.WORLD.group_name  # type: ignore[union-attr]  # WORLD set by init
    finally:
        dist.destroy_process_group()
