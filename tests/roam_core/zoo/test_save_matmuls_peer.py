"""torch's "save matmuls" selective-checkpoint policy as a traced peer: every block in
``torch.utils.checkpoint`` with ``create_selective_checkpoint_contexts`` saving the matmul
and attention outputs, traced by roam, planned by the same stages."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from roam_core.model.device_profiles import BUILTIN_PROFILES
from roam_core.model.graph import Graph
from roam_core.model.samples import tiny_train_step
from roam_core.zoo.torch_checkpoint import SAVE_MATMUL_OPS, save_matmul_ops
from roam_core.zoo.traced_peers import SAVE_MATMULS, traced_peers

H100 = BUILTIN_PROFILES["h100-sxm"]


def test_the_policy_names_aten_overloads() -> None:
    ops = save_matmul_ops()
    assert torch.ops.aten.mm.default in ops
    assert torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default in ops
    assert len(ops) == len(SAVE_MATMUL_OPS)  # every listed op exists in this torch


def test_a_graph_without_its_model_says_why() -> None:
    peers, _, notes = traced_peers(tiny_train_step(), H100, autosac_points=0)
    assert peers == {}
    assert any(SAVE_MATMULS in n and "not applicable" in n for n in notes)


def _targets(g: Graph) -> Counter[str]:
    return Counter(op.target.split(".")[1] for op in g.ops)


@pytest.mark.slow
def test_save_matmuls_traces_and_plans_between_keep_all_and_every_block() -> None:
    """Re-runs everything in a block but its matmuls: fewer bytes than keeping everything,
    more than checkpointing every block; no matmul re-run, the elementwise ops re-run."""
    from roam_core.model.cost_model import step_seconds
    from roam_core.oracle.simulate import simulate
    from roam_core.oracle.validate import check_plan
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.planner.config import PlannerConfig
    from roam_core.zoo import trace_zoo

    g = trace_zoo("tiny_gpt", 4, 32, "steady", attention="math",
                  precision="bf16-mixed").graph
    peers, _, notes = traced_peers(g, H100, autosac_points=0)
    assert not notes
    sac, blocks = peers[SAVE_MATMULS], peers["torch_checkpoint_blocks"]
    assert sac.name.endswith("-sac-mm")
    assert sac.origin["precision"] == "bf16-mixed"
    plain, t_sac, t_blocks = _targets(g), _targets(sac), _targets(blocks)
    for mm in ("addmm", "bmm"):  # matmul outputs are saved, not re-run
        assert t_sac[mm] == plain[mm] < t_blocks[mm]
    assert t_sac["gelu"] > plain["gelu"]  # the rest is re-run
    assert simulate(blocks).peak_bytes < simulate(sac).peak_bytes < simulate(g).peak_bytes
    # in time, not FLOPs: the matmul FLOPs are the same, the re-runs are bandwidth-bound
    assert step_seconds(g, H100) < step_seconds(sac, H100) < step_seconds(blocks, H100)
    bp = BudgetPlanner(g, PlannerConfig(workers=1, layout_time_limit_s=2.0).with_order(
        time_limit_s=1.0))
    plan = bp.plan_other(sac)
    check_plan(sac, plan)
    assert plan.step_seconds > bp.step_seconds


@pytest.mark.slow
def test_save_matmuls_rebuilds_a_hugging_face_config_step() -> None:
    """The peer of an HF config's trace (``roam trace --hf-config``): the model is rebuilt
    from the graph's origin; SDPA's fused kernel output is saved, not re-run."""
    from roam_core.oracle.simulate import simulate
    from roam_core.zoo.hf import trace_hf
    from roam_core.zoo.traced_peers import save_matmuls_peer

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 128, "max_position_embeddings": 64}
    g = trace_hf(cfg, 2, 16, precision="bf16-mixed").graph
    sac = save_matmuls_peer(g)
    plain, t_sac = _targets(g), _targets(sac)
    attn = [k for k in plain if k.startswith("_scaled_dot_product")]
    assert attn
    assert all(t_sac[k] == plain[k] for k in attn)
    assert t_sac["mm"] == plain["mm"]
    assert t_sac["silu"] > plain["silu"]
    assert simulate(sac).peak_bytes < simulate(g).peak_bytes
