"""A step traced with merged casts (``roam trace --merge-casts``) is the step that runs:
``PlannedStep(merge_casts=True)``, ``roam execute`` and ``roam train`` rebuild it, bit-equal
with eager; a plan of the other setting is refused, naming it."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import roam_core as rc
from roam_core.base.errors import PlanFormatError
from roam_core.runtime import PlannedStep
from roam_core.trace.tracer import trace_fx
from tests.roam_core.trace.cast_models import Fanout

#: A small Llama (GQA, RMSNorm): q/k/v and gate/up read one activation each.
LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 128, "max_position_embeddings": 64}


@pytest.fixture
def llama_config(tmp_path) -> str:
    """The small Llama's config as a ``--hf-config`` file."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    return str(cfg)


def _plan(model: nn.Module, x: torch.Tensor, merge: bool) -> tuple[rc.Graph, rc.Plan]:
    g = trace_fx(model, [x], optimizer="adamw", precision="bf16-mixed",
                 merge_casts=merge).graph
    return g, rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=1))


@pytest.mark.slow
def test_planned_step_with_merged_casts_trains_as_eager() -> None:
    torch.manual_seed(0)
    model, x = Fanout(), torch.randn(4, 8)
    eager = Fanout()
    eager.load_state_dict(model.state_dict())
    _, plan = _plan(model, x, True)
    step = PlannedStep(model, plan, optimizer="adamw", precision="bf16-mixed",
                       merge_casts=True, plan_cache=False)
    assert step.merge_casts
    opt = torch.optim.AdamW(eager.parameters())
    for i in range(3):
        xi = x + i
        with torch.autocast("cpu", dtype=torch.bfloat16):
            le = eager(xi)
        le.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        lp = step(xi)
        assert torch.equal(lp, le), (i, lp.item(), le.item())
    for (n, a), b in zip(eager.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("planned_merged", [True, False])
@pytest.mark.parametrize("hint", [False, True])
def test_a_plan_of_the_other_merge_setting_is_refused(planned_merged: bool,
                                                      hint: bool) -> None:
    torch.manual_seed(0)
    model, x = Fanout(), torch.randn(4, 8)
    g, plan = _plan(model, x, planned_merged)
    with pytest.raises(PlanFormatError) as e:
        PlannedStep(model, plan, optimizer="adamw", precision="bf16-mixed",
                    merge_casts=not planned_merged, plan_cache=False,
                    example_inputs=[x], graph=g if hint else None)
    msg = str(e.value)
    assert f"merge_casts={planned_merged}" in msg
    assert "\n" not in msg
    # nothing changed: the model is still usable by a step of the right setting
    assert not any(t.is_meta for t in model.parameters())


@pytest.mark.slow
def test_roam_trace_merge_casts_then_execute_is_bit_exact(tmp_path, llama_config) -> None:
    from roam_core.cli import main
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import save_plan

    gpath, ppath, rpath = (tmp_path / n for n in ("g.json.gz", "p.json", "r.json"))
    assert main(["trace", "--hf-config", llama_config, "-b", "2", "-t", "16", "--precision",
                 "bf16-mixed", "--merge-casts", "-o", str(gpath)]) == 0
    g = load_graph(gpath)
    assert g.origin["merge_casts"] is True
    assert g.origin["merged_casts"] == 3 * 2
    save_plan(rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2)), ppath)
    assert main(["execute", str(gpath), str(ppath), "--steps", "2", "-o", str(rpath)]) == 0
    r = json.loads(rpath.read_text())
    assert r["max_abs_diff"] == 0.0
    assert r["numerics_ok"]


@pytest.mark.slow
def test_roam_train_merge_casts_is_bit_exact(llama_config, capsys) -> None:
    from roam_core.cli import main

    assert main(["train", "--hf-config", llama_config, "-b", "2", "-t", "16", "--precision",
                 "bf16-mixed", "--merge-casts", "--steps", "2", "--time-limit", "2",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["merge_casts"] is True
    assert r["max_abs_diff"] == 0.0
    assert r["numerics_ok"]


@pytest.mark.slow
def test_roam_train_refuses_a_merged_plan_without_the_flag(tmp_path, llama_config,
                                                           capsys) -> None:
    from roam_core.cli import main
    from roam_core.formats.plan_io import save_plan
    from roam_core.zoo.hf import trace_hf

    g = trace_hf(LLAMA, 2, 16, precision="bf16-mixed", merge_casts=True).graph
    ppath = tmp_path / "p.json"
    save_plan(rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2)), ppath)
    assert main(["train", "--hf-config", llama_config, "-b", "2", "-t", "16", "--precision",
                 "bf16-mixed", "--plan", str(ppath), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "merge_casts=True" in err
    assert "--merge-casts" in err


@pytest.mark.slow
def test_the_measuring_process_retraces_the_merged_step() -> None:
    """CUDA measures in fresh processes that rebuild the step from a recipe: a merged
    graph's recipe re-traces it merged (the child checks the fingerprint)."""
    import functools

    from roam_core.runtime.measure import measure_subprocess
    from roam_core.runtime.origin import merged_zoo_recipe
    from roam_core.zoo.hf import trace_hf

    g = trace_hf(LLAMA, 2, 16, precision="bf16-mixed", merge_casts=True).graph
    plan = rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2))
    recipe = functools.partial(merged_zoo_recipe, dict(g.origin))
    assert recipe()[-1] is True
    peaks = measure_subprocess(recipe, plan, "planned", device="cpu")
    assert peaks.seconds_per_step > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_merged_llama_executes_from_its_origin() -> None:
    from roam_core.runtime.origin import execute_origin
    from roam_core.zoo.hf import trace_hf

    g = trace_hf(LLAMA, 2, 16, precision="bf16-mixed", merge_casts=True, device="cuda").graph
    plan = rc.make_plan(g, rc.PlannerConfig(workers=1, time_limit_s=2))
    report = execute_origin(g.origin, plan, device="cuda", steps=2)
    assert report.numerics_ok, report.summary()
    assert report.measurement == "subprocess"
