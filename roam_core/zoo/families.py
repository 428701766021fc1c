"""The model families of the planner's scaling suite, at any depth.

Each :class:`Family` builds one training step (batch 1, the ``steady`` setting, AdamW) of a
model of its family with ``depth`` repeated blocks, on the meta device, and
:func:`trace_family` traces it (optionally with ``torch.utils.checkpoint`` around segments of
blocks, :mod:`~roam_core.zoo.checkpoint_segments`).  The families differ in what the planner
sees: GPT-2 (LayerNorm, GELU, tied head), a Llama-style decoder (RMSNorm, SwiGLU, GQA, RoPE,
no biases), T5 (encoder-decoder with cross-attention; Hugging Face, from a config), ViT,
ResNet (convolutions and batch norm) and a mixture-of-experts decoder (GShard routing).

Examples
--------
>>> sorted(FAMILIES)
['gpt2', 'llama', 'moe', 'resnet', 't5', 'vit']
>>> FAMILIES["llama"].depth_for(10_000)
33
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from roam_core.base.collector import gc_paused
from roam_core.base.errors import TraceError
from roam_core.model.graph import Graph

__all__ = ["FAMILIES", "Family", "family_step", "trace_family"]

#: A step: (model, example inputs, loss function or None when the model returns its loss).
Step = tuple[nn.Module, list[torch.Tensor], Callable[[Any], torch.Tensor] | None]


@dataclass(frozen=True, slots=True)
class Family:
    """One family of the suite.

    Parameters
    ----------
    name : str
        Key of :data:`FAMILIES`.
    description : str
        The configuration, for people.
    ops_per_block : int
        Traced ops per block (measured; the depth that gives a number of ops is
        :meth:`depth_for`).
    checkpointable : bool
        Whether :func:`trace_family` can wrap its blocks in checkpoint segments.
    build : callable
        ``build(depth) -> (model, inputs, loss_fn)`` on the meta device.
    """

    name: str
    description: str
    ops_per_block: int
    checkpointable: bool
    build: Callable[[int], Step]

    def depth_for(self, ops: int) -> int:
        """The depth whose step has about ``ops`` ops (at least 1)."""
        return max(1, round(ops / self.ops_per_block))


def _tokens(t: int = 128) -> torch.Tensor:
    import os
    t = int(os.environ.get("ROAM_T", t))
    return torch.empty((1, t), dtype=torch.long, device="meta")


def _gpt2(depth: int) -> Step:
    from roam_core.zoo.steps import SelfSupervised, lm_shifted
    from roam_core.zoo.transformer import GPT2, GPT2Config

    cfg = GPT2Config(n_layer=depth, n_positions=128, dropout=0.0)
    return SelfSupervised(GPT2(cfg, lm_head=True)), [_tokens()], lm_shifted


def _llama_config(depth: int) -> Any:
    from roam_core.zoo.llama import LlamaConfig

    return LlamaConfig(n_layer=depth, n_positions=128)


def _llama(depth: int) -> Step:
    from roam_core.zoo.llama import Llama
    from roam_core.zoo.steps import SelfSupervised, lm_shifted

    return SelfSupervised(Llama(_llama_config(depth), lm_head=True)), [_tokens()], lm_shifted


def _moe(depth: int) -> Step:
    from roam_core.zoo.moe import moe_llama
    from roam_core.zoo.steps import SelfSupervised, lm_shifted

    return SelfSupervised(moe_llama(_llama_config(depth))), [_tokens()], lm_shifted


def _t5(depth: int) -> Step:
    from roam_core.zoo.hf import hf_step, import_transformers

    cfg = import_transformers().T5Config(d_model=512, d_kv=64, d_ff=2048, num_heads=8,
                                   num_layers=depth, num_decoder_layers=depth,
                                   vocab_size=32128, dropout_rate=0.0,
                                   decoder_start_token_id=0, pad_token_id=0)
    model, inputs, loss_fn = hf_step(cfg, 1, 128, head="seq2seq-lm")
    return model, inputs, loss_fn


def _vit(depth: int) -> Step:
    from roam_core.zoo.steps import Supervised, ce_labels
    from roam_core.zoo.transformer import VisionTransformer

    x = torch.empty((1, 3, 224, 224), device="meta")
    y = torch.empty((1,), dtype=torch.long, device="meta")
    return Supervised(VisionTransformer(n_layer=depth)), [x, y], ce_labels


def _resnet(depth: int) -> Step:
    from roam_core.zoo.cnn import ResNet50
    from roam_core.zoo.steps import Supervised, ce_labels

    x = torch.empty((1, 3, 224, 224), device="meta")
    y = torch.empty((1,), dtype=torch.long, device="meta")
    return Supervised(ResNet50(layers=(3, 4, depth, 3))), [x, y], ce_labels


#: The families by name.
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("gpt2", "GPT-2 (d 768, 12 heads, tied LM head), t128", 196, True, _gpt2),
    Family("llama", "Llama-style (d 512, GQA 8/2 heads, SwiGLU 1408, RMSNorm, RoPE, no "
           "biases), t128", 303, True, _llama),
    Family("t5", "T5 encoder-decoder (HF T5Config: d 512, 8 heads, d_ff 2048; depth = "
           "encoder = decoder layers), t128", 710, False, _t5),
    Family("vit", "ViT-B/16 blocks (d 768, 12 heads), 224x224", 201, True, _vit),
    Family("resnet", "ResNet-50 with `depth` bottlenecks in stage 3, 224x224", 119, False,
           _resnet),
    Family("moe", "Llama-style with 8 SwiGLU experts (704 wide), top-2, GShard capacity "
           "1.25, t128", 409, True, _moe),
)}


def family_step(name: str, depth: int) -> Step:
    """``(model, inputs, loss_fn)`` of family ``name`` at ``depth`` blocks, on meta."""
    try:
        fam = FAMILIES[name]
    except KeyError:
        raise TraceError(f"unknown family {name!r}; choose one of: "
                         f"{', '.join(FAMILIES)}") from None
    if depth < 1:
        raise TraceError(f"depth must be at least 1, not {depth}")
    with torch.device("meta"):
        model, inputs, loss_fn = fam.build(depth)
    return model.train(), inputs, loss_fn


def trace_family(name: str, depth: int, *, blocks_per_segment: int | None = None) -> Graph:
    """The traced training step of family ``name`` at ``depth`` blocks (batch 1, steady,
    AdamW), optionally with every ``blocks_per_segment`` blocks in one checkpoint.

    The graph is named ``"<family>-L<depth>[-ckpt<k>]"``.

    Raises
    ------
    TraceError
        Unknown family, a depth below 1, or checkpoint segments on a family whose blocks
        cannot be wrapped.
    """
    from roam_core.trace.optimizers import make_optimizer_factory
    from roam_core.trace.tracer import trace_fx
    from roam_core.zoo.checkpoint_segments import checkpoint_segments

    with gc_paused():  # building a large meta model allocates as much as tracing it
        model, inputs, loss_fn = family_step(name, depth)
        label = f"{name}-L{depth}"
        if blocks_per_segment is not None:
            if not FAMILIES[name].checkpointable:
                raise TraceError(f"family {name!r}: its blocks cannot be wrapped in "
                                 "checkpoint segments")
            checkpoint_segments(model, blocks_per_segment)
            label += f"-ckpt{blocks_per_segment}"
        _, opt = make_optimizer_factory(None, "steady")
        origin = {"source": "custom", "builder": "families", "family": name, "depth": depth,
                  "blocks_per_segment": blocks_per_segment, "setting": "steady",
                  "batch_size": 1, "torch": torch.__version__}
        return trace_fx(model, inputs, loss_fn, opt, setting="steady", name=label,
                        origin=origin).graph
