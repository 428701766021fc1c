"""CI replays one small configuration of the zoo models and Hugging Face models built
from configs (no weights, no network), bit-exactly on CPU.

Each case: trace, a random valid order with a first-fit layout that reuses bytes, then the
planned step in one arena against eager PyTorch (loss, parameters, buffers, optimizer
state).  The zoo cases use the zoo's own classes; the HF cases build on the meta device
(tied embeddings, rotary/position buffers) and get the runtime's seeded init.  Cases that
take more than a few seconds on a small CI machine are marked ``slow``; the two zoo models
built of the same layer kinds as another (:data:`SAME_KINDS_AS`) replay at ``./dev.sh
matrix`` only; zoo names that share one small case (the Llama names) replay it once.
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


#: Zoo models made of the same layer kinds as another one the suite replays (named here):
#: replayed at ``./dev.sh matrix`` (marker ``full_matrix``).
SAME_KINDS_AS = {"vgg11": "alexnet", "mnasnet0_5": "mobilenet_v2"}


def _marks(name: str, slow: bool) -> list[pytest.MarkDecorator]:
    if name in SAME_KINDS_AS:
        return [pytest.mark.slow, pytest.mark.full_matrix]
    return [pytest.mark.slow] if slow else []


def test_the_models_left_to_the_matrix_have_a_sibling_in_the_suite() -> None:
    assert set(SAME_KINDS_AS) <= set(ZOO_SMALL)
    assert not set(SAME_KINDS_AS.values()) & set(SAME_KINDS_AS)
    assert set(SAME_KINDS_AS.values()) <= set(ZOO_SMALL)


def _same_case() -> dict[str, tuple[str, ...]]:
    """Zoo names whose small case is the same builder (the Llama names all build one small
    Llama): the first name replays for all of them, which run the same check on the same
    input."""
    groups: dict[int, list[str]] = {}
    for n, (build, _) in ZOO_SMALL.items():
        groups.setdefault(id(build), []).append(n)
    return {names[0]: tuple(names) for names in groups.values()}


def test_names_of_one_case_share_its_builder() -> None:
    cases = _same_case()
    assert sorted(n for names in cases.values() for n in names) == sorted(ZOO_SMALL)
    assert cases["llama"] == ("llama", "llama-125m", "llama2-7b", "tiny_llama")
    for first, names in cases.items():
        assert {ZOO_SMALL[n] for n in names} == {ZOO_SMALL[first]}
        assert not set(names[1:]) & set(SAME_KINDS_AS)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=_marks(n, ZOO_SMALL[n][1]), id="+".join(names))
    for n, names in _same_case().items()])
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
