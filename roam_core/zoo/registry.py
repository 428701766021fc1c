"""The zoo's models by name: :data:`ZOO` of :class:`ModelSpec`, :func:`build_model`, and how a
configuration resolves its attention implementation and sequence length.

Models build on the meta device in well under a second (GPT2-XL allocates nothing there).
On a real device they are built after ``torch.manual_seed(seed)``, so two builds give
identical models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from roam_core.base.errors import TraceError
from roam_core.zoo.cnn import (
    VGG11,
    AlexNet,
    EfficientNetB0,
    MNASNet,
    MobileNetV2,
    ResidualBlockNet,
    ResNet50,
)
from roam_core.zoo.llama import LLAMA2_7B, Llama, LlamaConfig
from roam_core.zoo.teach import TeachLayout, TeachOrder, TeachRecompute, TeachUpdates
from roam_core.zoo.transformer import ATTENTION_IMPLS, GPT2, GPT2Config, Roberta, VisionTransformer

__all__ = [
    "IMAGE_SIZE",
    "ROAM_CONFIGS",
    "ROBERTA_HELLO_WORLD",
    "ZOO",
    "ModelSpec",
    "build_model",
    "model_spec",
    "parameter_count",
    "resolved_attention",
    "resolved_seq_len",
]

#: ``<s> Hello world </s>`` in RoBERTa's BPE vocabulary (the ROAM paper's input).
ROBERTA_HELLO_WORLD = (0, 31414, 232, 2)
IMAGE_SIZE = 224


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A zoo entry.

    Parameters
    ----------
    name : str
        Registry key (CLI name).
    family : str
        ``"vision"`` (``[B, 3, S, S]`` images), ``"gpt"`` (causal LM), ``"roberta"``
        (encoder) or ``"mlp"`` (``[B, 784]`` vectors).
    factory : callable
        ``factory(setting, attention) -> nn.Module``.
    published_params : int or None
        Published parameter count (``None`` for teaching models).
    default_seq_len : int or None
        Sequence length when none is given (token models only).
    image_size : int
        Image side for vision models.
    num_classes : int
        Classes of the classification head (vision and MLP).
    vocab_size : int
        Vocabulary (token models).
    description : str
        One line for people.
    """

    name: str
    family: str
    factory: Callable[[str, str], nn.Module]
    published_params: int | None
    default_seq_len: int | None = None
    image_size: int = IMAGE_SIZE
    num_classes: int = 1000
    vocab_size: int = 0
    description: str = ""


def _mlp(setting: str, attention: str) -> nn.Module:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def _gpt(cfg: GPT2Config) -> Callable[[str, str], nn.Module]:
    return lambda setting, attention: GPT2(cfg, lm_head=setting == "steady", attention=attention)


def _llama(setting: str, attention: str) -> nn.Module:
    return Llama(LlamaConfig(), lm_head=setting == "steady", attention=attention)


def _roberta(setting: str, attention: str) -> nn.Module:
    steady = setting == "steady"
    return Roberta(pooler=not steady, lm_head=steady, attention=attention)


def _llama_lm(cfg: LlamaConfig) -> Callable[[str, str], nn.Module]:
    """A Llama configuration that always has its (untied) LM head, as published."""
    return lambda setting, attention: Llama(cfg, lm_head=True, attention=attention)


#: A Llama-shaped model of GPT-2 small's size (benchmarks of per-rank plans).
_LLAMA_125M = LlamaConfig(vocab_size=32000, n_embd=768, n_layer=12, n_head=12, n_kv_head=4,
                          intermediate=2048, n_positions=2048)
_TINY_LLAMA = LlamaConfig(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_kv_head=2,
                          intermediate=172, n_positions=128)
_TINY_GPT = GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                       dropout=0.0)
_GPT2_XL = GPT2Config(n_embd=1600, n_layer=48, n_head=25)

ZOO: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("alexnet", "vision", lambda s, a: AlexNet(), 61_100_840,
              description="torchvision AlexNet"),
    ModelSpec("vgg11", "vision", lambda s, a: VGG11(), 132_863_336,
              description="torchvision VGG-11 (no batch norm)"),
    ModelSpec("mnasnet0_5", "vision", lambda s, a: MNASNet(0.5), 2_218_512,
              description="torchvision MNASNet, width 0.5"),
    ModelSpec("mobilenet_v2", "vision", lambda s, a: MobileNetV2(), 3_504_872,
              description="torchvision MobileNetV2"),
    ModelSpec("efficientnet_b0", "vision", lambda s, a: EfficientNetB0(), 5_288_548,
              description="torchvision EfficientNet-B0 (stochastic depth 0.2)"),
    ModelSpec("vit_b_16", "vision", lambda s, a: VisionTransformer(attention=a), 86_567_656,
              description="torchvision ViT-B/16"),
    ModelSpec("resnet50", "vision", lambda s, a: ResNet50(), 25_557_032,
              description="torchvision ResNet-50 (v1.5)"),
    ModelSpec("roberta-base", "roberta", _roberta, 124_645_632, default_seq_len=128,
              vocab_size=50265,
              description="RoBERTa-base (roam: encoder with pooler; steady: masked-LM head)"),
    ModelSpec("gpt2", "gpt", _gpt(GPT2Config()), 124_439_808, default_seq_len=1024,
              vocab_size=50257, description="GPT-2 small (steady: tied LM head)"),
    ModelSpec("gpt2-xl", "gpt", _gpt(_GPT2_XL), 1_557_611_200, default_seq_len=1024,
              vocab_size=50257, description="GPT2-XL, 48 layers, d 1600"),
    ModelSpec("llama", "gpt", _llama, None, default_seq_len=256, vocab_size=32000,
              description="held out: Llama-style decoder (RMSNorm, SwiGLU, GQA 8/2 heads, "
                          "RoPE, no biases), 8 layers, d 512"),
    ModelSpec("llama2-7b", "gpt", _llama_lm(LLAMA2_7B), 6_738_415_616, default_seq_len=4096,
              vocab_size=32000, description="Llama-2-7B shape (RMSNorm, SwiGLU, RoPE)"),
    ModelSpec("llama-125m", "gpt", _llama_lm(_LLAMA_125M), None, default_seq_len=1024,
              vocab_size=32000,
              description="Llama-shaped, GPT-2 small's size: 12 layers, d 768, GQA 12/4"),
    ModelSpec("mlp", "mlp", _mlp, None, num_classes=10,
              description="teaching: 784-256-256-10 MLP"),
    ModelSpec("tiny_gpt", "gpt", _gpt(_TINY_GPT), None, default_seq_len=64, vocab_size=256,
              description="teaching: 2-layer GPT, d 64, vocab 256"),
    ModelSpec("tiny_llama", "gpt", _llama_lm(_TINY_LLAMA), None, default_seq_len=64,
              vocab_size=256, description="teaching: 2-layer Llama, d 64, GQA 4/2, vocab 256"),
    ModelSpec("residual_block", "vision", lambda s, a: ResidualBlockNet(), None,
              image_size=32, num_classes=10,
              description="teaching: conv-BN stem + one residual block, 32x32 images"),
    ModelSpec("teach_order", "mlp", lambda s, a: TeachOrder(), None, num_classes=10,
              description="teaching (the order): a wide branch's big temporary, freed early"),
    ModelSpec("teach_updates", "mlp", lambda s, a: TeachUpdates(), None, num_classes=10,
              description="teaching (update placement): big weights, small batch"),
    ModelSpec("teach_layout", "mlp", lambda s, a: TeachLayout(), None, num_classes=10,
              description="teaching (the layout): widths that swell and shrink"),
    ModelSpec("teach_recompute", "mlp", lambda s, a: TeachRecompute(), None, num_classes=10,
              description="teaching (recomputation): a chain of cheap wide layers"),
)}

#: The ROAM paper's 14 (model, batch size) configurations.
ROAM_CONFIGS: tuple[tuple[str, int], ...] = tuple(
    (m, b) for m in ("alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2", "efficientnet_b0",
                     "vit_b_16", "roberta-base") for b in (1, 32))


def model_spec(name: str) -> ModelSpec:
    """The zoo entry ``name`` (:class:`TraceError` naming the choices when there is none)."""
    try:
        return ZOO[name]
    except KeyError:
        raise TraceError(f"unknown model {name!r}; choose one of: {', '.join(ZOO)}") from None


def build_model(name: str, setting: str = "steady", *, device: str | torch.device = "meta",
                attention: str | None = None, seed: int = 0) -> nn.Module:
    """Build a zoo model in training mode (meta device: instant, no memory).

    Examples
    --------
    >>> parameter_count(build_model("mobilenet_v2"))
    3504872
    """
    spec = model_spec(name)
    attention = resolved_attention(setting, attention)
    if attention not in ATTENTION_IMPLS:
        raise TraceError(f"unknown attention {attention!r}; choose one of "
                         f"{', '.join(ATTENTION_IMPLS)}")
    dev = torch.device(device)
    if dev.type != "meta":
        torch.manual_seed(seed)
    with dev:
        model = spec.factory(setting, attention)
    return model.train()


def parameter_count(model: nn.Module) -> int:
    """Number of distinct parameter elements (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def resolved_attention(setting: str, attention: str | None) -> str:
    """The attention implementation a config uses: ``math`` for ``roam``, else ``sdpa``.

    The ROAM paper's eager baselines were traced with explicit (math) attention: with it,
    ViT-B/16 at batch 32 peaks at 4,682.3 MiB in our trace, the paper's 4,682.2.

    Examples
    --------
    >>> resolved_attention("roam", None), resolved_attention("steady", None)
    ('math', 'sdpa')
    """
    if attention is not None:
        return attention
    return "math" if setting == "roam" else "sdpa"


def resolved_seq_len(name: str, setting: str, seq_len: int | None) -> int | None:
    """The sequence length a config really uses (``None`` for non-token models)."""
    spec = model_spec(name)
    if spec.family in ("vision", "mlp"):
        return None
    if spec.family == "roberta" and setting == "roam":
        return len(ROBERTA_HELLO_WORLD)
    return seq_len or spec.default_seq_len
