"""Model zoo: the ROAM paper's models plus small teaching models, in plain torch.

``ZOO`` maps a model name (exactly as the CLI accepts it) to a :class:`ModelSpec`.
:func:`build_zoo_step` builds everything one traced training step needs for a setting:

* ``steady`` (default): a real loss on real labels.  Vision models and the MLP: cross-entropy
  against random class labels (an extra input).  GPT-2 (with its tied LM head) and RoBERTa
  (with HF's masked-LM head, tied, no pooler: HF ``RobertaForMaskedLM``): LM cross-entropy
  against the input tokens (shifted by one for GPT-2).  AdamW by default.
* ``roam`` (the ROAM paper's evaluation): cross-entropy of the model output against zeros of
  the same shape; images 224x224; RoBERTa is the bare encoder (with pooler, last hidden states
  out) fed ``"<s> Hello world </s>"`` (ids 0, 31414, 232, 2) per sample; GPT-2/GPT2-XL are the
  bare transformer (hidden states out, no LM head).  Adam(lr 0.1, weight decay 1e-4).
  Transformers use explicit (math) attention here, as the paper's traces did; ``steady``
  uses ``F.scaled_dot_product_attention``.  Either can be forced with ``attention=``.

Models build on the meta device in well under a second (GPT2-XL allocates nothing there).
On a real device they are built after ``torch.manual_seed(seed)``, and the inputs are drawn
from a seeded generator, so two builds give identical models and batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
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
from roam_core.zoo.teach import TeachLayout, TeachOrder, TeachRecompute, TeachUpdates
from roam_core.zoo.transformer import ATTENTION_IMPLS, GPT2, GPT2Config, Roberta, VisionTransformer

__all__ = [
    "ROAM_CONFIGS",
    "ROBERTA_HELLO_WORLD",
    "ZOO",
    "ModelSpec",
    "ZooStep",
    "build_model",
    "build_zoo_step",
    "parameter_count",
    "resolved_attention",
    "resolved_seq_len",
    "trace_zoo",
    "zoo_origin",
]

_logger = logging.getLogger(__name__)

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


class ZooStep(NamedTuple):
    """What :func:`build_zoo_step` returns (unpacks as a 4-tuple)."""

    model: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    loss_fn: Callable[[Any], torch.Tensor]
    optimizer_factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def _mlp(setting: str, attention: str) -> nn.Module:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def _gpt(cfg: GPT2Config) -> Callable[[str, str], nn.Module]:
    return lambda setting, attention: GPT2(cfg, lm_head=setting == "steady", attention=attention)


def _roberta(setting: str, attention: str) -> nn.Module:
    steady = setting == "steady"
    return Roberta(pooler=not steady, lm_head=steady, attention=attention)


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
    ModelSpec("mlp", "mlp", _mlp, None, num_classes=10,
              description="teaching: 784-256-256-10 MLP"),
    ModelSpec("tiny_gpt", "gpt", _gpt(_TINY_GPT), None, default_seq_len=64, vocab_size=256,
              description="teaching: 2-layer GPT, d 64, vocab 256"),
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


def _spec(name: str) -> ModelSpec:
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
    spec = _spec(name)
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


class _Supervised(nn.Module):
    """Wraps a classifier so ``forward(x, labels)`` returns ``(logits, labels)``."""

    #: graph module paths and tensor names are those of the wrapped model
    roam_name_scope = "model"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(x), labels


class _SelfSupervised(nn.Module):
    """Wraps a token model so ``forward(ids)`` returns ``(logits, ids)``."""

    #: graph module paths and tensor names are those of the wrapped model
    roam_name_scope = "model"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(ids), ids


def _ce_zeros(out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, torch.zeros_like(out))


def _ce_labels(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    logits, labels = pair
    return F.cross_entropy(logits, labels)


def _lm_shifted(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    logits, ids = pair
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))


def _lm_same(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    logits, ids = pair
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


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
    spec = _spec(name)
    if spec.family in ("vision", "mlp"):
        return None
    if spec.family == "roberta" and setting == "roam":
        return len(ROBERTA_HELLO_WORLD)
    return seq_len or spec.default_seq_len


def build_zoo_step(
    name: str,
    batch_size: int,
    seq_len: int | None = None,
    setting: str = "steady",
    optimizer: str | None = None,
    device: str | torch.device = "meta",
    *,
    attention: str | None = None,
    seed: int = 0,
) -> ZooStep:
    """Build ``(model, example_inputs, loss_fn, optimizer_factory)`` for one zoo config.

    Parameters
    ----------
    name : str
        A key of :data:`ZOO`.
    batch_size : int
        Samples per step.
    seq_len : int, optional
        Tokens per sample (token models; default per model, 4 for RoBERTa in ``roam``).
    setting : {"steady", "roam"}
        Loss and optimizer setting (see the module docstring).
    optimizer : {"adamw", "adam", "sgd"}, optional
        Default: ``adamw`` (steady) / ``adam`` with lr 0.1, wd 1e-4 (roam).
    device : str or torch.device
        ``"meta"`` (no memory; for tracing) or a real device (seeded init and inputs).
    attention : {"sdpa", "math"}, optional
        Attention implementation of the transformers; default ``"math"`` in the ``roam``
        setting (reproduces the paper's eager baselines, e.g. ViT-B/16 batch 32) and
        ``"sdpa"`` in ``steady``.
    seed : int
        Seed of the model init and the input batch on a real device.

    Examples
    --------
    >>> model, inputs, loss_fn, opt = build_zoo_step("mlp", 4)
    >>> [tuple(x.shape) for x in inputs]
    [(4, 784), (4,)]
    """
    from roam_core.trace import make_optimizer_factory

    spec = _spec(name)
    if batch_size < 1:
        raise TraceError(f"batch size must be positive, got {batch_size}")
    _, opt_factory = make_optimizer_factory(optimizer, setting)
    inner = build_model(name, setting, device=device, attention=attention, seed=seed)
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    b, t = batch_size, resolved_seq_len(name, setting, seq_len)

    def real(shape: Sequence[int], dtype: torch.dtype, high: int = 0) -> torch.Tensor:
        if dev.type == "meta":
            return torch.empty(shape, dtype=dtype, device=dev)
        if high:
            return torch.randint(0, high, tuple(shape), generator=gen, dtype=dtype).to(dev)
        return torch.randn(tuple(shape), generator=gen, dtype=dtype).to(dev)

    if spec.family in ("vision", "mlp"):
        x = real((b, 3, spec.image_size, spec.image_size) if spec.family == "vision"
                 else (b, 784), torch.float32)
        if setting == "roam":
            return ZooStep(inner, (x,), _ce_zeros, opt_factory)
        labels = real((b,), torch.long, spec.num_classes)
        return ZooStep(_Supervised(inner), (x, labels), _ce_labels, opt_factory)
    assert t is not None
    if spec.family == "roberta" and setting == "roam":
        ids = torch.tensor([ROBERTA_HELLO_WORLD] * b, dtype=torch.long, device=dev)
        return ZooStep(inner, (ids,), _ce_zeros, opt_factory)
    if spec.family == "gpt":
        limit = inner.config.n_positions
        if t > limit:
            raise TraceError(f"{name}: seq_len {t} exceeds the {limit} positions")
    ids = real((b, t), torch.long, spec.vocab_size)
    if spec.family == "roberta" and dev.type != "meta":
        ids[:, 0], ids[:, -1] = 0, 2
        ids[ids == Roberta.PAD] = 3
    if setting == "roam":
        return ZooStep(inner, (ids,), _ce_zeros, opt_factory)
    return ZooStep(_SelfSupervised(inner), (ids,),
                   _lm_shifted if spec.family == "gpt" else _lm_same, opt_factory)


def zoo_origin(name: str, batch_size: int, seq_len: int | None, setting: str,
               optimizer: str | None, *, attention: str | None = None) -> dict[str, Any]:
    """The ``Graph.origin`` record of a zoo config (enough to rebuild it)."""
    from roam_core.trace import make_optimizer_factory

    return {"source": "zoo", "model": name, "batch_size": batch_size,
            "seq_len": resolved_seq_len(name, setting, seq_len), "setting": setting,
            "optimizer": make_optimizer_factory(optimizer, setting)[0], "dtype": "float32",
            "attention": resolved_attention(setting, attention), "torch": torch.__version__}


def trace_zoo(name: str, batch_size: int, seq_len: int | None = None, setting: str = "steady",
              optimizer: str | None = None, *, attention: str | None = None,
              device: str = "cpu") -> Any:
    """Trace a zoo config; returns a :class:`roam_core.trace.TracedStep`.

    The model is built on the meta device (no memory) and traced with fake tensors on
    ``device``.  The graph is named ``"<model>-b<B>[-t<T>]-<setting>"``.
    """
    from roam_core.trace import gc_paused, trace_fx

    with gc_paused():  # building a large meta model allocates as much as tracing it
        step = build_zoo_step(name, batch_size, seq_len, setting, optimizer, "meta",
                              attention=attention)
        origin = zoo_origin(name, batch_size, seq_len, setting, optimizer, attention=attention)
        t = origin["seq_len"]
        gname = f"{name}-b{batch_size}" + (f"-t{t}" if t else "") + f"-{setting}"
        return trace_fx(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory,
                        setting=setting, name=gname, origin=origin, device=device)
