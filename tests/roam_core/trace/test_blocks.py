"""The repeated blocks of a model, on every family: what checkpointing every block wraps (the
frontier's real every-block peer, whose wrapped model must trace) and what FSDP2's
``blocks`` policy shards one by one."""

from __future__ import annotations

import pytest

from roam_core.trace.blocks import block_modules
from roam_core.zoo import build_zoo_step
from roam_core.zoo.families import family_step


def _blocks(model) -> list[str]:  # type: ignore[no-untyped-def]
    return [name for name, _ in block_modules(model)]


@pytest.mark.parametrize(("family", "want"), [
    ("gpt2", ["model.h.0", "model.h.1"]),
    ("llama", ["model.layers.0", "model.layers.1"]),
    # the experts' list lies inside each layer: part of the block, not blocks of their own
    ("moe", ["model.layers.0", "model.layers.1"]),
    # layers in an nn.Sequential, as torchvision's ViT keeps them
    ("vit", ["model.layers.0", "model.layers.1"]),
])
def test_the_blocks_of_each_family(family: str, want: list[str]) -> None:
    model, _, _ = family_step(family, 2)
    assert _blocks(model) == want


@pytest.mark.slow
def test_an_encoder_decoders_blocks_are_both_stacks() -> None:
    """T5: the encoder's and the decoder's layers (the longest list alone left the decoder
    out)."""
    pytest.importorskip("transformers")
    model, _, _ = family_step("t5", 2)
    assert _blocks(model) == ["model.encoder.block.0", "model.encoder.block.1",
                              "model.decoder.block.0", "model.decoder.block.1"]


def test_resnet_blocks_are_every_stages_bottlenecks() -> None:
    model, _, _ = family_step("resnet", 2)
    names = _blocks(model)
    assert [n.rsplit(".", 1)[0] for n in names] == (
        ["model.layer1"] * 3 + ["model.layer2"] * 4 + ["model.layer3"] * 2
        + ["model.layer4"] * 3)


@pytest.mark.parametrize(("zoo", "n"), [("mobilenet_v2", 17), ("alexnet", 0), ("mlp", 0),
                                         ("residual_block", 0)])
def test_repeated_blocks_beside_a_stem_and_none_in_plain_stacks(zoo: str, n: int) -> None:
    """MobileNet's inverted residuals sit beside its stem and head in one Sequential; a
    stack of plain layers (AlexNet's convolutions, an MLP) has no blocks."""
    step = build_zoo_step(zoo, 1, None, device="meta")
    assert len(_blocks(step.model)) == n


@pytest.mark.slow
def test_a_checkpointed_hf_encoder_decoder_traces() -> None:
    """A Hugging Face T5 with every block checkpointed traces (its decoder's key/value cache
    is turned off, as HF does under gradient checkpointing) and re-runs in the backward."""
    pytest.importorskip("transformers")
    from roam_core.model.graph import Phase
    from roam_core.oracle.simulate import simulate
    from roam_core.zoo.hf import hf_step, import_transformers
    from roam_core.zoo.torch_checkpoint import checkpoint_modules, trace_wrapped

    def build():  # type: ignore[no-untyped-def]
        cfg = import_transformers().T5Config(
            d_model=32, d_kv=8, d_ff=64, num_heads=4, num_layers=2, num_decoder_layers=2,
            vocab_size=64, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
        return hf_step(cfg, 2, 8, head="seq2seq-lm")

    model, inputs, loss_fn = build()
    assert len(checkpoint_modules(model)) == 4
    g = trace_wrapped(model, inputs, loss_fn, "adamw")
    assert simulate(g).peak_bytes > 0
    # each checkpointed block's forward ops run again in the backward
    assert any(op.phase is Phase.BACKWARD and op.module
               and op.module.startswith("encoder.block.") for op in g.ops)


@pytest.mark.parametrize(("family", "units"), [
    ("vit", ["", "model.layers.0", "model.layers.1"]),
    ("moe", ["", "model.layers.0", "model.layers.1"]),
])
def test_fsdp_units_are_the_blocks(family: str, units: list[str]) -> None:
    """FSDP2's ``blocks`` policy shards each block (a ViT's layers sit in an nn.Sequential:
    they were one unit) plus the root."""
    from roam_core.model.parallel import ParallelSetting
    from roam_core.trace.parallel.layout import RankLayout

    model, _, _ = family_step(family, 2)
    assert [u.path for u in RankLayout.build(model, ParallelSetting("fsdp", 2)).units] == units
