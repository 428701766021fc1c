"""Bit-exact CPU replay of recompute plans (execute_plan runs the recompute ops)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from roam_core.base.errors import PlanInvalidError
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from roam_core.runtime import execute_plan
from roam_core.trace import trace_fx

CFG = PlannerConfig(workers=1, layout_time_limit_s=2.0)


def _mlp():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                               torch.nn.LayerNorm(64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def _loss(y):  # type: ignore[no-untyped-def]
    return y.square().mean()


def _budget_plan(model, x, frac=0.85):  # type: ignore[no-untyped-def]
    g = trace_fx(model, [x], _loss, "adamw").graph
    p0 = make_plan(g, CFG)
    res = p0.resident_bytes
    budget = res + int((p0.arena_bytes - res) * frac)
    return g, make_plan(g, replace(CFG, budget_bytes=budget).with_recompute(exact_max_ops=0))


@pytest.mark.slow
def test_recompute_plan_replays_bit_exact_on_cpu():
    model, x = _mlp(), torch.randn(512, 32)
    _g, plan = _budget_plan(model, x)
    assert plan.recompute, "the budget should need recomputation"
    rep = execute_plan(model, [x], plan, loss_fn=_loss, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0


@pytest.mark.slow
def test_tiny_gpt_recompute_plan_replays_bit_exact():
    from roam_core.zoo import build_zoo_step

    m, xs, loss_fn, _ = build_zoo_step("tiny_gpt", 2, 16, device="cpu", attention="math")
    g = trace_fx(m, list(xs), loss_fn, "adamw").graph
    p0 = make_plan(g, CFG)
    budget = p0.resident_bytes + int((p0.arena_bytes - p0.resident_bytes) * 0.8)
    plan = make_plan(g, replace(CFG, budget_bytes=budget))
    assert plan.recompute
    rep = execute_plan(m, list(xs), plan, loss_fn=loss_fn, optimizer="adamw", device="cpu")
    assert rep.max_abs_diff == 0.0


@pytest.mark.slow
def test_a_corrupted_recompute_plan_is_refused_before_running():
    model, x = _mlp(), torch.randn(512, 32)
    _g, plan = _budget_plan(model, x)
    r = plan.recompute[-1]
    order = [o for o in plan.order if o != r.id] + [r.id]  # after its readers
    with pytest.raises(PlanInvalidError, match="dropped"):
        execute_plan(model, [x], replace(plan, order=tuple(order)), loss_fn=_loss,
                     optimizer="adamw", device="cpu")


@pytest.mark.slow
def test_roam_execute_replays_an_auto_budget_plan(tmp_path):
    from roam_core.cli import main

    g, p = str(tmp_path / "g.json.gz"), str(tmp_path / "p.json")
    assert main(["trace", "tiny_gpt", "-b", "2", "-t", "32", "--attention", "math",
                 "-o", g]) == 0
    assert main(["plan", g, "-o", p, "--budget", "auto", "--no-progress", "--workers",
                 "1"]) == 0
    from roam_core.formats.plan_io import load_plan

    assert load_plan(p).recompute  # factories (ones) and multi-output ops among the re-runs
    assert main(["execute", g, p, "-o", str(tmp_path / "r.json")]) == 0


@pytest.mark.slow
def test_planned_step_trains_with_a_recompute_plan_like_eager():
    import copy

    from roam_core.runtime import PlannedStep

    model, x = _mlp(), torch.randn(512, 32)
    _g, plan = _budget_plan(model, x)
    assert plan.recompute
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(ref.parameters(), foreach=False, fused=False)
    step = PlannedStep(model, plan, _loss, "adamw", example_inputs=[x])
    for _ in range(3):
        loss = step(x)
        opt.zero_grad(set_to_none=True)
        want = _loss(ref(x))
        want.backward()
        opt.step()
        assert torch.equal(torch.as_tensor(loss).float(), want.detach().float())
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.detach(), b.detach())
