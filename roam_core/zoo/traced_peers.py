"""The recomputation peers that run in the model, for ``roam frontier`` and the benchmarks.

* ``torch_checkpoint_blocks`` -- every block wrapped in ``torch.utils.checkpoint`` (the real
  one, beside roam's ``checkpoint_blocks`` drop set on the plain graph);
* ``torch_sac_save_matmuls`` -- every block wrapped in ``torch.utils.checkpoint`` with the
  "save matmuls" selective policy of torch's documentation
  (``create_selective_checkpoint_contexts`` given
  :data:`~roam_core.zoo.torch_checkpoint.SAVE_MATMUL_OPS`: matmul and attention outputs
  saved, everything else in the block recomputed);
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
from roam_core.zoo.torch_checkpoint import save_matmul_ops, trace_checkpointed

__all__ = ["SAVE_MATMULS", "autosac_record", "save_matmuls_peer", "traced_peers"]

#: The method name of the "save matmuls" selective-checkpoint peer.
SAVE_MATMULS = "torch_sac_save_matmuls"


def save_matmuls_peer(graph: Graph) -> Graph:
    """The model of ``graph`` (a zoo or Hugging Face config trace) with every block in
    ``torch.utils.checkpoint`` under the "save matmuls" selective policy, traced by roam
    in the graph's precision.

    Raises
    ------
    TraceError
        Not a zoo or HF trace, or a model without repeated blocks.
    """
    return trace_checkpointed(graph, save_ops=save_matmul_ops(), name_suffix="sac-mm")


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
                 save_matmuls: bool = True, autosac_points: int = AUTOSAC_POINTS
                 ) -> tuple[dict[str, Graph], dict[str, Any] | None, list[str]]:
    """The traced peers of a zoo graph: ``(method -> traced graph, AutoSAC's record or
    None, notes)``; a peer that does not apply is left out with a note saying why.
    ``blocks``: every block plainly checkpointed; ``save_matmuls``: :data:`SAVE_MATMULS`;
    ``autosac_points``: AutoSAC's budgets (0: none)."""
    peers: dict[str, Graph] = {}
    notes: list[str] = []
    if (graph.origin or {}).get("source") != "zoo":
        why = "the graph is not a zoo model's trace: torch's checkpointing needs the model"
        return {}, {"applicable": False, "reason": why, "notes": [], "budgets": []}, \
            [f"torch_checkpoint_blocks, {SAVE_MATMULS}, torch_autosac: not applicable ({why})"]
    if blocks:
        try:
            peers["torch_checkpoint_blocks"] = trace_checkpointed(graph, name_suffix="ckpt")
        except Exception as e:  # a model without blocks, or one torch cannot checkpoint
            notes.append(f"torch_checkpoint_blocks: not applicable ({e})")
    if save_matmuls:
        try:
            peers[SAVE_MATMULS] = save_matmuls_peer(graph)
        except Exception as e:  # a model without blocks, or one torch cannot checkpoint
            notes.append(f"{SAVE_MATMULS}: not applicable ({e})")
    rec = None
    if autosac_points > 0:
        res = autosac(graph, profile, autosac_points)
        rec = autosac_record(res)
        if res.reason is not None:
            notes.append(f"torch_autosac: not applicable ({res.reason})")
        notes.extend(f"torch_autosac: {n}" for n in res.notes)
        peers.update((d.method, d.graph) for d in res.decisions)
    return peers, rec, notes
