"""Tests of the model zoo: names, parameter counts, settings, a tiny trace smoke test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from roam_core.base.errors import TraceError  # noqa: E402
from roam_core.model.graph import Phase, TensorKind  # noqa: E402
from roam_core.oracle.simulate import simulate  # noqa: E402
from roam_core.zoo import (  # noqa: E402
    ROAM_CONFIGS,
    ROBERTA_HELLO_WORLD,
    ZOO,
    build_model,
    build_zoo_step,
    parameter_count,
    trace_zoo,
)

PUBLISHED = {
    "alexnet": 61_100_840, "vgg11": 132_863_336, "mnasnet0_5": 2_218_512,
    "mobilenet_v2": 3_504_872, "efficientnet_b0": 5_288_548, "vit_b_16": 86_567_656,
    "resnet50": 25_557_032, "roberta-base": 124_645_632, "gpt2": 124_439_808,
    "gpt2-xl": 1_557_611_200, "llama2-7b": 6_738_415_616,
}


def test_names_are_exactly_the_published_ones() -> None:
    teaching = {"mlp", "tiny_gpt", "tiny_llama", "llama", "residual_block", "teach_order",
                "teach_updates", "teach_layout", "teach_recompute"}
    held_out = {"llama"}  # benchmark models nothing was tuned on
    shapes = {"llama-125m"}  # a published architecture at another size
    assert set(PUBLISHED) | teaching | held_out | shapes == set(ZOO)
    assert len(ROAM_CONFIGS) == 14
    assert {b for _, b in ROAM_CONFIGS} == {1, 32}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts(name: str) -> None:
    # the roam build is the published architecture; the steady one differs only by heads
    roam = build_model(name, "roam")
    assert all(p.device.type == "meta" for p in roam.parameters())
    assert parameter_count(roam) == PUBLISHED[name] == ZOO[name].published_params
    steady = parameter_count(build_model(name, "steady"))
    assert abs(steady - PUBLISHED[name]) <= 0.005 * PUBLISHED[name]


@pytest.mark.slow
def test_steady_and_roam_inputs_and_losses() -> None:
    _model, inputs, _loss_fn, _ = build_zoo_step("mobilenet_v2", 3, setting="steady")
    assert [tuple(x.shape) for x in inputs] == [(3, 3, 224, 224), (3,)]
    assert inputs[1].dtype == torch.long
    _, inputs, _, _ = build_zoo_step("mobilenet_v2", 3, setting="roam")
    assert [tuple(x.shape) for x in inputs] == [(3, 3, 224, 224)]
    _, inputs, _, _ = build_zoo_step("roberta-base", 2, seq_len=100, setting="roam",
                                     device="cpu")
    assert inputs[0].tolist() == [list(ROBERTA_HELLO_WORLD)] * 2
    _, inputs, _, _ = build_zoo_step("gpt2", 2, seq_len=16, setting="steady")
    assert tuple(inputs[0].shape) == (2, 16)
    with pytest.raises(TraceError, match="exceeds"):
        build_zoo_step("gpt2", 1, seq_len=2048)
    with pytest.raises(TraceError, match="choose one of"):
        build_zoo_step("resnet18", 1)


def test_real_device_builds_are_deterministic() -> None:
    a = build_zoo_step("tiny_gpt", 2, 8, device="cpu")
    b = build_zoo_step("tiny_gpt", 2, 8, device="cpu")
    assert torch.equal(a.example_inputs[0], b.example_inputs[0])
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    loss = a.loss_fn(a.model(*a.example_inputs))
    assert loss.ndim == 0
    assert torch.isfinite(loss)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["sdpa", "math"])
def test_tiny_gpt_trace_smoke(attention: str) -> None:
    ts = trace_zoo("tiny_gpt", 2, 16, "steady", attention=attention)
    g = ts.graph
    assert g.origin == {**g.origin, "source": "zoo", "model": "tiny_gpt", "batch_size": 2,
                        "seq_len": 16, "setting": "steady", "optimizer": "adamw",
                        "attention": attention}
    assert g.name == "tiny_gpt-b2-t16-steady"
    assert {op.phase for op in g.ops} >= {Phase.FORWARD, Phase.LOSS, Phase.BACKWARD,
                                          Phase.OPTIMIZER}
    flash = any("flash_attention" in op.target for op in g.ops)
    assert flash == (attention == "sdpa")
    kinds = {t.kind for t in g.tensors.values()}
    assert {TensorKind.ACTIVATION, TensorKind.GRADIENT, TensorKind.OPTIMIZER_STATE} <= kinds
    assert simulate(g, g.op_ids).peak_bytes > g.resident_bytes()


@pytest.mark.slow
def test_roam_setting_uses_math_attention_by_default() -> None:
    g = trace_zoo("tiny_gpt", 1, 8, "roam").graph
    assert g.origin["attention"] == "math"
    assert not any("flash_attention" in op.target for op in g.ops)
    assert any(op.target == "aten._softmax.default" for op in g.ops)


def test_residual_block_roam_trace_smoke() -> None:
    g = trace_zoo("residual_block", 2, setting="roam").graph
    assert g.origin["optimizer"] == "adam"
    assert g.origin["seq_len"] is None
    assert sum(op.target == "aten.native_batch_norm.default" for op in g.ops) == 3
    state = [t for t in g.tensors.values() if t.kind is TensorKind.OPTIMIZER_STATE]
    assert state
    assert not any(t.resident for t in state)


@pytest.mark.slow
def test_hf_model_from_config_traces() -> None:
    pytest.importorskip("transformers")
    from roam_core.zoo.hf import trace_hf

    ts = trace_hf("gpt2", 2, 16, n_layer=1, n_embd=32, n_head=2, vocab_size=100,
                  n_positions=32)
    g = ts.graph
    assert g.origin["source"] == "hf"
    assert g.origin["hf_config"]["n_layer"] == 1
    (loss_sid,) = g.outputs
    assert g.op(g.tensors[loss_sid].producer).phase is Phase.LOSS
    assert {op.phase for op in g.ops} >= {Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER}


def test_every_decoder_family_builds_its_step() -> None:
    """The held-out Llama-style decoder builds like GPT-2: token inputs, a seq-len limit
    named in a TraceError (its step once failed an isinstance check meant for GPT-2)."""
    for name in ("tiny_gpt", "llama"):
        _model, inputs, loss_fn, _ = build_zoo_step(name, 2, seq_len=16, setting="steady")
        assert [tuple(x.shape) for x in inputs] == [(2, 16)]
        assert loss_fn is not None
        with pytest.raises(TraceError, match="exceeds the"):
            build_zoo_step(name, 1, seq_len=10**6, setting="steady")


def test_flash_attention_with_dropout_models_cuda_on_cpu(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    """The CPU flash kernel has no dropout: the zoo models CUDA's flash / efficient kernel
    (its mask re-drawn from a seed, none saved) without it, says so, and never fails with
    torch's "no available kernel"."""
    from roam_core.zoo.transformer import attend

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    with caplog.at_level("WARNING", logger="roam_core.zoo.transformer"):
        for impl in ("flash", "efficient"):
            out = attend(q, k, v, causal=True, dropout_p=0.25, impl=impl)
            ref = attend(q, k, v, causal=True, dropout_p=0.0, impl=impl)
            assert torch.equal(out, ref)
    assert "attention dropout 0.25 is not applied on cpu" in caplog.text
    # the math path keeps its dropout (its mask is saved, as eager saves it)
    torch.manual_seed(0)
    assert not torch.equal(attend(q, k, v, causal=True, dropout_p=0.25, impl="math"),
                           attend(q, k, v, causal=True, dropout_p=0.0, impl="math"))
