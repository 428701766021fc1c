"""The recomputation peers that run in the model, for ``roam frontier`` and the benchmarks.

* ``torch_checkpoint_blocks`` -- every block wrapped in ``torch.utils.checkpoint`` (the real
  one, beside roam's ``checkpoint_blocks`` drop set on the plain graph);
* ``torch_autosac_<k>`` -- torch's AutoSAC ILP at its budgets (:mod:`roam_core.zoo.autosac`).

Each is the zoo model under torch's own checkpointing, traced by roam
(:mod:`roam_core.zoo.torch_checkpoint`); the frontier plans and prices it like roam's plans
(:func:`roam_core.planner.budget_frontier.recompute_frontier`, ``traced_peers``).
"""

from __future__ import annotations

from typing import Any

from roam_core.model.cost_model import DeviceProfile
from roam_core.model.graph import Graph
from roam_core.zoo.autosac import AUTOSAC_POINTS, autosac
from roam_core.zoo.torch_checkpoint import trace_checkpointed

__all__ = ["autosac_record", "traced_peers"]


def autosac_record(res: Any) -> dict[str, Any]:
    """The ``torch_autosac`` entry of ``roam frontier --json`` for an
    :class:`~roam_core.zoo.autosac.AutoSacResult`."""
    return {"applicable": res.reason is None, "reason": res.reason, "notes": list(res.notes),
            "budgets": [{"method": d.method, "memory_budget_bytes": d.memory_budget_bytes,
                         "ilp_peak_bytes": d.ilp_peak_bytes,
                         "ilp_recompute_seconds": d.ilp_recompute_s,
                         "checkpointed_modules": len(d.discard),
                         "discard": dict(d.discard)} for d in res.decisions]}


def traced_peers(graph: Graph, profile: DeviceProfile, *, blocks: bool = True,
                 autosac_points: int = AUTOSAC_POINTS
                 ) -> tuple[dict[str, Graph], dict[str, Any] | None, list[str]]:
    """The traced peers of a zoo graph: ``(method -> traced graph, AutoSAC's record or
    None, notes)``; a peer that does not apply is left out with a note saying why."""
    peers: dict[str, Graph] = {}
    notes: list[str] = []
    if (graph.origin or {}).get("source") != "zoo":
        why = "the graph is not a zoo model's trace: torch's checkpointing needs the model"
        return {}, {"applicable": False, "reason": why, "notes": [], "budgets": []}, \
            [f"torch_checkpoint_blocks, torch_autosac: not applicable ({why})"]
    if blocks:
        try:
            peers["torch_checkpoint_blocks"] = trace_checkpointed(graph, name_suffix="ckpt")
        except Exception as e:  # a model without blocks, or one torch cannot checkpoint
            notes.append(f"torch_checkpoint_blocks: not applicable ({e})")
    rec = None
    if autosac_points > 0:
        res = autosac(graph, profile, autosac_points)
        rec = autosac_record(res)
        if res.reason is not None:
            notes.append(f"torch_autosac: not applicable ({res.reason})")
        notes.extend(f"torch_autosac: {n}" for n in res.notes)
        peers.update((d.method, d.graph) for d in res.decisions)
    return peers, rec, notes
