"""Hugging Face model families from configs: trace, plan, check, replay bit-exactly.

Every family of :data:`FAMILIES` is built offline with no weights at batch 1 and 2, traced
on fake tensors, planned (``make_plan``), checked by the independent validator and replayed
in one arena against eager PyTorch (bit-equal on CPU).  Families that cannot trace as
configured get a :class:`TraceError` naming the op, the module and a way out, and the way
out is tried here; the messages are the ones ``docs/hf.md`` shows.  The suite replays one
family per architecture kind at one batch size (``hf_families.SUITE``); the rest of the
matrix runs at ``./dev.sh matrix``.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("transformers")

import roam_core as rc
from roam_core.base.errors import TraceError
from roam_core.runtime import execute_traced
from roam_core.trace import trace_fx
from roam_core.zoo.hf import build_hf_step, load_hf_config, trace_hf
from tests.paths import REPO
from tests.roam_core.zoo.hf_families import FAMILIES, FAST, KINDS, SUITE


def _cases() -> list:
    """One family per architecture kind (:data:`SUITE`) at one batch size in the suite (2 for
    the fast tier's family, then 1 and 2 in turn, so both sizes are covered); every other
    family and batch size at ``./dev.sh matrix``."""
    params = []
    for f in FAMILIES:
        if f not in SUITE:
            suite_batch = 0
        else:
            suite_batch = 2 if f in FAST or SUITE.index(f) % 2 else 1
        for b in (1, 2):
            marks: tuple = () if f in FAST and b == 2 else (pytest.mark.slow,)
            if b != suite_batch:
                marks = (pytest.mark.slow, pytest.mark.full_matrix)
            params.append(pytest.param(f, b, marks=marks, id=f"{f}-b{b}"))
    return params


def test_at_least_twenty_families() -> None:
    assert len(FAMILIES) >= 20


def test_the_suite_replays_one_family_of_every_kind_at_both_batch_sizes() -> None:
    assert set(KINDS) == set(FAMILIES), "give every family its kind in hf_families.KINDS"
    assert {KINDS[f] for f in SUITE} == set(KINDS.values())
    in_suite = [p.values for p in _cases() if not any(m.name == "full_matrix" for m in p.marks)]
    assert {f for f, _ in in_suite} == set(SUITE)
    assert {b for _, b in in_suite} == {1, 2}


@pytest.mark.parametrize(("family", "batch"), _cases())
def test_family_traces_plans_and_replays_bit_exactly(family: str, batch: int) -> None:
    task, settings = FAMILIES[family]
    step = build_hf_step(family, batch, 12, task=task, **settings)
    ts = trace_fx(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory)
    plan = rc.make_plan(ts.graph, rc.PlannerConfig(workers=1, time_limit_s=2))
    assert rc.check_plan(ts.graph, plan) == []
    report = execute_traced(ts, step.model, step.example_inputs, plan, loss_fn=step.loss_fn,
                            optimizer=step.optimizer_factory)
    assert report.numerics_ok, report.summary()
    assert report.max_abs_diff == 0.0


def _docs_message(op: str) -> str:
    """What users see for ``op``: the backticked text of the "what users see" column of the
    table in docs/hf.md."""
    text = (REPO / "docs" / "hf.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| `{op}`"))
    return re.findall(r"`([^`]*)`", row.split("|")[3])[0]


@pytest.mark.slow
def test_default_moe_experts_say_the_way_out_which_works() -> None:
    task, settings = FAMILIES["mixtral"]
    default = {k: v for k, v in settings.items() if k != "experts_implementation"}
    with pytest.raises(TraceError) as err:
        trace_hf("mixtral", 1, 8, head=task, **default)
    msg = str(err.value)
    assert _docs_message("aten._grouped_mm") in msg
    assert "experts_implementation=batched_mm" in msg
    ts = trace_hf("mixtral", 1, 8, head=task, **default, experts_implementation="batched_mm")
    assert ts.graph.origin["hf_overrides"] == {**default,
                                               "experts_implementation": "batched_mm"}


@pytest.mark.slow
def test_eager_moe_routing_names_nonzero_and_the_way_out() -> None:
    task, settings = FAMILIES["qwen2_moe"]
    eager = {**settings, "experts_implementation": "eager"}
    with pytest.raises(TraceError) as err:
        trace_hf("qwen2_moe", 1, 8, head=task, **eager)
    assert _docs_message("aten.nonzero") in str(err.value)
    assert "batched_mm" in str(err.value)


def test_config_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(TraceError, match="no 'model_type'"):
        load_hf_config({"hidden_size": 4})
    with pytest.raises(TraceError, match="unknown Hugging Face model type 'nosuch'"):
        load_hf_config({"model_type": "nosuch"})
    with pytest.raises(TraceError, match="cannot read the Hugging Face config"):
        load_hf_config(str(tmp_path / "missing.json"))
    with pytest.raises(TraceError, match="unknown Hugging Face task 'vqa'"):
        build_hf_step("gpt2", 1, 4, task="vqa")


def test_a_config_file_round_trips_through_the_origin(tmp_path) -> None:
    import json

    task, settings = FAMILIES["gpt_neox"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt_neox", **settings}))
    ts = trace_hf(str(path), 1, 8, head=task, precision="bf16-mixed", attention="math")
    origin = ts.graph.origin
    assert origin["source"] == "hf"
    assert (origin["task"], origin["precision"], origin["attention"]) == (
        "causal-lm", "bf16-mixed", "math")
    from roam_core.runtime.origin import zoo_recipe

    model, inputs, loss_fn, factory, setting, _, precision = zoo_recipe(origin)
    again = trace_fx(model, inputs, loss_fn, factory, setting=setting, precision=precision)
    assert again.graph.fingerprint() == ts.graph.fingerprint()
