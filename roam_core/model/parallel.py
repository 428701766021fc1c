"""The data-parallel setting of a traced step: which program every rank runs.

A graph traced with ``parallel="fsdp"`` or ``"ddp"`` (``docs/parallel.md``) is the step of
*one* rank of a world of ``world_size`` ranks; every rank runs the same program on its own
batch and its own shard, so one plan serves them all.  The setting is recorded in the graph's
origin (``Graph.origin["parallel"]``) and read back with :func:`parallel_of`.

Which ops are collectives is decided here too (:func:`is_collective`), from the op target
alone, so that the tracer, the validator and the app agree.

Examples
--------
>>> s = ParallelSetting("fsdp", 8)
>>> s.describe()
'fsdp, world size 8, reshard after forward, wrap blocks'
>>> ParallelSetting.from_mapping(s.to_dict()) == s
True
>>> is_collective("_c10d_functional.all_gather_into_tensor.default")
True
>>> is_collective("_c10d_functional.wait_tensor.default")
False
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from roam_core.base.checks import at_least
from roam_core.base.errors import ConfigError

__all__ = [
    "PARALLEL_KINDS",
    "PARALLEL_PRECISIONS",
    "WRAP_POLICIES",
    "ParallelSetting",
    "is_collective",
    "is_wait",
    "parallel_of",
]

#: ``none`` (one device), ``fsdp`` (FSDP2 ``fully_shard``), ``ddp`` (DistributedDataParallel).
PARALLEL_KINDS = ("none", "fsdp", "ddp")

#: Precisions (:mod:`roam_core.trace.precision`) the step of one rank traces in, per kind:
#: ``bf16-mixed`` under FSDP is FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16,
#: reduce_dtype=float32)``; pure ``bf16`` and ``fp16-mixed`` (a grad scaler whose inf check
#: would have to be all-reduced) are not traced for a rank yet.
PARALLEL_PRECISIONS: dict[str, tuple[str, ...]] = {"fsdp": ("fp32", "bf16-mixed"),
                                                   "ddp": ("fp32",)}

#: FSDP wrap policies: ``blocks`` (each child of the model's largest ``ModuleList`` is one
#: unit, plus the root: torchtitan's per-block policy), ``leaves`` (every module that owns
#: parameters), ``root`` (one unit: the whole model).
WRAP_POLICIES = ("blocks", "leaves", "root")

#: DDP's defaults (``DistributedDataParallel(bucket_cap_mb=25)``, first bucket 1 MiB).
_DDP_BUCKET_BYTES = 25 * 2**20
_DDP_FIRST_BUCKET_BYTES = 2**20

#: Namespaces of collective ops (functional collectives and c10d's own ops).
_COLLECTIVE_PREFIXES = ("_c10d_functional.", "c10d_functional.", "c10d.")
_NOT_ISSUING = ("wait_tensor", "barrier")


@dataclass(frozen=True, slots=True)
class ParallelSetting:
    """How the step of one rank is sharded and synchronised.

    Parameters
    ----------
    kind : {"none", "fsdp", "ddp"}
        One device, FSDP2 (parameters, gradients and optimizer state sharded over the
        ranks), or DDP (replicas; gradients all-reduced in buckets).
    world_size : int
        Number of ranks (1 for ``none``).
    reshard_after_forward : bool
        FSDP: free each unit's gathered parameters after its forward and gather them again
        in the backward (FSDP2's default); the root unit never reshards.
    wrap : {"blocks", "leaves", "root"}
        FSDP: which modules become ``fully_shard`` units (:data:`WRAP_POLICIES`).
    bucket_bytes : int
        DDP: bucket capacity (``bucket_cap_mb``).
    first_bucket_bytes : int
        DDP: capacity of the first bucket.
    """

    kind: str = "none"
    world_size: int = 1
    reshard_after_forward: bool = True
    wrap: str = "blocks"
    bucket_bytes: int = _DDP_BUCKET_BYTES
    first_bucket_bytes: int = _DDP_FIRST_BUCKET_BYTES

    def __post_init__(self) -> None:
        if self.kind not in PARALLEL_KINDS:
            raise ConfigError(f"parallel must be one of {', '.join(PARALLEL_KINDS)}, "
                              f"not {self.kind!r}")
        at_least("world size", self.world_size, 1)
        if self.kind == "none" and self.world_size != 1:
            raise ConfigError(f"world size {self.world_size} needs parallel fsdp or ddp "
                              "(--parallel)")
        if self.wrap not in WRAP_POLICIES:
            raise ConfigError(f"the FSDP wrap policy must be one of {', '.join(WRAP_POLICIES)}"
                              f", not {self.wrap!r}")
        at_least("DDP bucket bytes", self.bucket_bytes, 1)
        at_least("DDP first bucket bytes", self.first_bucket_bytes, 1)

    @property
    def active(self) -> bool:
        """Whether the step is data-parallel at all."""
        return self.kind != "none"

    def describe(self) -> str:
        """One line for people: ``"fsdp, world size 8, reshard after forward, wrap blocks"``."""
        if not self.active:
            return "one device"
        parts = [self.kind, f"world size {self.world_size}"]
        if self.kind == "fsdp":
            parts.append("reshard after forward" if self.reshard_after_forward
                         else "no reshard after forward")
            parts.append(f"wrap {self.wrap}")
        else:
            parts.append(f"buckets {self.bucket_bytes / 2**20:g} MiB")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what the graph file's origin records)."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None) -> ParallelSetting:
        """The setting a graph file recorded (``None`` or ``{}``: one device)."""
        if not d:
            return cls()
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


def parallel_of(graph: Any) -> ParallelSetting:
    """The parallel setting recorded in ``graph.origin`` (one device when none is)."""
    origin = getattr(graph, "origin", None) or {}
    return ParallelSetting.from_mapping(origin.get("parallel"))


def is_collective(target: str) -> bool:
    """Whether an op target issues a collective (all-gather, reduce-scatter, all-reduce...).

    Wait ops are not collectives: they only wait for one that was issued.
    """
    if not target.startswith(_COLLECTIVE_PREFIXES):
        return False
    return not any(w in target for w in _NOT_ISSUING)


def is_wait(target: str) -> bool:
    """Whether an op target waits for a collective (``_c10d_functional.wait_tensor``)."""
    return target.startswith(_COLLECTIVE_PREFIXES) and "wait_tensor" in target
