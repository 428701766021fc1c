"""Transformer zoo models in plain torch: GPT-2 (HF layout), RoBERTa (HF layout), ViT-B/16.

Layer structures follow HF ``GPT2Model`` / ``RobertaModel`` and torchvision ``vit_b_16`` so
parameter counts match the published ones (GPT-2 small 124,439,808, GPT2-XL 1,557,611,200,
RoBERTa-base with pooler 124,645,632, ViT-B/16 86,567,656).  Dropout probabilities default
to the published ones (0.1 for GPT-2 and RoBERTa, 0.0 for ViT).

Attention is ``F.scaled_dot_product_attention`` (``attention="sdpa"``, the default; on CPU it
traces to ``_scaled_dot_product_flash_attention_for_cpu``, a device-specific op), the same
restricted to one kernel (``"flash"``, ``"efficient"``: :mod:`roam_core.trace.attention`) or
explicit ``matmul``/``softmax`` (``attention="math"``: device-neutral, but keeps the ``T x T``
probabilities).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.trace.attention import sdpa_backend

__all__ = ["ATTENTION_IMPLS", "GPT2", "GPT2Config", "Roberta", "VisionTransformer", "attend"]

_logger = logging.getLogger(__name__)

#: Attention implementations of the zoo transformers.
ATTENTION_IMPLS = ("sdpa", "math", "flash", "efficient")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
           dropout_p: float, impl: str) -> torch.Tensor:
    """Scaled dot-product attention of ``[B, H, T, D]`` tensors with any implementation."""
    if impl in ("flash", "efficient") and dropout_p > 0 and q.device.type != "cuda":
        # CUDA's flash / memory-efficient kernels re-draw the dropout mask from a seed and
        # save none, so their memory is the kernel's without dropout; the CPU flash kernel
        # that models them has no dropout at all (torch finds "no available kernel")
        _warn_no_attention_dropout(dropout_p, q.device.type)
        dropout_p = 0.0
    if impl in ("sdpa", "flash", "efficient"):
        with sdpa_backend(impl, q.device.type):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p,
                                                  is_causal=causal)
    if impl != "math":
        raise ValueError(f"unknown attention implementation {impl!r}")
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = F.dropout(scores.softmax(-1), dropout_p, training=dropout_p > 0)
    return torch.matmul(probs, v)


@functools.cache
def _warn_no_attention_dropout(p: float, device_type: str) -> None:
    """Say once per setting that attention dropout is off on this device."""
    _logger.warning("attention dropout %g is not applied on %s with the flash/efficient "
                    "kernel (it has none there); the saved tensors are CUDA's kernel's, "
                    "the numerics are the step's without attention dropout", p, device_type)


def _heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * d)


# --------------------------------------------------------------------- GPT-2
@dataclass(frozen=True, slots=True)
class GPT2Config:
    """GPT-2 hyper-parameters (defaults: GPT-2 small)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5


class _Conv1D(nn.Module):
    """HF's GPT-2 linear layer: weight stored ``[in, out]``, ``addmm(bias, x, weight)``."""

    def __init__(self, n_out: int, n_in: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], self.weight.shape[1])


class _GPT2Block(nn.Module):
    def __init__(self, c: GPT2Config, impl: str) -> None:
        super().__init__()
        d = c.n_embd
        self.ln_1 = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.c_attn = _Conv1D(3 * d, d)
        self.attn_proj = _Conv1D(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.c_fc = _Conv1D(4 * d, d)
        self.mlp_proj = _Conv1D(d, 4 * d)
        self.drop = nn.Dropout(c.dropout)
        self.n_head, self.p, self.impl = c.n_head, c.dropout, impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(self.ln_1(x)).split(x.shape[-1], dim=2)
        a = attend(_heads(q, self.n_head), _heads(k, self.n_head), _heads(v, self.n_head),
                   causal=True, dropout_p=self.p if self.training else 0.0, impl=self.impl)
        x = x + self.drop(self.attn_proj(_merge(a)))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.drop(self.mlp_proj(h))


class GPT2(nn.Module):
    """GPT-2 transformer; ``lm_head=True`` adds the tied LM head (logits out).

    Without the head ``forward(ids)`` returns the final hidden states ``[B, T, n_embd]``
    (HF ``GPT2Model``); with it, logits ``[B, T, vocab]`` (HF ``GPT2LMHeadModel``, tied to
    ``wte`` so the parameter count is unchanged).
    """

    def __init__(self, config: GPT2Config | None = None, *, lm_head: bool = False,
                 attention: str = "sdpa") -> None:
        super().__init__()
        c = config or GPT2Config()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.n_positions, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.h = nn.ModuleList(_GPT2Block(c, attention) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)
        self.lm_head = lm_head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return F.linear(x, self.wte.weight) if self.lm_head else x


# --------------------------------------------------------------------- RoBERTa
class _RobertaLayer(nn.Module):
    def __init__(self, d: int, n_head: int, p: float, impl: str) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(d, d) for _ in range(3))
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=1e-5)
        self.intermediate = nn.Linear(d, 4 * d)
        self.output = nn.Linear(4 * d, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-5)
        self.drop = nn.Dropout(p)
        self.n_head, self.p, self.impl = n_head, p, impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.n_head
        a = attend(_heads(self.query(x), h), _heads(self.key(x), h), _heads(self.value(x), h),
                   causal=False, dropout_p=self.p if self.training else 0.0, impl=self.impl)
        x = self.attn_norm(self.drop(self.attn_out(_merge(a))) + x)
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(self.drop(y) + x)


class Roberta(nn.Module):
    """RoBERTa-base encoder (HF ``RobertaModel`` layout).

    ``pooler=True`` keeps HF's pooler (dense + tanh on ``<s>``; the published 124,645,632
    parameters include it, although the pooled output is not used by ``forward``).
    ``lm_head=True`` adds HF's masked-LM head (dense, GELU, LayerNorm, decoder tied to the
    word embeddings plus a bias) and returns logits; otherwise ``forward(ids)`` returns the
    last hidden states ``[B, T, 768]``.  Position ids follow HF (padding-aware cumsum).
    """

    PAD = 1

    def __init__(self, *, vocab_size: int = 50265, d: int = 768, n_layer: int = 12,
                 n_head: int = 12, max_positions: int = 514, dropout: float = 0.1,
                 pooler: bool = True, lm_head: bool = False, attention: str = "sdpa") -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d, padding_idx=self.PAD)
        self.position_embeddings = nn.Embedding(max_positions, d, padding_idx=self.PAD)
        self.token_type_embeddings = nn.Embedding(1, d)
        self.emb_norm = nn.LayerNorm(d, eps=1e-5)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(_RobertaLayer(d, n_head, dropout, attention)
                                    for _ in range(n_layer))
        self.pooler = nn.Linear(d, d) if pooler else None
        if lm_head:
            self.lm_dense = nn.Linear(d, d)
            self.lm_norm = nn.LayerNorm(d, eps=1e-5)
            self.lm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.lm_head = lm_head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids.ne(self.PAD).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.PAD
        tok = torch.zeros_like(ids)
        x = (self.word_embeddings(ids) + self.token_type_embeddings(tok)
             + self.position_embeddings(pos))
        x = self.drop(self.emb_norm(x))
        for layer in self.layers:
            x = layer(x)
        if not self.lm_head:
            return x
        x = self.lm_norm(F.gelu(self.lm_dense(x)))
        return F.linear(x, self.word_embeddings.weight, self.lm_bias)


# --------------------------------------------------------------------- ViT
class _ViTBlock(nn.Module):
    def __init__(self, d: int, n_head: int, mlp: int, p: float, impl: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-6)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Dropout(p), nn.Linear(mlp, d),
                                 nn.Dropout(p))
        self.drop = nn.Dropout(p)
        self.n_head, self.impl = n_head, impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = F.linear(self.ln_1(x), self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        a = attend(q, k, v, causal=False, dropout_p=0.0, impl=self.impl)
        x = x + self.drop(self.out_proj(_merge(a)))
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """torchvision ``vit_b_16`` (patch 16, 12 layers, d 768, MLP 3072; 86,567,656 params)."""

    def __init__(self, image_size: int = 224, patch: int = 16, d: int = 768,
                 n_layer: int = 12, n_head: int = 12, mlp: int = 3072,
                 num_classes: int = 1000, dropout: float = 0.0,
                 attention: str = "sdpa") -> None:
        super().__init__()
        n = (image_size // patch) ** 2
        self.conv_proj = nn.Conv2d(3, d, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.empty(1, n + 1, d).normal_(std=0.02))
        self.drop = nn.Dropout(dropout)
        self.layers = nn.Sequential(*(_ViTBlock(d, n_head, mlp, dropout, attention)
                                      for _ in range(n_layer)))
        self.ln = nn.LayerNorm(d, eps=1e-6)
        self.heads = nn.Linear(d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x)
        b, d = x.shape[:2]
        x = x.reshape(b, d, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(b, -1, -1), x], dim=1)
        x = self.ln(self.layers(self.drop(x + self.pos_embedding)))
        return self.heads(x[:, 0])
