"""Trace Hugging Face ``transformers`` models built from a config (offline, no weights).

``transformers`` is optional (``pip install roam[hf]``); this module imports it lazily and
raises :class:`~roam_core.base.errors.TraceError` when it is missing.  Models are built on the
meta device from a config object or a model type (``AutoConfig.for_model``), so nothing is
downloaded and nothing real is allocated; tracing goes through the same
:func:`roam_core.trace.trace_fx` as everything else.

Example (with transformers installed)::

    from roam_core.zoo.hf import trace_hf
    ts = trace_hf("gpt2", batch_size=1, seq_len=128, n_layer=2)   # GPT2LMHeadModel
    graph = ts.graph

With ``head="causal-lm"`` or ``"masked-lm"`` the loss is the model's own LM loss
(``labels = input_ids``); with ``head="base"`` it is cross-entropy of the last hidden
states against zeros (the ROAM paper's loss).  HF models keep their configured dropout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.base.errors import TraceError

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["HEADS", "hf_model_from_config", "hf_step", "trace_hf"]

_logger = logging.getLogger(__name__)

#: Which ``AutoModel*`` class builds the model for each head.
HEADS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
         "seq2seq-lm": "AutoModelForSeq2SeqLM",
         "image-classification": "AutoModelForImageClassification", "base": "AutoModel"}


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise TraceError("Hugging Face models need the optional 'transformers' package "
                         "(pip install 'roam[hf]')") from e
    return transformers


def hf_model_from_config(config: Any, head: str = "causal-lm", **overrides: Any) -> nn.Module:
    """Build an HF model on the meta device from a config or a model type, offline.

    Parameters
    ----------
    config : transformers.PretrainedConfig or str
        A config object, or a model type such as ``"gpt2"``, ``"roberta"``, ``"llama"``
        (default hyper-parameters of that type, via ``AutoConfig.for_model``).
    head : {"causal-lm", "masked-lm", "base"}
        Which ``AutoModel*`` class to instantiate.
    **overrides
        Config attributes to change (``n_layer=2``, ``hidden_size=256``...).

    Returns
    -------
    nn.Module
        The model in training mode, parameters on the meta device.
    """
    tf = _transformers()
    if head not in HEADS:
        raise TraceError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
    if isinstance(config, str):
        config = tf.AutoConfig.for_model(config, **overrides)
    else:
        for k, v in overrides.items():
            setattr(config, k, v)
    with torch.device("meta"):
        model = getattr(tf, HEADS[head]).from_config(config)
    return model.train()


class _HFLoss(nn.Module):
    """``forward(ids)`` returns the model's LM loss (labels = the input ids)."""

    #: graph module paths and tensor names are those of the HF model
    roam_name_scope = "model"

    model: nn.Module  # the Hugging Face model

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, labels=ids).loss


class _HFHidden(nn.Module):
    """``forward(ids)`` returns the last hidden states of a base model."""

    #: graph module paths and tensor names are those of the HF model
    roam_name_scope = "model"

    model: nn.Module  # the Hugging Face model

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).last_hidden_state


class _HFImageLoss(nn.Module):
    """``forward(pixel_values, labels)`` returns the classifier's cross-entropy loss."""

    model: nn.Module  # the Hugging Face model

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values, labels=labels).loss


def _ce_zeros(out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, torch.zeros_like(out))


def hf_step(config: Any, batch_size: int, seq_len: int | None = None, *,
            head: str = "causal-lm", **overrides: Any,
            ) -> tuple[_HFLoss | _HFHidden | _HFImageLoss, list[torch.Tensor],
                       Callable[[torch.Tensor], torch.Tensor] | None]:
    """``(model, example_inputs, loss_fn)`` of one HF training step, built on meta, offline.

    Token heads take ``[B, T]`` ids (``labels = input_ids``; ``seq2seq-lm`` models such as
    T5 derive the decoder inputs from the labels); ``image-classification`` takes ``[B, 3,
    S, S]`` pixels (``S = config.image_size``, default 224) and ``[B]`` labels; ``base``
    returns the last hidden states, scored against zeros.  ``loss_fn`` is ``None`` when the
    wrapped model returns its own loss.
    """
    model = hf_model_from_config(config, head, **overrides)
    cfg = model.config
    if head == "image-classification":
        size = int(getattr(cfg, "image_size", 224) or 224)
        chans = int(getattr(cfg, "num_channels", 3) or 3)
        pixels = torch.empty(batch_size, chans, size, size, device="meta")
        labels = torch.empty(batch_size, dtype=torch.long, device="meta")
        return _HFImageLoss(model), [pixels, labels], None
    if seq_len is None:
        raise TraceError(f"HF head {head!r} needs a sequence length")
    ids = torch.empty(batch_size, seq_len, dtype=torch.long, device="meta")
    if head == "base":
        return _HFHidden(model), [ids], _ce_zeros
    return _HFLoss(model), [ids], None


def trace_hf(config: Any, batch_size: int, seq_len: int | None, *, head: str = "causal-lm",
             setting: str = "steady", optimizer: str | None = None,
             **overrides: Any) -> TracedStep:
    """Trace one training step of an HF model built from a config; returns a TracedStep.

    ``Graph.origin`` is ``{"source": "custom", "builder": "hf", "hf_config": {...}, ...}``
    so the model can be rebuilt with :func:`hf_model_from_config`.
    """
    from roam_core.trace.optimizers import make_optimizer_factory
    from roam_core.trace.tracer import trace_fx

    tf = _transformers()
    wrapped, inputs, loss_fn = hf_step(config, batch_size, seq_len, head=head, **overrides)
    cfg: Any = wrapped.model.config  # a PretrainedConfig: transformers is optional, untyped here
    opt_name, factory = make_optimizer_factory(optimizer, setting)
    origin = {"source": "custom", "builder": "hf", "model": cfg.model_type, "head": head,
              "hf_config": json.loads(cfg.to_json_string(use_diff=False)),
              "batch_size": batch_size, "seq_len": seq_len, "setting": setting,
              "optimizer": opt_name, "dtype": "float32", "torch": torch.__version__,
              "transformers": tf.__version__}
    name = f"hf-{cfg.model_type}-b{batch_size}" + (f"-t{seq_len}" if seq_len else "") + \
        f"-{setting}"
    return trace_fx(wrapped, inputs, loss_fn, factory, setting=setting, name=name,
                    origin=origin)
