"""One zoo training step: model, batch, loss and optimizer for a setting, and its trace.

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

On a real device the inputs are drawn from a seeded generator, so two builds give identical
models (:func:`~roam_core.zoo.registry.build_model`) and batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.base.collector import gc_paused
from roam_core.base.errors import TraceError
from roam_core.zoo.llama import Llama
from roam_core.zoo.registry import (
    ROBERTA_HELLO_WORLD,
    build_model,
    model_spec,
    resolved_attention,
    resolved_seq_len,
)
from roam_core.zoo.transformer import GPT2, Roberta

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["SelfSupervised", "Supervised", "ZooStep", "build_zoo_step", "ce_labels", "ce_zeros",
           "lm_same", "lm_shifted", "trace_zoo", "zoo_origin"]

_logger = logging.getLogger(__name__)


class ZooStep(NamedTuple):
    """What :func:`build_zoo_step` returns (unpacks as a 4-tuple)."""

    model: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    loss_fn: Callable[[Any], torch.Tensor] | None  # None: the model returns the loss
    optimizer_factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer]


class Supervised(nn.Module):
    """Wraps a classifier so ``forward(x, labels)`` returns ``(logits, labels)``."""

    #: graph module paths and tensor names are those of the wrapped model
    roam_name_scope = "model"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(x), labels


class SelfSupervised(nn.Module):
    """Wraps a token model so ``forward(ids)`` returns ``(logits, ids)``."""

    #: graph module paths and tensor names are those of the wrapped model
    roam_name_scope = "model"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(ids), ids


def ce_zeros(out: torch.Tensor) -> torch.Tensor:
    """The ROAM paper's loss: cross-entropy of the output against zeros."""
    return F.cross_entropy(out, torch.zeros_like(out))


def ce_labels(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of ``(logits, labels)`` (a :class:`Supervised` model's output)."""
    logits, labels = pair
    return F.cross_entropy(logits, labels)


def lm_shifted(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Causal-LM loss of ``(logits, ids)``: each position predicts the next id."""
    logits, ids = pair
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))


def lm_same(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Masked-LM style loss of ``(logits, ids)``: each position predicts its own id."""
    logits, ids = pair
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


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
    attention : {"sdpa", "math", "flash", "efficient"}, optional
        Attention implementation of the transformers; default ``"math"`` in the ``roam``
        setting (reproduces the paper's eager baselines, e.g. ViT-B/16 batch 32) and
        ``"sdpa"`` in ``steady`` (:mod:`roam_core.trace.attention`).
    seed : int
        Seed of the model init and the input batch on a real device.

    Examples
    --------
    >>> model, inputs, loss_fn, opt = build_zoo_step("mlp", 4)
    >>> [tuple(x.shape) for x in inputs]
    [(4, 784), (4,)]
    """
    from roam_core.trace.optimizers import make_optimizer_factory

    spec = model_spec(name)
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
            return ZooStep(inner, (x,), ce_zeros, opt_factory)
        labels = real((b,), torch.long, spec.num_classes)
        return ZooStep(Supervised(inner), (x, labels), ce_labels, opt_factory)
    assert t is not None
    if spec.family == "roberta" and setting == "roam":
        ids = torch.tensor([ROBERTA_HELLO_WORLD] * b, dtype=torch.long, device=dev)
        return ZooStep(inner, (ids,), ce_zeros, opt_factory)
    if spec.family == "gpt":
        assert isinstance(inner, (GPT2, Llama))  # the zoo's decoder-only families
        limit = inner.config.n_positions
        if t > limit:
            raise TraceError(f"{name}: seq_len {t} exceeds the {limit} positions")
    ids = real((b, t), torch.long, spec.vocab_size)
    if spec.family == "roberta" and dev.type != "meta":
        ids[:, 0], ids[:, -1] = 0, 2
        ids[ids == Roberta.PAD] = 3
    if setting == "roam":
        return ZooStep(inner, (ids,), ce_zeros, opt_factory)
    return ZooStep(SelfSupervised(inner), (ids,),
                   lm_shifted if spec.family == "gpt" else lm_same, opt_factory)


def zoo_origin(name: str, batch_size: int, seq_len: int | None, setting: str,
               optimizer: str | None, *, attention: str | None = None,
               precision: str = "fp32") -> dict[str, Any]:
    """The ``Graph.origin`` record of a zoo config (enough to rebuild it)."""
    from roam_core.trace.optimizers import make_optimizer_factory
    from roam_core.trace.precision import resolve_precision

    cast = resolve_precision(precision).cast_dtype
    return {"source": "zoo", "model": name, "batch_size": batch_size,
            "seq_len": resolved_seq_len(name, setting, seq_len), "setting": setting,
            "optimizer": make_optimizer_factory(optimizer, setting)[0],
            "dtype": "float32" if cast is None else str(cast).removeprefix("torch."),
            "precision": precision, "attention": resolved_attention(setting, attention),
            "torch": torch.__version__}


def trace_zoo(name: str, batch_size: int, seq_len: int | None = None, setting: str = "steady",
              optimizer: str | None = None, *, attention: str | None = None,
              device: str = "cpu", parallel: Any = None,
              precision: str = "fp32", spec: Any = None,
              merge_casts: bool = False) -> TracedStep:
    """Trace a zoo config; returns a :class:`~roam_core.trace.traced_step.TracedStep`.

    The model is built on the meta device (no memory) and traced with fake tensors on
    ``device`` in ``precision`` (:mod:`roam_core.trace.precision`).  The graph is named
    ``"<model>-b<B>[-t<T>]-<setting>"``, followed by ``"-<fsdp|ddp><W>"`` for the step of
    one rank of a data-parallel world (``parallel``: a
    :class:`~roam_core.model.parallel.ParallelSetting`; ``docs/parallel.md``).  ``spec``: the
    step's clipping and accumulation (:class:`~roam_core.trace.step_spec.StepSpec`).
    ``merge_casts``: autocast's repeated casts made once
    (:mod:`roam_core.trace.identical_casts`).
    """
    from roam_core.trace.tracer import trace_fx

    with gc_paused():  # building a large meta model allocates as much as tracing it
        step = build_zoo_step(name, batch_size, seq_len, setting, optimizer, "meta",
                              attention=attention)
        origin = zoo_origin(name, batch_size, seq_len, setting, optimizer, attention=attention,
                            precision=precision)
        t = origin["seq_len"]
        gname = f"{name}-b{batch_size}" + (f"-t{t}" if t else "") + f"-{setting}"
        if parallel is not None and parallel.active:
            gname += f"-{parallel.kind}{parallel.world_size}"
        return trace_fx(step.model, step.example_inputs, step.loss_fn, step.optimizer_factory,
                        setting=setting, name=gname, origin=origin, device=device,
                        parallel=parallel, precision=precision, spec=spec,
                        merge_casts=merge_casts)
