"""Estimated time of each op on a device: a roofline plus launch overhead.

For one run of an op on a :class:`DeviceProfile`::

    seconds = max(FLOPs / (peak FLOP/s of its class and dtype x efficiency of its class),
                  bytes read + written / (memory bandwidth x efficiency of its class))
              + launch overhead

FLOPs and bytes are the per-op fields the tracer records (torch's own FLOP formulas,
:func:`~roam_core.model.recompute_ops.op_flops`, and the bytes of the values read and
written, :func:`~roam_core.model.recompute_ops.op_bytes_moved`).  Each op falls in one
:class:`OpClass`; a view (no FLOPs, no bytes) launches no kernel and costs 0.  The FLOP
rate depends on the dtype as torch runs it by default: a float32 matrix product runs on
the float32 (non-tensor) units (``torch.backends.cuda.matmul.allow_tf32`` is off by
default) and a float32 convolution on TF32 tensor cores (``torch.backends.cudnn.allow_tf32``
is on by default); bfloat16 / float16 use the tensor cores.

Limits (stated in ``docs/cost_model.md``): no overlap between kernels, no caches, no
fusion (a re-run op is one kernel, as in eager mode), a fixed efficiency per class rather
than per shape.  The published profiles are in
:mod:`~roam_core.model.device_profiles`; a ``cpu`` profile is measured on the machine by
``roam calibrate``.

Examples
--------
>>> p = DeviceProfile("toy", "a toy", {"float32": 1e12}, 1e12, 1e11, 1e-6,
...                   {"matmul": 0.5, "elementwise": 1.0})
>>> p.rate_flops_per_s(OpClass.MATMUL, "float32")
500000000000.0
>>> roofline_seconds(p, OpClass.MATMUL, "float32", flops=10**9, bytes_moved=10**6)
0.002001
>>> roofline_seconds(p, OpClass.ELEMENTWISE, "float32", flops=0, bytes_moved=10**8)
0.001001
>>> roofline_seconds(p, OpClass.VIEW, "float32", flops=0, bytes_moved=0)
0.0
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph, Op, OpId
from roam_core.model.recompute_ops import op_bytes_moved, op_flops

__all__ = [
    "DeviceProfile",
    "OpClass",
    "op_class",
    "op_dtype",
    "op_seconds",
    "ops_seconds",
    "roofline_seconds",
    "step_seconds",
]


class OpClass(enum.StrEnum):
    """What bounds an op's time: which units it runs on and how well it uses them."""

    MATMUL = "matmul"  # matrix products and attention kernels (FLOPs in torch's counter)
    CONV = "conv"  # convolutions, forward and backward
    ATTENTION = "attention"  # fused attention kernels (SDPA), forward and backward: FLOP rate
    NORM = "norm"  # layer / group / RMS norm forward: bandwidth, its own efficiency
    BATCH_NORM = "batch_norm"  # batch norm forward (training statistics): bandwidth, own
    ELEMENTWISE = "elementwise"  # pointwise ops, reductions, norms: bandwidth
    TRANSCENDENTAL = "transcendental"  # tanh, exp, GELU, softmax...: bandwidth on a GPU,
    # arithmetic on a CPU (its own efficiency, calibrated)
    COPY = "copy"  # copies and concatenations: bandwidth
    VIEW = "view"  # no bytes and no FLOPs: no kernel


#: ATen ops that only move bytes (a copy or a concatenation).
_COPY_TARGETS = ("aten.copy_.", "aten.clone.", "aten._to_copy.", "aten.cat.", "aten.stack.",
                 "aten.new_empty_strided.", "aten.empty_like.", "aten.zeros_like.",
                 "aten.expand_copy.", "aten.slice_scatter.", "aten.select_scatter.")
#: Elementwise ATen ops that evaluate a transcendental function per element.
_TRANSCENDENTAL_TARGETS = tuple(f"aten.{n}." for n in (
    "tanh", "sigmoid", "exp", "exp2", "expm1", "log", "log1p", "log2", "gelu",
    "gelu_backward", "silu", "silu_backward", "_softmax", "_log_softmax", "erf", "erfc",
    "sin", "cos", "softplus", "mish", "elu", "tanh_", "sigmoid_", "exp_", "silu_"))
#: Fused attention kernels (forward and backward): a FLOP rate of their own, as they reach
#: less of the matmul peak than one large product (short rows, small head dims).
_ATTENTION_TARGETS = ("aten._scaled_dot_product_", "aten._flash_attention",
                      "aten._efficient_attention", "aten._cudnn_attention")
#: Normalisation forwards: a reduction plus a pointwise pass over the same bytes, slower
#: per byte than a plain pointwise op (backward ones stay elementwise: never re-run).
_NORM_TARGETS = ("aten.native_layer_norm.", "aten.native_group_norm.", "aten._fused_rms_norm.")
_BATCH_NORM_TARGETS = ("aten.native_batch_norm.", "aten._native_batch_norm_legit",
                       "aten.cudnn_batch_norm.", "aten.miopen_batch_norm.")
_CONV_TARGETS = ("aten.convolution.", "aten.convolution_backward.", "aten._convolution.",
                 "aten.cudnn_convolution", "aten.mkldnn_convolution")


@dataclass(frozen=True)
class DeviceProfile:
    """The speeds of one device, for :func:`roofline_seconds`.

    Parameters
    ----------
    name : str
        The profile's name (``"h100-sxm"``, ``"cpu"``), stated in every output.
    description : str
        One line for people.
    matmul_flops_per_s : Mapping of str to float
        Peak FLOP/s of matrix products by dtype (``"float32"``, ``"tf32"``,
        ``"bfloat16"``, ``"float16"``, ``"float64"``); an unknown dtype takes
        ``"float32"``'s.  Convolutions use these too unless ``conv_flops_per_s`` is given.
    vector_flops_per_s : float
        Peak FLOP/s of other ops that count FLOPs (float32 FMA units).
    memory_bandwidth_bytes_per_s : float
        Peak memory bandwidth.
    launch_overhead_s : float
        Time added to every op that runs a kernel.
    efficiency : Mapping of str to float
        Fraction of the peak each :class:`OpClass` reaches (of the FLOP rate for matmul,
        conv and attention, of the bandwidth for the others); ``"memory"``: of the bandwidth
        for the bytes term of matmul, conv and attention ops (default: the elementwise one).
        A missing class reaches 1, except: transcendental, norm and batch_norm default to the
        elementwise one, attention to the matmul one (so profiles written before these
        classes existed price those ops as before).  ``"transcendental.<function>"``
        (``"transcendental.silu"``): one function's own, where a CPU computes some functions
        much faster than others (default: the transcendental one).
    memory_bytes : int
        Device memory (0: unknown).
    conv_uses_tf32 : bool
        Whether float32 convolutions run on TF32 tensor cores (cuDNN's default in torch).
    source : str
        Where the figures come from (a datasheet, or the calibration run).
    calibrated : Mapping
        For a measured profile: what was measured and on which machine (empty otherwise).
    conv_flops_per_s : Mapping of str to float
        Measured convolution FLOP/s by dtype (a calibrated profile; empty: the matmul rates,
        TF32 for float32 when ``conv_uses_tf32``).
    attention_flops_per_s : Mapping of str to float
        Measured FLOP/s of fused attention by dtype (a calibrated profile; empty: the matmul
        rates x the attention efficiency).
    """

    name: str
    description: str
    matmul_flops_per_s: Mapping[str, float]
    vector_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    launch_overhead_s: float
    efficiency: Mapping[str, float] = field(default_factory=dict)
    memory_bytes: int = 0
    conv_uses_tf32: bool = False
    source: str = ""
    calibrated: Mapping[str, Any] = field(default_factory=dict)
    conv_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    attention_flops_per_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("device profile: name must not be empty")
        rates = [*self.matmul_flops_per_s.values(), *self.conv_flops_per_s.values(),
                 *self.attention_flops_per_s.values(),
                 self.vector_flops_per_s, self.memory_bandwidth_bytes_per_s]
        if "float32" not in self.matmul_flops_per_s or not all(
                isinstance(r, (int, float)) and r > 0 for r in rates):
            raise ConfigError(f"device profile {self.name!r}: every rate must be a positive "
                              "number, float32 matmul included")
        if not self.launch_overhead_s >= 0:
            raise ConfigError(f"device profile {self.name!r}: launch_overhead_s must be at "
                              f"least 0, not {self.launch_overhead_s!r}")
        for k, v in self.efficiency.items():
            if not 0 < v <= 1:
                raise ConfigError(f"device profile {self.name!r}: efficiency of {k!r} must "
                                  f"be in (0, 1], not {v!r}")

    def rate_flops_per_s(self, cls: OpClass, dtype: str) -> float:
        """FLOP/s an op of ``cls`` and ``dtype`` reaches (peak x efficiency)."""
        rates = self.matmul_flops_per_s
        conv = self.conv_flops_per_s
        att = self.attention_flops_per_s
        if cls is OpClass.ATTENTION:
            if att:
                peak = att.get(dtype, att.get("float32", rates["float32"]))
                return peak * self.efficiency.get(cls.value, 1.0)
            return rates.get(dtype, rates["float32"]) * self.efficiency.get(
                cls.value, self.efficiency.get(OpClass.MATMUL.value, 1.0))
        if cls is OpClass.CONV and conv:
            peak = conv.get(dtype, conv.get("float32", rates["float32"]))
        elif cls is OpClass.CONV and dtype == "float32" and self.conv_uses_tf32 \
                and "tf32" in rates:
            peak = rates["tf32"]
        elif cls in (OpClass.MATMUL, OpClass.CONV):
            peak = rates.get(dtype, rates["float32"])
        else:
            peak = self.vector_flops_per_s
        return peak * self.efficiency.get(cls.value, 1.0)

    def bandwidth_bytes_per_s(self, cls: OpClass, function: str = "") -> float:
        """Bytes/s an op of ``cls`` moves (peak x efficiency).  ``function``: a
        transcendental op's function (``"silu"``; a backward takes its forward's), whose
        own efficiency ``"transcendental.<function>"`` is used where the profile has one."""
        fn_key = f"{OpClass.TRANSCENDENTAL.value}.{function.removesuffix('_backward')}"
        if cls is OpClass.TRANSCENDENTAL and function and fn_key in self.efficiency:
            eff = self.efficiency[fn_key]
        elif cls in (OpClass.MATMUL, OpClass.CONV, OpClass.ATTENTION):
            eff = self.efficiency.get("memory", self.efficiency.get("elementwise", 1.0))
        elif cls in (OpClass.TRANSCENDENTAL, OpClass.NORM, OpClass.BATCH_NORM):
            eff = self.efficiency.get(cls.value, self.efficiency.get("elementwise", 1.0))
        else:
            eff = self.efficiency.get(cls.value, 1.0)
        return self.memory_bandwidth_bytes_per_s * eff


def roofline_seconds(profile: DeviceProfile, cls: OpClass, dtype: str, *, flops: int,
                     bytes_moved: int, function: str = "") -> float:
    """One run's estimated seconds: ``max(compute, memory) + launch`` (0 for a view);
    ``function``: see :meth:`DeviceProfile.bandwidth_bytes_per_s`."""
    if cls is OpClass.VIEW or (flops <= 0 and bytes_moved <= 0):
        return 0.0
    t = max(flops / profile.rate_flops_per_s(cls, dtype) if flops > 0 else 0.0,
            bytes_moved / profile.bandwidth_bytes_per_s(cls, function))
    return t + profile.launch_overhead_s


def op_class(graph: Graph, op: Op) -> OpClass:
    """The :class:`OpClass` of ``op``."""
    flops = op_flops(graph, op)
    if flops <= 0 and op_bytes_moved(graph, op) <= 0:
        return OpClass.VIEW
    if op.target.startswith(_CONV_TARGETS):
        return OpClass.CONV
    if op.target.startswith(_ATTENTION_TARGETS):
        return OpClass.ATTENTION
    if flops > 0:
        return OpClass.MATMUL
    if op.target.startswith(_COPY_TARGETS):
        return OpClass.COPY
    if op.target.startswith(_TRANSCENDENTAL_TARGETS):
        return OpClass.TRANSCENDENTAL
    if op.target.startswith(_BATCH_NORM_TARGETS):
        return OpClass.BATCH_NORM
    if op.target.startswith(_NORM_TARGETS):
        return OpClass.NORM
    return OpClass.ELEMENTWISE


def op_dtype(graph: Graph, op: Op) -> str:
    """The dtype ``op`` computes in: its first new storage's, else its first floating input's,
    else ``"float32"``."""
    for s in graph.storages_created(op.id):
        d = graph.tensors[s].dtype
        if "float" in d:
            return d
    for s in graph.storages_read(op.id):
        d = graph.tensors[s].dtype
        if "float" in d:
            return d
    return "float32"


def op_seconds(graph: Graph, op: Op, profile: DeviceProfile) -> float:
    """Estimated seconds of one run of ``op`` on ``profile`` (:func:`roofline_seconds`)."""
    cls = op_class(graph, op)
    fn = op.target.split(".")[1].rstrip("_") if cls is OpClass.TRANSCENDENTAL else ""
    return roofline_seconds(profile, cls, op_dtype(graph, op), flops=op_flops(graph, op),
                            bytes_moved=op_bytes_moved(graph, op), function=fn)


def ops_seconds(graph: Graph, profile: DeviceProfile) -> dict[OpId, float]:
    """:func:`op_seconds` of every op of ``graph``."""
    return {op.id: op_seconds(graph, op, profile) for op in graph.ops}


def step_seconds(graph: Graph, profile: DeviceProfile) -> float:
    """Estimated seconds of the whole step without recomputation (ops run one after
    another, as in eager mode)."""
    return sum(ops_seconds(graph, profile).values())
