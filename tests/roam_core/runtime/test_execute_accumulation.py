"""``execute_plan(..., accumulation_steps=k)``: one optimizer step of k micro-batches,
planned (through PlannedStep) against the eager accumulation loop, bit-exact on CPU."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

import roam_core as rc
from roam_core.base.errors import ExecutorError
from roam_core.trace import trace_fx
from roam_core.trace.step_spec import StepSpec
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order
from tests.roam_core.runtime.test_fp16_loops import MODELS


def _plan_for(net: torch.nn.Module, inputs: list[Any], loss_fn: Any, factory: Any,
              precision: str, k: int, norm: float | None, *, only: bool = False) -> Any:
    g = rc.trace_training_step(net, inputs, loss_fn, optimizer=factory, precision=precision,
                               accumulation_steps=k, max_grad_norm=norm, accumulate_only=only)
    return first_fit_plan(g, random_order(g, 1))


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "k", "norm"), [
    ("fp32", 2, None), ("fp32", 3, 0.5), ("bf16-mixed", 2, 0.5), ("fp16-mixed", 3, 0.5)])
def test_execute_plan_accumulates_bit_exactly(precision: str, k: int,
                                              norm: float | None) -> None:
    net, data, loss_fn, factory = MODELS["mlp"](0)
    plan = _plan_for(net, data[0], loss_fn, factory, precision, k, norm)
    report = rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                             precision=precision, max_grad_norm=norm, accumulation_steps=k,
                             micro_batches=data[:k])
    assert report.numerics_ok, report.worst_value
    assert report.max_abs_diff == 0.0
    assert any("accumulated micro-batches" in n for n in report.notes)
    assert any("default planner" in n for n in report.notes)  # no accumulate plan given


@pytest.mark.slow
def test_execute_plan_accumulates_tiny_gpt_with_both_plans_given() -> None:
    net, data, loss_fn, factory = MODELS["tiny_gpt"](0)
    plan = _plan_for(net, data[0], loss_fn, factory, "bf16-mixed", 2, 1.0)
    acc = _plan_for(net, data[0], loss_fn, factory, "bf16-mixed", 2, 1.0, only=True)
    report = rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                             precision="bf16-mixed", max_grad_norm=1.0, accumulation_steps=2,
                             micro_batches=data[:2], accumulate_plan=acc)
    assert report.max_abs_diff == 0.0
    assert not any("default planner" in n for n in report.notes)


@pytest.mark.slow
def test_a_differing_micro_step_is_reported_not_hidden() -> None:
    """A plan for the accumulating micro-batch run as a whole step is refused by its
    fingerprint (the graphs differ by the accumulators), and a wrong number of micro-batches
    is a clear error."""
    net, data, loss_fn, factory = MODELS["mlp"](0)
    plan = _plan_for(net, data[0], loss_fn, factory, "fp32", 2, None)
    with pytest.raises(rc.PlanFormatError):
        rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory)
    with pytest.raises(ExecutorError, match="micro_batches: 3 given"):
        rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                        accumulation_steps=2, micro_batches=data[:3])
    with pytest.raises(ExecutorError, match="accumulation_steps > 1"):
        rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                        micro_batches=data[:2])


def test_an_accumulating_step_is_measured_in_this_process() -> None:
    net, data, _, factory = MODELS["mlp"](0)
    traced = trace_fx(net, data[0], None, factory, setting="steady",
                      spec=StepSpec(accumulation_steps=2))
    plan = first_fit_plan(traced.graph, random_order(traced.graph, 1))
    with pytest.raises(ExecutorError, match="measure='in-process'"):
        rc.execute_plan(net, data[0], plan, optimizer=factory, accumulation_steps=2,
                        measure="subprocess")


@pytest.mark.slow
def test_roam_execute_runs_a_graph_traced_with_accumulation(tmp_path, capsys) -> None:
    from roam_core.cli import main

    g, p, r = (str(tmp_path / n) for n in ("g.json.gz", "p.json", "r.json"))
    assert main(["trace", "tiny_gpt", "-b", "2", "-t", "16", "--precision", "bf16-mixed",
                 "--accumulation-steps", "2", "--max-grad-norm", "1.0", "-o", g]) == 0
    assert main(["plan", g, "-o", p]) == 0
    assert main(["execute", g, p, "-o", r]) == 0
    body = json.loads((tmp_path / "r.json").read_text())
    assert body["max_abs_diff"] == 0.0
    assert any("2 accumulated micro-batches" in n for n in body["notes"])


@pytest.mark.slow
def test_roam_execute_takes_the_accumulate_micro_batchs_plan(tmp_path, capsys) -> None:
    """``roam trace --accumulate-only`` traces the first k - 1 micro-batches' step; its plan
    runs through ``roam execute --accumulate-plan`` (checked against that step, re-traced):
    none is made here. Another graph's plan, or the flag without accumulation, is refused."""
    from roam_core.cli import main

    g, g2, p, p2, r = (str(tmp_path / n) for n in (
        "g.json.gz", "g2.json.gz", "p.json", "p2.json", "r.json"))
    common = ["tiny_gpt", "-b", "2", "-t", "16", "--accumulation-steps", "2"]
    assert main(["trace", *common, "-o", g]) == 0
    assert main(["trace", *common, "--accumulate-only", "-o", g2]) == 0
    assert main(["plan", g, "-o", p]) == 0
    assert main(["plan", g2, "-o", p2]) == 0
    assert main(["execute", g, p, "--accumulate-plan", p2, "-o", r]) == 0
    body = json.loads((tmp_path / "r.json").read_text())
    assert body["max_abs_diff"] == 0.0
    assert not any("default planner" in n for n in body["notes"])
    capsys.readouterr()
    # the update micro-batch's plan is not the accumulate micro-batch's
    assert main(["execute", g, p, "--accumulate-plan", p, "-o", r]) == 2
    assert "the accumulate plan was made for another graph" in capsys.readouterr().err
    assert main(["trace", "tiny_gpt", "-b", "2", "-t", "16", "--accumulate-only",
                 "-o", g2]) == 2
    assert "--accumulation-steps 2 or more" in capsys.readouterr().err


@pytest.mark.slow
def test_an_accumulate_plan_of_another_graph_is_refused_not_ignored() -> None:
    """The update micro-batch's plan passed as ``accumulate_plan`` matches no accumulate
    step: refused, where it ran unused (planned here) with only a note."""
    from roam_core.base.errors import PlanFormatError

    net, data, loss_fn, factory = MODELS["tiny_gpt"](0)
    plan = _plan_for(net, data[0], loss_fn, factory, "fp32", 2, None)
    with pytest.raises(PlanFormatError, match="accumulate_plan was made for another graph"):
        rc.execute_plan(net, data[0], plan, loss_fn=loss_fn, optimizer=factory,
                        accumulation_steps=2, micro_batches=data[:2], accumulate_plan=plan)
