"""``roam calibrate``: measure a device profile of the cost model on the machine at hand.

Micro-benchmarks, a few seconds in all, on ``cpu`` (with torch's current thread count,
the one a ``PlannedStep`` runs with) or ``cuda`` (timed with ``torch.cuda.synchronize``):

* **matmul** -- ``torch.mm`` of two ``n x n`` matrices per dtype (float32 on CPU; float32,
  bfloat16 and float16 on CUDA): ``2 n^3`` FLOPs per call;
* **conv** -- a 3x3 ``conv2d`` (float32; on CUDA with cuDNN's default TF32);
* **attention** -- causal ``scaled_dot_product_attention`` (float32), counted as torch's
  flop counter counts it (``4 b h t^2 d``);
* **norm** / **batch_norm** -- ``layer_norm`` over rows, and a training-mode ``batch_norm``
  with running statistics over ``norm_batch`` images of the convolution's channels and half
  its side: input + output bytes per call (a norm reduces and then normalises, slower per
  byte than an add).  A few MiB each, as in a small model's step: their outputs are fresh
  tensors, and a fresh output of tens of MiB would time the page faults of its allocation;
* **elementwise** -- ``torch.add(a, b, out=c)``: 3 x the tensor's bytes per call;
* **transcendental** -- ``torch.tanh(a, out=c)``: 2 x the tensor's bytes per call (a CPU
  evaluates such functions slower than it moves the bytes; a GPU does not), and the same for
  each of :data:`FUNCTIONS` (a CPU's vectorised SiLU runs several times faster than its
  tanh; each function's rate is its own ``transcendental.<name>`` efficiency);
* **copy** -- ``c.copy_(a)``: 2 x the tensor's bytes per call;
* **launch** -- the per-op time of an add of one-element tensors.

The profile's peak bandwidth is the fastest bandwidth class, each class's efficiency its own
rate over that peak, and the matmul, convolution and attention rates are what was measured
(efficiency 1), so :func:`~roam_core.model.cost_model.op_seconds` reproduces the
measurements.  Every timing is a mean over a window of repeated calls (a loaded machine's
preemptions included, as a training step sees them).  The same functions run on CPU
and GPU: only the device, the synchronisation and the dtypes differ.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from roam_core.base.checks import at_least
from roam_core.base.errors import ConfigError
from roam_core.model.cost_model import DeviceProfile
from roam_core.runtime.device import resolve_device

__all__ = ["CalibrationSizes", "Measurement", "calibrate", "measure", "profile_from"]

#: Transcendental functions timed one by one beside tanh (the class's default rate).  GELU
#: is not: its graph op does not say whether it is exact (fast on a CPU) or tanh-approximated
#: (GPT-2's; as slow as tanh), so it keeps tanh's rate.
FUNCTIONS = ("silu", "sigmoid", "exp")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, slots=True)
class CalibrationSizes:
    """Problem sizes of the micro-benchmarks (the defaults take a few seconds on a CPU)."""

    matmul_n: int = 1024
    conv_batch: int = 8
    conv_channels: int = 64
    conv_side: int = 56
    elementwise_elements: int = 8 * 2**20
    launch_calls: int = 400
    attention_batch: int = 8
    attention_heads: int = 8
    attention_seq: int = 128
    attention_head_dim: int = 32
    norm_rows: int = 4096
    norm_width: int = 256
    norm_batch: int = 4

    def __post_init__(self) -> None:
        for name in ("matmul_n", "conv_batch", "conv_channels", "conv_side",
                     "elementwise_elements", "launch_calls", "attention_batch",
                     "attention_heads", "attention_seq", "attention_head_dim", "norm_rows",
                     "norm_width", "norm_batch"):
            at_least(f"calibration {name}", getattr(self, name), 1)


@dataclass(frozen=True, slots=True)
class Measurement:
    """What the micro-benchmarks measured (rates are achieved, not peaks)."""

    device: str
    matmul_flops_per_s: dict[str, float]
    conv_flops_per_s: dict[str, float]
    elementwise_bytes_per_s: float
    transcendental_bytes_per_s: float
    copy_bytes_per_s: float
    launch_s: float
    threads: int
    clock: str = "wall"
    attention_flops_per_s: dict[str, float] = field(default_factory=dict)
    norm_bytes_per_s: float | None = None
    batch_norm_bytes_per_s: float | None = None
    function_bytes_per_s: dict[str, float] = field(default_factory=dict)


def _per_call_s(fn: Callable[[], object], sync: Callable[[], None], budget_s: float,
                calls: int = 1, min_runs: int = 3,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of ``fn``: the total time of repeated runs (``calls`` calls each)
    over the calls made, until ``budget_s`` is spent and at least ``min_runs`` runs are
    made, after one warm-up run.  A mean over the whole window, not a median: on a shared
    machine a training step is preempted as often as the window, so the rate matches what
    a step sees.  ``clock``: ``time.process_time`` counts only the CPU time this process
    got (a CPU measured on a loaded machine)."""
    fn()
    sync()
    n = 0
    t0, w0 = clock(), time.perf_counter()
    runs = 0
    while runs < min_runs or time.perf_counter() < w0 + budget_s:
        for _ in range(calls):
            fn()
        sync()
        n += calls
        runs += 1
    return (clock() - t0) / n


def measure(device: str = "cpu", *, seconds: float = 3.0,
            sizes: CalibrationSizes | None = None,
            dtypes: Sequence[str] | None = None, clock: str = "wall") -> Measurement:
    """Run the micro-benchmarks on ``device`` for about ``seconds`` in all.

    Parameters
    ----------
    device : str
        ``"cpu"`` or ``"cuda"``.
    seconds : float
        Wall time to spend (split between the benchmarks).
    sizes : CalibrationSizes, optional
        Problem sizes.
    dtypes : sequence of str, optional
        Matmul dtypes (default: float32 on CPU; float32, bfloat16, float16 on CUDA).
    clock : {"wall", "cpu"}
        Wall time (default), or this process's CPU time (CPU only: a measurement that a
        loaded machine's other processes do not slow down; with one thread it is the
        unloaded wall time).

    Raises
    ------
    ExecutorError
        ``device`` is unknown, or CUDA is asked for and absent.
    """
    at_least("calibration seconds", seconds, 0.0)
    dev = resolve_device(device)
    if clock not in ("wall", "cpu") or (clock == "cpu" and dev.type != "cpu"):
        raise ConfigError(f"calibration clock {clock!r}: 'wall', or 'cpu' on the CPU")
    tick = time.process_time if clock == "cpu" else time.perf_counter
    sz = sizes or CalibrationSizes()
    dts = tuple(dtypes) if dtypes is not None else (
        ("float32",) if dev.type == "cpu" else ("float32", "bfloat16", "float16"))

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    share = seconds / (len(dts) + 8 + len(FUNCTIONS))
    mm: dict[str, float] = {}
    n = sz.matmul_n
    with torch.no_grad():
        for name in dts:
            a = torch.randn(n, n, device=dev).to(_DTYPES[name])
            b = torch.randn(n, n, device=dev).to(_DTYPES[name])
            c = torch.empty(n, n, device=dev, dtype=_DTYPES[name])
            mm[name] = 2.0 * n**3 / _per_call_s(functools.partial(torch.mm, a, b, out=c),
                                               sync, share, clock=tick)
        ch, side = sz.conv_channels, sz.conv_side
        x = torch.randn(sz.conv_batch, ch, side, side, device=dev)
        w = torch.randn(ch, ch, 3, 3, device=dev)
        conv_flops = 2.0 * sz.conv_batch * ch * side * side * ch * 9
        conv = {"float32": conv_flops / _per_call_s(
            lambda: torch.nn.functional.conv2d(x, w, padding=1), sync, share, clock=tick)}
        att, norm, bnorm = _norm_and_attention(dev, sz, sync, share, tick)
        m = sz.elementwise_elements
        a1 = torch.randn(m, device=dev)
        b1 = torch.randn(m, device=dev)
        c1 = torch.empty(m, device=dev)
        nbytes = 4.0 * m
        elem = 3 * nbytes / _per_call_s(lambda: torch.add(a1, b1, out=c1), sync, share,
                                        clock=tick)
        trans = 2 * nbytes / _per_call_s(lambda: torch.tanh(a1, out=c1), sync, share,
                                         clock=tick)
        # out= variants, as tanh: a fresh 32 MiB output per call would time page faults
        aten = torch.ops.aten
        funcs = {f: 2 * nbytes / _per_call_s(functools.partial(getattr(aten, f).out, a1,
                                                                out=c1),
                                             sync, share, clock=tick) for f in FUNCTIONS}
        copy = 2 * nbytes / _per_call_s(lambda: c1.copy_(a1), sync, share, clock=tick)
        t1 = torch.ones(1, device=dev)
        t2 = torch.ones(1, device=dev)
        t3 = torch.empty(1, device=dev)
        launch = _per_call_s(lambda: torch.add(t1, t2, out=t3), sync, share,
                             calls=sz.launch_calls, clock=tick)
    return Measurement(dev.type, mm, conv, elem, trans, copy, launch, torch.get_num_threads(),
                       clock, att, norm, bnorm, funcs)


def _norm_and_attention(dev: torch.device, sz: CalibrationSizes, sync: Callable[[], None],
                        share: float, tick: Callable[[], float],
                        ) -> tuple[dict[str, float], float, float]:
    """Attention FLOP/s (float32), layer-norm and batch-norm bytes/s, timed like the rest."""
    fn = torch.nn.functional
    b, h, t, d = (sz.attention_batch, sz.attention_heads, sz.attention_seq,
                  sz.attention_head_dim)
    q, k, v = (torch.randn(b, h, t, d, device=dev) for _ in range(3))
    att = {"float32": 4.0 * b * h * t * t * d / _per_call_s(
        lambda: fn.scaled_dot_product_attention(q, k, v, is_causal=True), sync, share,
        clock=tick)}
    rows = torch.randn(sz.norm_rows, sz.norm_width, device=dev)
    w, bias = torch.ones(sz.norm_width, device=dev), torch.zeros(sz.norm_width, device=dev)
    norm = 2 * 4.0 * rows.numel() / _per_call_s(
        lambda: fn.layer_norm(rows, (sz.norm_width,), w, bias), sync, share, clock=tick)
    ch, side = sz.conv_channels, max(1, sz.conv_side // 2)
    x = torch.randn(sz.norm_batch, ch, side, side, device=dev)
    mean, var = torch.zeros(ch, device=dev), torch.ones(ch, device=dev)
    cw, cb = torch.ones(ch, device=dev), torch.zeros(ch, device=dev)
    bnorm = 2 * 4.0 * x.numel() / _per_call_s(
        lambda: fn.batch_norm(x, mean, var, cw, cb, training=True), sync, share, clock=tick)
    return att, norm, bnorm


def profile_from(m: Measurement, *, name: str | None = None,
                 seconds: float | None = None) -> DeviceProfile:
    """The :class:`DeviceProfile` that reproduces a :class:`Measurement`."""
    norms = {k: r for k, r in (("norm", m.norm_bytes_per_s),
                               ("batch_norm", m.batch_norm_bytes_per_s)) if r is not None}
    funcs = {f"transcendental.{f}": r for f, r in m.function_bytes_per_s.items()}
    bw = max(m.elementwise_bytes_per_s, m.copy_bytes_per_s, m.transcendental_bytes_per_s,
             *norms.values(), *funcs.values())
    rates = dict(m.matmul_flops_per_s)
    top = max(rates.values())
    try:
        load = os.getloadavg()[0]
    except OSError:  # not on every platform
        load = None
    cal = {"device": m.device, "threads": m.threads, "clock": m.clock, "nproc": os.cpu_count(),
           "load_avg_1min": load, "machine": platform.machine(),
           "processor": platform.processor() or platform.machine(),
           "torch": torch.__version__, "seconds": seconds,
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "measured": {"matmul_flops_per_s": rates,
                        "conv_flops_per_s": dict(m.conv_flops_per_s),
                        "attention_flops_per_s": dict(m.attention_flops_per_s),
                        **{f"{k}_bytes_per_s": r for k, r in norms.items()},
                        "function_bytes_per_s": dict(m.function_bytes_per_s),
                        "elementwise_bytes_per_s": m.elementwise_bytes_per_s,
                        "transcendental_bytes_per_s": m.transcendental_bytes_per_s,
                        "copy_bytes_per_s": m.copy_bytes_per_s, "launch_s": m.launch_s}}
    kind = "CPU" if m.device == "cpu" else "GPU"
    return DeviceProfile(
        name or m.device,
        f"this machine's {kind} as measured by roam calibrate ({m.threads} threads)"
        if m.device == "cpu" else "this machine's GPU as measured by roam calibrate",
        rates, top, bw, m.launch_s,
        {"elementwise": m.elementwise_bytes_per_s / bw, "copy": m.copy_bytes_per_s / bw,
         "transcendental": m.transcendental_bytes_per_s / bw,
         "memory": m.elementwise_bytes_per_s / bw, **{k: r / bw for k, r in norms.items()},
         **{k: r / bw for k, r in funcs.items()}},
        0, False, "roam calibrate (micro-benchmarks: matmul, conv, attention, elementwise, "
        "tanh, silu, sigmoid, exp, layer norm, batch norm, copy, launch)",
        cal, dict(m.conv_flops_per_s), dict(m.attention_flops_per_s))


def calibrate(device: str = "cpu", *, seconds: float = 3.0,
              sizes: CalibrationSizes | None = None, clock: str = "wall") -> DeviceProfile:
    """Measure ``device`` (:func:`measure`) and return its profile (:func:`profile_from`),
    named ``"cpu"`` or ``"cuda"``.  On CPU, dtypes other than float32 take float32's rate."""
    return profile_from(measure(device, seconds=seconds, sizes=sizes, clock=clock),
                        seconds=seconds)
