"""CI replays one small configuration of every zoo model and of Hugging Face models built
from configs (no weights, no network), bit-exactly on CPU.

Each case: trace, a random valid order with a first-fit layout that reuses bytes, then the
planned step in one arena against eager PyTorch (loss, parameters, buffers, optimizer
state).  The zoo cases use the zoo's own classes; the HF cases build on the meta device
(tied embeddings, rotary/position buffers) and get the runtime's seeded init.  Cases that
take more than a few seconds on a small CI machine are marked ``slow``.
"""

from __future__ import annotations

import pytest

from roam_core.runtime import execute_traced
from roam_core.trace import trace_fx
from roam_core.zoo import ZOO
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order
from tests.roam_core.runtime.replay_models import HF_SMALL, ZOO_SMALL


def _check(model, inputs, loss_fn, optimizer, seed: int = 1) -> None:
    ts = trace_fx(model, inputs, loss_fn, optimizer)
    plan = first_fit_plan(ts.graph, random_order(ts.graph, seed=seed))
    assert plan.order != ts.graph.op_ids
    report = execute_traced(ts, model, inputs, plan, loss_fn=loss_fn, optimizer=optimizer)
    assert report.numerics_ok, report.summary()
    assert report.max_abs_diff == 0.0
    assert report.loss_eager == report.loss_planned
    assert report.checked_values > 0


def test_every_zoo_model_has_a_small_case() -> None:
    assert set(ZOO_SMALL) == set(ZOO)
    assert any(not slow for _, slow in ZOO_SMALL.values())


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow] if slow else [])
    for n, (_, slow) in ZOO_SMALL.items()])
def test_zoo_model_replays_bit_exact(name: str) -> None:
    model, inputs, loss_fn, optimizer = ZOO_SMALL[name][0]()
    _check(model, inputs, loss_fn, optimizer)


@pytest.mark.parametrize("model_type", [
    pytest.param(n, marks=[pytest.mark.slow] if slow else [])
    for n, (*_, slow) in HF_SMALL.items()])
def test_hf_model_from_config_replays_bit_exact(model_type: str) -> None:
    pytest.importorskip("transformers")
    from roam_core.zoo.hf import hf_step

    head, seq_len, overrides, _ = HF_SMALL[model_type]
    model, inputs, loss_fn = hf_step(model_type, 2, seq_len, head=head, **overrides)
    assert all(p.is_meta for p in model.parameters())
    _check(model, inputs, loss_fn, "adamw")
