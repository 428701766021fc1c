"""A Llama-style decoder in plain torch: RMSNorm, SwiGLU, grouped-query attention, RoPE.

The layer structure follows HF ``LlamaModel`` (pre-norm blocks ``layers.<i>`` with
``self_attn.{q,k,v,o}_proj`` and ``mlp.{gate,up,down}_proj``, no biases, an untied LM head),
at a small size by default: 8 layers, width 512, 8 query heads sharing 2 key/value heads,
SwiGLU width 1408, vocabulary 32,000.  It is a held-out model for the recomputation
benchmarks: nothing in roam was tuned on it.  Key/value heads are repeated to the query
heads (HF's ``repeat_kv``) before attention, with either implementation of
:func:`~roam_core.zoo.transformer.attend`.  RMSNorm computes in float32 and casts back, as
HF's ``LlamaRMSNorm`` does (a no-op in an fp32 step).

Other sizes are configurations of the same module: :data:`LLAMA2_7B` (Llama-2-7B's
hyper-parameters, 6,738,415,616 parameters with the LM head, the published count), and the
zoo's ``llama-125m`` and ``tiny_llama`` (:mod:`roam_core.zoo.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.base.errors import ConfigError
from roam_core.zoo.transformer import attend

__all__ = ["LLAMA2_7B", "Llama", "LlamaConfig"]


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """Llama-style hyper-parameters (defaults: the small held-out model)."""

    vocab_size: int = 32000
    n_positions: int = 2048
    n_embd: int = 512
    n_layer: int = 8
    n_head: int = 8
    n_kv_head: int = 2
    intermediate: int = 1408
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0


#: Llama-2-7B (``meta-llama/Llama-2-7b-hf``'s config; no grouped-query attention).
LLAMA2_7B = LlamaConfig(n_positions=4096, n_embd=4096, n_layer=32, n_head=32, n_kv_head=32,
                        intermediate=11008)


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` (no bias, no mean), computed in float32 as Llama does."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # the same tensor in an fp32 step: no op is traced
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class _Attention(nn.Module):
    def __init__(self, c: LlamaConfig, impl: str) -> None:
        super().__init__()
        self.hd = c.n_embd // c.n_head
        self.n_head, self.n_kv, self.impl = c.n_head, c.n_kv_head, impl
        self.q_proj = nn.Linear(c.n_embd, c.n_head * self.hd, bias=False)
        self.k_proj = nn.Linear(c.n_embd, c.n_kv_head * self.hd, bias=False)
        self.v_proj = nn.Linear(c.n_embd, c.n_kv_head * self.hd, bias=False)
        self.o_proj = nn.Linear(c.n_head * self.hd, c.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = self.n_head // self.n_kv  # grouped-query attention: HF's repeat_kv
        k = k[:, :, None].expand(b, self.n_kv, rep, t, self.hd).reshape(b, self.n_head, t,
                                                                          self.hd)
        v = v[:, :, None].expand(b, self.n_kv, rep, t, self.hd).reshape(b, self.n_head, t,
                                                                          self.hd)
        a = attend(q, k, v, causal=True, dropout_p=0.0, impl=self.impl)
        return self.o_proj(a.transpose(1, 2).reshape(b, t, self.n_head * self.hd))


class _MLP(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.n_embd, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.n_embd, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Block(nn.Module):
    def __init__(self, c: LlamaConfig, impl: str) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.n_embd, c.rms_norm_eps)
        self.self_attn = _Attention(c, impl)
        self.post_attention_layernorm = RMSNorm(c.n_embd, c.rms_norm_eps)
        self.mlp = _MLP(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """The decoder; ``lm_head=True`` adds the untied LM head (logits out), else
    ``forward(ids)`` returns the final hidden states (HF ``LlamaModel``)."""

    def __init__(self, config: LlamaConfig | None = None, *, lm_head: bool = False,
                 attention: str = "sdpa") -> None:
        super().__init__()
        c = config or LlamaConfig()
        if c.n_embd % c.n_head or c.n_head % c.n_kv_head:
            raise ConfigError("Llama: n_embd must divide by n_head and n_head by n_kv_head")
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.n_embd)
        self.layers = nn.ModuleList(_Block(c, attention) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.n_embd, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False) if lm_head else None
        hd = c.n_embd // c.n_head
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
        inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]  # a registered buffer
        freqs = torch.outer(pos, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(ids)
        for block in self.layers:
            x = block(x, cos, sin)
        x = self.norm(x)
        return self.lm_head(x) if self.lm_head is not None else x
