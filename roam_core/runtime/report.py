"""The :class:`ExecutionReport` record (plain data, no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["REQUIRED_KEYS", "ExecutionReport"]

#: Keys every report JSON has (``roam execute`` promises these).
REQUIRED_KEYS = ("device", "arena_bytes", "max_abs_diff", "eager_peak_allocated_bytes",
                 "planned_peak_allocated_bytes", "extra_bytes")


@dataclass(frozen=True, slots=True)
class ExecutionReport:
    """What running a plan for real showed, next to eager PyTorch.

    Figures that cannot be measured on the device are ``None`` (the CUDA allocator peaks on
    CPU).

    Parameters
    ----------
    device : str
        ``"cpu"`` or ``"cuda"`` (with the GPU name in ``device_name``).
    arena_bytes : int
        Size of the one arena holding every planned and resident storage.
    max_abs_diff : float
        Largest absolute difference between the eager and the planned step over the loss,
        the updated parameters, buffers and optimizer state (first step).
    numerics_ok : bool
        True when every compared value is within tolerance (bit-equal on CPU).
    worst_value : str
        The value with the largest difference (``""`` when all are equal).
    loss_eager, loss_planned : float
        The loss of the first step, eager and planned.
    eager_peak_allocated_bytes, eager_peak_reserved_bytes : int or None
        ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` of an eager step
        (fresh process, after a warm-up step).
    planned_peak_allocated_bytes, planned_peak_reserved_bytes : int or None
        The same for the planned replay (the arena included).
    extra_bytes : int
        Peak bytes of temporaries outside the arena: on CUDA the measured
        ``planned_peak_allocated_bytes - arena_bytes``; elsewhere the largest group of
        fallback temporaries alive at once (counted by the replay).
    extra_bytes_counted : int
        The counted figure (fallback temporaries), on every device.
    out_variant_ops, factory_ops, fallback_ops : int
        How many ops wrote into their slots through ``out=``, were filled in place, or were
        computed into a temporary and copied.
    fallback_targets : tuple of str
        The ATen ops that took the fallback path.
    checked_values : int
        Tensors whose address was verified (0 when address checks were off).
    seconds_per_step_eager, seconds_per_step_planned : float or None
        Mean wall time of one step.
    steps : int
        Steps run (numerics are compared on the first).
    planned_peak_bytes : int
        The plan's simulated peak, for reference.
    measurement : str
        How peaks were measured: ``"subprocess"``, ``"in-process"`` or ``"none"``.
    device_name : str
        GPU name or ``"cpu"``.
    torch_version : str
        ``torch.__version__``.
    notes : tuple of str
        Remarks (e.g. why a figure is missing).
    """

    device: str
    arena_bytes: int
    max_abs_diff: float
    numerics_ok: bool
    worst_value: str
    loss_eager: float
    loss_planned: float
    eager_peak_allocated_bytes: int | None
    eager_peak_reserved_bytes: int | None
    planned_peak_allocated_bytes: int | None
    planned_peak_reserved_bytes: int | None
    extra_bytes: int
    extra_bytes_counted: int
    out_variant_ops: int
    factory_ops: int
    fallback_ops: int
    fallback_targets: tuple[str, ...]
    checked_values: int
    seconds_per_step_eager: float | None
    seconds_per_step_planned: float | None
    steps: int
    planned_peak_bytes: int = 0
    measurement: str = "none"
    device_name: str = "cpu"
    torch_version: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists).

        Examples
        --------
        >>> r = ExecutionReport("cpu", 1024, 0.0, True, "", 1.0, 1.0, None, None, None, None,
        ...                     0, 0, 3, 1, 0, (), 9, 0.1, 0.2, 1)
        >>> d = r.to_dict()
        >>> d["eager_peak_allocated_bytes"] is None, d["fallback_targets"]
        (True, [])
        """
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    def summary(self) -> str:
        """A few human-readable lines."""

        def mib(b: int | None) -> str:
            if b is None:
                return "n/a"
            return f"{b / 2**20:,.1f} MiB" if b >= 2**20 else f"{b / 2**10:,.1f} KiB"

        lines = [
            f"device {self.device_name} ({self.device}), {self.steps} step(s)",
            f"numerics: max |eager - planned| = {self.max_abs_diff:.3g} "
            f"({'ok' if self.numerics_ok else 'MISMATCH at ' + self.worst_value}); "
            f"loss {self.loss_eager:.6g} vs {self.loss_planned:.6g}",
            f"arena {mib(self.arena_bytes)} (plan peak {mib(self.planned_peak_bytes)}), "
            f"extra outside arena {mib(self.extra_bytes)}",
            f"peak allocated: eager {mib(self.eager_peak_allocated_bytes)}, planned "
            f"{mib(self.planned_peak_allocated_bytes)}; reserved: eager "
            f"{mib(self.eager_peak_reserved_bytes)}, planned "
            f"{mib(self.planned_peak_reserved_bytes)}",
            f"ops: {self.out_variant_ops} out=, {self.factory_ops} factory, "
            f"{self.fallback_ops} fallback ({', '.join(self.fallback_targets) or '-'})",
        ]
        if self.seconds_per_step_eager is not None and self.seconds_per_step_planned is not None:
            lines.append(f"time/step: eager {self.seconds_per_step_eager * 1e3:.1f} ms, "
                         f"planned {self.seconds_per_step_planned * 1e3:.1f} ms")
        lines.extend(self.notes)
        return "\n".join(lines)
