"""Data-parallel steps: trace the program of one rank of FSDP2 or DDP (``docs/parallel.md``).

* :mod:`~roam_core.trace.parallel.layout`: shards, FSDP units and DDP buckets;
* :mod:`~roam_core.trace.parallel.process_group`: the fake process group, as a block;
* :mod:`~roam_core.trace.parallel.fsdp`, :mod:`~roam_core.trace.parallel.ddp`: the rank's
  forward and backward with functional collectives;
* :mod:`~roam_core.trace.parallel.collectives`: the collective calls;
* :mod:`~roam_core.trace.parallel.program`: which program, and precision;
* :mod:`~roam_core.trace.parallel.rank_trace`: what one trace of a rank needs, and
  :func:`shard_model` (a real model cut to one rank's shards, for the runtime).
"""

from roam_core.trace.parallel.layout import RankLayout, ShardedParam, Unit, shard_rows
from roam_core.trace.parallel.process_group import rank_process_group
from roam_core.trace.parallel.program import (
    PARALLEL_PRECISIONS,
    check_parallel_precision,
    rank_program,
)
from roam_core.trace.parallel.rank_trace import RankTrace, as_parallel_setting, shard_model

__all__ = [
    "PARALLEL_PRECISIONS",
    "RankLayout",
    "RankTrace",
    "ShardedParam",
    "Unit",
    "as_parallel_setting",
    "check_parallel_precision",
    "rank_process_group",
    "rank_program",
    "shard_model",
    "shard_rows",
]
