"""The "Verify" card's glue: may this plan be run here, run it, and the report's rows.

The web server never imports torch.  CUDA is detected once per process by
:func:`cuda_status` (cheap checks first, then ``torch.cuda.is_available()`` in a
subprocess); :func:`run_verify` runs in a background job and imports
:mod:`roam_core.runtime` there.  It rebuilds the zoo step from the graph's ``origin``,
re-traces it, checks the fingerprint, runs eager and the planned one-arena replay, and
stores the :class:`~roam_core.runtime.report.ExecutionReport` as JSON in the shared cache
(the browser holds only keys).  No Dash here: every function is tested with plain values.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from app.core import state
from app.core.formatting import fmt_bytes
from roam_core.base.errors import ExecutorError
from roam_core.model.graph import Graph
from roam_core.model.parallel import parallel_of

__all__ = [
    "DEVICE_LABELS",
    "MAX_CPU_OPS",
    "MAX_CPU_RESIDENT_BYTES",
    "NO_CUDA",
    "Availability",
    "CudaStatus",
    "VerifyChoices",
    "VerifyResult",
    "availability",
    "cached_result",
    "cuda_status",
    "probe_cuda",
    "rebuild_reason",
    "report_rows",
    "result_key",
    "run_verify",
    "verify_options",
    "zero_loss",
]

_logger = logging.getLogger(__name__)

#: "Verify on CPU" is offered only for graphs this small (a CPU step of a big model is slow).
MAX_CPU_OPS = 3000
MAX_CPU_RESIDENT_BYTES = 512 * 2**20
NO_CUDA = "no CUDA device visible to the server"
DEVICE_LABELS = {"cuda": "GPU (CUDA)", "cpu": "CPU"}
#: Measured steps after the numerics step (their mean is the time per step).
STEPS = {"cpu": 1, "cuda": 3}
#: A stored verification (JSON): ``key``, ``device``, ``report``
#: (``ExecutionReport.to_dict()``) and ``wall_time_s``.
VerifyResult = dict[str, Any]
_PROBE = ("import torch; ok = torch.cuda.is_available(); "
          "print(ok, torch.cuda.get_device_name(0) if ok else '')")


@dataclass(frozen=True, slots=True)
class CudaStatus:
    """Whether a CUDA device is visible to the server's processes, and why not."""

    available: bool
    reason: str = ""
    device_name: str = ""


def probe_cuda(timeout_s: float = 120.0) -> CudaStatus:
    """Detect CUDA without importing torch in this process.

    No NVIDIA device node, no ``nvidia-smi`` or an empty ``CUDA_VISIBLE_DEVICES`` answer at
    once; otherwise ``torch.cuda.is_available()`` runs in a subprocess.

    Examples
    --------
    >>> probe_cuda().available in (True, False)
    True
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return CudaStatus(False, f"{NO_CUDA} (CUDA_VISIBLE_DEVICES is empty)")
    if not glob.glob("/dev/nvidia[0-9]*") and shutil.which("nvidia-smi") is None:
        return CudaStatus(False, NO_CUDA)
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return CudaStatus(False, f"{NO_CUDA} (probe failed: {e})")
    first, _, name = out.stdout.strip().partition(" ")
    if out.returncode != 0 or first != "True":
        why = (out.stderr.strip().splitlines() or ["torch.cuda.is_available() is False"])[-1]
        return CudaStatus(False, f"{NO_CUDA} ({why[:200]})")
    return CudaStatus(True, "", name.strip())


@functools.lru_cache(maxsize=1)
def cuda_status() -> CudaStatus:
    """:func:`probe_cuda`, run once per process (``create_app`` calls it at start-up)."""
    status = probe_cuda()
    _logger.info("CUDA for Verify: %s", status)
    return status


def rebuild_reason(graph: Graph) -> str | None:
    """Why the step of ``graph`` cannot be rebuilt from its ``origin`` (``None``: it can).

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> rebuild_reason(chain3())
    'custom graph: it cannot be rebuilt from the file (run roam_core.execute_plan from Python)'
    """
    source = graph.origin.get("source", "custom")
    if source != "zoo":
        return (f"{source} graph: it cannot be rebuilt from the file "
                "(run roam_core.execute_plan from Python)")
    if not graph.origin.get("model"):
        return "the graph's origin names no zoo model"
    par = parallel_of(graph)
    if par.active:
        return (f"the step of one rank of {par.describe()}: it runs on {par.world_size} "
                f"ranks (roam train {graph.origin['model']} --parallel {par.kind} "
                f"--world-size {par.world_size})")
    return None


def _size_reason(graph: Graph) -> str | None:
    n, res = len(graph.ops), graph.resident_bytes()
    if n > MAX_CPU_OPS:
        return f"too large for CPU: {n:,} ops (limit {MAX_CPU_OPS:,})"
    if res > MAX_CPU_RESIDENT_BYTES:
        return (f"too large for CPU: {fmt_bytes(res)} resident "
                f"(limit {fmt_bytes(MAX_CPU_RESIDENT_BYTES)})")
    return None


@dataclass(frozen=True, slots=True)
class Availability:
    """Which devices may verify the current plan; a reason for each one that may not."""

    reasons: Mapping[str, str | None]  # device -> None (allowed) or why not

    @property
    def allowed(self) -> tuple[str, ...]:
        """Allowed devices, GPU first."""
        return tuple(d for d in ("cuda", "cpu") if self.reasons.get(d) is None)

    def options(self) -> list[dict[str, str | bool]]:
        """``dcc.RadioItems`` options (:meth:`note` says why some are disabled)."""
        return [{"label": DEVICE_LABELS[d], "value": d, "disabled": r is not None}
                for d, r in self.reasons.items()]

    def note(self) -> str:
        """One line with the reasons (empty when everything is allowed)."""
        parts = [f"{DEVICE_LABELS[d]}: {r}" for d, r in self.reasons.items() if r]
        if parts and len(set(self.reasons.values())) == 1:
            return f"Verify is off: {next(iter(self.reasons.values()))}"
        return "; ".join(parts)


def availability(graph: Graph, plan_key: str | None, cuda: CudaStatus) -> Availability:
    """May the plan be verified on the GPU and on the CPU?

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> availability(chain3(), None, CudaStatus(False, NO_CUDA)).note()
    'Verify is off: plan the graph first'
    """
    common = None if plan_key else "plan the graph first"
    common = common or rebuild_reason(graph)
    return Availability({"cuda": common or (None if cuda.available else cuda.reason or NO_CUDA),
                         "cpu": common or _size_reason(graph)})


class VerifyChoices(TypedDict):
    """What the Verify card shows for a graph and plan."""

    options: list[dict[str, str | bool]]  # radio items, disabled ones with the reason
    value: str | None  # the device picked
    note: str  # why some devices are off
    disabled: bool  # the Verify button


def verify_options(graph_key: str | None, plan_key: str | None,
                   current: str | None = None) -> VerifyChoices:
    """What the card shows for this graph and plan.

    Returns
    -------
    dict
        ``options`` (radio items), ``value`` (``current`` if still allowed, else the first
        allowed device, else ``None``), ``note`` (reasons) and ``disabled`` (the button).
    """
    if not graph_key:
        av = Availability({"cuda": "load a graph first", "cpu": "load a graph first"})
    else:
        av = availability(state.get_graph(graph_key), plan_key, cuda_status())
    allowed = av.allowed
    value = current if current in allowed else (allowed[0] if allowed else None)
    return {"options": av.options(), "value": value, "note": av.note(),
            "disabled": value is None}


def result_key(graph_key: str, plan_key: str, device: str) -> str:
    """Cache key of a verification report."""
    return f"v-{graph_key}-{plan_key}-{device}"


def cached_result(graph_key: str | None, plan_key: str | None, device: str | None
                  ) -> VerifyResult | None:
    """The stored result of verifying this plan on ``device`` (``None`` if never run)."""
    if not (graph_key and plan_key and device):
        return None
    return state.get_json(result_key(graph_key, plan_key, device))


def run_verify(graph_key: str, plan_key: str, device: str) -> VerifyResult:
    """Run the plan for real on ``device`` (in a background job); store and return the result.

    torch and :mod:`roam_core.runtime` are imported here, in the job's process.

    Returns
    -------
    dict
        ``{"key", "device", "report" (ExecutionReport.to_dict()), "wall_time_s"}``.

    Raises
    ------
    ExecutorError
        The device is not allowed for this graph (with the reason) or execution failed.
    PlanFormatError
        The re-traced step is not the plan's graph.
    """
    graph = state.get_graph(graph_key)
    cuda = cuda_status() if device == "cuda" else CudaStatus(False, NO_CUDA)
    reason = availability(graph, plan_key, cuda).reasons.get(device, f"unknown device {device}")
    if reason:
        raise ExecutorError(f"cannot verify on {DEVICE_LABELS.get(device, device)}: {reason}")
    plan = state.get_plan(plan_key)
    from roam_core.runtime.origin import execute_graph

    t0 = time.perf_counter()
    report = execute_graph(graph, plan, device=device, steps=STEPS[device], strict=False)
    key = result_key(graph_key, plan_key, device)
    result = {"key": key, "device": device, "report": report.to_dict(),
              "wall_time_s": round(time.perf_counter() - t0, 3)}
    state.put_json(key, result)
    return result


def _mib(b: int | None) -> str:
    return "n/a" if b is None else fmt_bytes(int(b))


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:,.1f} ms"


#: What a pass proves when the loss is zero (the ROAM paper's loss: every gradient is zero).
ZERO_LOSS_NOTE = (
    "little: the loss is 0. {why}every gradient is then zero, so eager and the plan agree on "
    "the forward and the optimizer step, not on real gradients. Trace the model with setting "
    "'steady' (real labels) for a check that means more.")


def _loss(x: object) -> str:
    """A loss for people: ``-0`` is ``0``."""
    try:
        v = float(x)  # type: ignore[arg-type]  # a JSON number, or missing (nan)
    except (TypeError, ValueError):
        return "n/a"
    return "0" if v == 0 else f"{v:.6g}"


def zero_loss(report: Mapping[str, Any]) -> bool:
    """Whether both runs' loss is exactly zero (a pass then proves little).

    >>> zero_loss({"loss_eager": -0.0, "loss_planned": 0.0}), zero_loss({"loss_eager": 2.3})
    (True, False)
    """
    try:
        return float(report.get("loss_eager", 1)) == 0 == float(report.get("loss_planned", 1))
    except (TypeError, ValueError):
        return False


def report_rows(report: Mapping[str, Any], setting: str | None = None
                ) -> tuple[bool, list[tuple[str, str]]]:
    """``(passed, rows)`` of an ``ExecutionReport.to_dict()`` for the result table.

    A report passes when the planned step matches eager (bit-equal on CPU, within
    tolerance on CUDA).  A zero loss (the ROAM paper's setting, ``setting="roam"``: cross
    entropy against all-zero targets) adds a first row saying what the pass proves.

    Examples
    --------
    >>> ok, rows = report_rows({"numerics_ok": True, "max_abs_diff": 0.0, "device": "cpu",
    ...                         "arena_bytes": 2048})
    >>> ok, rows[0], rows[2]
    (True, ('result', 'pass'), ('arena', '2.00 KiB'))
    >>> report_rows({"numerics_ok": True, "loss_eager": -0.0, "loss_planned": -0.0},
    ...             "roam")[1][0][1].startswith("little: the loss is 0. ")
    True
    """
    r = report
    ok = bool(r.get("numerics_ok"))
    dev, name = r.get("device", "?"), r.get("device_name") or r.get("device", "?")
    worst = r.get("worst_value") or ""
    rows = [
        ("result", "pass" if ok else f"FAIL (worst: {worst})" if worst else "FAIL"),
        ("device", (name if name == dev else f"{name} ({dev})")
         + f", {r.get('steps', 1)} measured step(s)"),
        ("arena", _mib(r.get("arena_bytes"))),
        ("max |eager − planned|", f"{float(r.get('max_abs_diff', 0.0)):.3g}"),
        ("loss eager / planned", f"{_loss(r.get('loss_eager'))} / "
                                 f"{_loss(r.get('loss_planned'))}"),
        ("peak allocated eager / planned", f"{_mib(r.get('eager_peak_allocated_bytes'))} / "
                                           f"{_mib(r.get('planned_peak_allocated_bytes'))}"),
        ("peak reserved eager / planned", f"{_mib(r.get('eager_peak_reserved_bytes'))} / "
                                          f"{_mib(r.get('planned_peak_reserved_bytes'))}"),
        ("extra outside arena", _mib(r.get("extra_bytes"))),
        ("ops out= / factory / fallback", f"{r.get('out_variant_ops', 0)} / "
                                          f"{r.get('factory_ops', 0)} / "
                                          f"{r.get('fallback_ops', 0)}"),
        ("time/step eager / planned", f"{_ms(r.get('seconds_per_step_eager'))} / "
                                      f"{_ms(r.get('seconds_per_step_planned'))}"),
    ]
    if r.get("fallback_targets"):
        rows.append(("fallback ops", ", ".join(r["fallback_targets"])))
    rows += [("note", n) for n in r.get("notes") or ()]
    if ok and zero_loss(r):
        why = ("This graph was traced in the ROAM paper's setting (cross-entropy against "
               "all-zero targets): " if setting == "roam" else "")
        rows.insert(0, ("what the pass proves", ZERO_LOSS_NOTE.format(why=why)))
    return ok, rows
