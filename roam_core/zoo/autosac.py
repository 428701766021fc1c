"""torch's AutoSAC as a recomputation peer: its ILP's decisions, run in the model, traced.

AutoSAC (``torch.distributed._tools``) plans selective activation checkpointing in two
levels: ``sac_milp`` picks the modules to checkpoint and the share of each one's activation
memory to discard under a memory budget (from per-module statistics: ``MemTracker``,
``RuntimeEstimator``, ``SACEstimator`` with piecewise-linear trade-off fits, ``pwlf``), and
``get_optimal_checkpointing_policy_per_module`` picks which operators of a module to save
(``pulp``'s CBC solver, both levels).  Here:

* the statistics are collected on the zoo model under ``FakeTensorMode`` on the CPU, with
  the per-operator runtimes of **roam's cost model** (:mod:`roam_core.model.cost_model`,
  the same device profile as roam): torch's own estimators need CUDA (its roofline reads the
  device's properties, its benchmark mode times CUDA events), and the same prices make the
  comparison like for like;
* modules called twice in one forward (a shared dropout) are listed once in the module
  orders (``parse_module_info`` assumes one call each);
* the ILP runs at ``points`` budgets evenly spaced between the smallest it finds feasible
  (bisection) and its own estimate of the peak without checkpointing (its memory model, not
  roam's);
* each decision is applied to the model as torch would run it -- every chosen module wrapped
  in ``torch.utils.checkpoint`` with its per-operator policy
  (``create_selective_checkpoint_contexts``) -- and traced by roam
  (:func:`~roam_core.zoo.torch_checkpoint.trace_checkpointed`), so its re-runs are real
  graph ops that the same simulator, planner stages and cost model score.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from roam_core.model.cost_model import DeviceProfile, OpClass, roofline_seconds
from roam_core.model.graph import Graph
from roam_core.zoo.torch_checkpoint import trace_checkpointed, zoo_step_of

__all__ = ["AUTOSAC_POINTS", "AutoSacDecision", "AutoSacResult", "autosac", "autosac_available"]

#: Budgets the ILP runs at.
AUTOSAC_POINTS = 5
_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AutoSacDecision:
    """One AutoSAC solution, traced.

    Parameters
    ----------
    method : str
        ``"torch_autosac_<k>"`` (``k``: the budget's rank, 0 the tightest).
    memory_budget_bytes : int
        The ILP's budget (AutoSAC's own memory model).
    discard : Mapping of str to float
        Module path -> share of its activation memory to discard.
    ilp_recompute_s : float
        The ILP's estimate of the recomputation time (roam's cost model).
    ilp_peak_bytes : int
        The ILP's bound on the peak (its memory model).
    graph : Graph
        The model under these decisions, traced by roam.
    """

    method: str
    memory_budget_bytes: int
    discard: Mapping[str, float]
    ilp_recompute_s: float
    ilp_peak_bytes: int
    graph: Graph


@dataclass(frozen=True, slots=True)
class AutoSacResult:
    """The decisions, or why AutoSAC does not apply (``reason``)."""

    decisions: tuple[AutoSacDecision, ...] = ()
    reason: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def autosac_available() -> str | None:
    """Why AutoSAC cannot run here (``None``: it can)."""
    try:
        import pulp  # type: ignore[import-untyped]  # noqa: F401  # no stubs; only probed
        import pwlf  # type: ignore[import-untyped]  # noqa: F401  # no stubs; only probed
        from torch.distributed._tools import sac_ilp  # noqa: F401
    except ImportError as e:
        return (f"AutoSAC needs pulp and pwlf (the test extra) and torch.distributed._tools: "
                f"{e}")
    return None


def _estimator(profile: DeviceProfile) -> Any:
    """A per-op runtime function for torch's estimators (``(out, milliseconds)``), priced by
    roam's cost model."""
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    def estimate(func: Any, args: Any, kwargs: Any) -> tuple[Any, float]:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        flops = 0
        if packet in flop_registry:
            try:
                flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
            except (TypeError, ValueError, RuntimeError):
                flops = 0
        flat_in, _ = tree_flatten((args, kwargs))
        flat_out, _ = tree_flatten(out)
        tensors = [t for t in (*flat_in, *flat_out) if isinstance(t, torch.Tensor)]
        moved = 0 if torch.Tag.view_copy not in func.tags and func.is_view else sum(
            t.numel() * t.element_size() for t in tensors)
        name = packet.__name__
        cls = (OpClass.VIEW if moved == 0 and flops == 0 else OpClass.CONV
               if "convolution" in name else OpClass.MATMUL if flops else OpClass.ELEMENTWISE)
        dtype = next((str(t.dtype).removeprefix("torch.") for t in flat_out
                      if isinstance(t, torch.Tensor) and t.is_floating_point()), "float32")
        return out, 1e3 * roofline_seconds(profile, cls, dtype, flops=flops, bytes_moved=moved)

    return estimate


def _statistics(graph: Graph, profile: DeviceProfile) -> tuple[Any, Any]:
    """AutoSAC's module graph and the SAC estimator, from one fake training step."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.ilp_utils import aggregate_stats, parse_module_info
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed._tools.sac_estimator import SACEstimator

    est = _estimator(profile)
    # torch's estimators print their total time on exit: keep roam's stdout (--json) clean
    with FakeTensorMode(), contextlib.redirect_stdout(io.StringIO()):
        step = zoo_step_of(graph, device="cpu")
        model, xs = step.model, step.example_inputs
        loss_fn = step.loss_fn or (lambda out: out)  # None: the model returns the loss
        opt = step.optimizer_factory(list(model.parameters()))
        mem = MemTracker()
        mem.track_external(model, opt)
        with mem:
            loss_fn(model(*xs)).backward()
            opt.step()
            opt.zero_grad()
        rt = RuntimeEstimator()
        rt("operator-level-cost-model")
        rt._estimate = est  # torch's estimators need CUDA: roam's cost model prices the ops
        with rt:
            loss_fn(model(*xs)).backward()
        sac = SACEstimator()
        sac("operator-level-cost-model")
        sac._estimate_runtime = est
        with sac:
            loss = loss_fn(model(*xs))
        loss.backward()
    info = aggregate_stats(model, mem, rt, sac, torch.device("cpu"))
    for k, v in info["mod_order"].items():  # a module called twice is one node
        info["mod_order"][k] = list(dict.fromkeys(v))  # type: ignore[literal-required,call-overload]  # torch's TypedDict, values are lists
    return parse_module_info(info), sac


def _budgets(g: Any, points: int) -> list[tuple[float, Any]]:
    """``(budget GiB, sac_milp solution)`` at ``points`` budgets from the smallest feasible
    one (bisection) to AutoSAC's estimate of the peak without checkpointing."""
    from torch.distributed._tools.ilp_utils import get_peak_memory_runtime_baseline
    from torch.distributed._tools.sac_ilp import sac_milp

    peak, _ = get_peak_memory_runtime_baseline(g)
    hi = peak / 2**30
    lo, top = 0.0, hi
    for _ in range(12):
        mid = (lo + top) / 2
        if sac_milp(g, memory_budget=mid)[2] >= 0:
            top = mid
        else:
            lo = mid
    out = []
    for i in range(points):
        b = top + (hi - top) * i / max(points, 1)
        sol = sac_milp(g, memory_budget=b)
        if sol[2] >= 0 and sol[0]:
            out.append((b, sol))
    return out


def autosac(graph: Graph, profile: DeviceProfile, points: int = AUTOSAC_POINTS
            ) -> AutoSacResult:
    """AutoSAC's decisions for a zoo graph at ``points`` budgets, each traced (see the
    module docstring); ``reason`` says why not when it does not apply."""
    if (graph.origin or {}).get("source") != "zoo":
        return AutoSacResult(reason="the graph is not a zoo model's trace: AutoSAC needs the "
                                    "model")
    precision = str((graph.origin or {}).get("precision", "fp32"))
    if precision != "fp32":  # its statistics run the model in fp32: another step's numbers
        return AutoSacResult(reason=f"the step is traced in {precision}; roam runs AutoSAC's "
                                    "statistics in fp32 only")
    why = autosac_available()
    if why is not None:
        return AutoSacResult(reason=why)
    from torch.distributed._tools.sac_estimator import _ADDITIONAL_IGNORED_OPS
    from torch.distributed._tools.sac_ilp import get_optimal_checkpointing_policy_per_module

    logging.getLogger("torch.distributed._tools.sac_ilp").setLevel(logging.CRITICAL)
    try:
        g, sac = _statistics(graph, profile)
        sols = _budgets(g, points)
    except Exception as e:  # torch's private tools: any failure is "not applicable"
        return AutoSacResult(reason=f"AutoSAC's statistics or ILP failed on the CPU: "
                                    f"{type(e).__name__}: {e}")
    out: list[AutoSacDecision] = []
    notes: list[str] = []
    for k, (b, (discard, rct_ms, peak)) in enumerate(sols):
        pols: dict[str, list[int]] = {}
        try:
            for fqn, r in discard.items():
                path = fqn.split(".", 1)[1] if "." in fqn else ""
                pol = get_optimal_checkpointing_policy_per_module(sac.sac_mod_stats[fqn],
                                                                  memory_budget=1.0 - r)
                if path and pol:
                    pols[path] = pol
        except Exception as e:  # torch's private per-module ILP (pulp) found no solution
            notes.append(f"torch_autosac_{k}: torch's per-module policy ILP failed "
                         f"({type(e).__name__}: {e}); this budget is left out")
            continue
        # a module inside another chosen one runs inside its checkpoint: keep the outer
        outer = {p: v for p, v in pols.items()
                 if not any(p != q and p.startswith(q + ".") for q in pols)}
        try:
            traced = trace_checkpointed(graph, policies=outer,
                                        skip_ops=frozenset(_ADDITIONAL_IGNORED_OPS),
                                        name_suffix=f"autosac{k}")
        except Exception as e:
            notes.append(f"torch_autosac_{k}: its policy could not be traced ({e})")
            continue
        out.append(AutoSacDecision(f"torch_autosac_{k}", int(b * 2**30), dict(discard),
                                   rct_ms / 1e3, int(peak), traced))
    return AutoSacResult(tuple(out), None, tuple(notes))
