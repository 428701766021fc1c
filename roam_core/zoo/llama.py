"""A Llama-shaped causal LM in plain torch: RMSNorm, SwiGLU, grouped-query attention, RoPE.

The layer structure of Llama 2 (``LlamaForCausalLM``): no biases, pre-norm RMSNorm, rotary
position embeddings on the queries and keys, ``n_kv_heads`` key/value heads shared by groups
of query heads (repeated before attention, as Hugging Face's ``repeat_kv`` does), a SwiGLU
MLP (``down(silu(gate(x)) * up(x))``) and an untied LM head.  With the Llama-2-7B
hyper-parameters (:data:`LLAMA2_7B`) it has 6,738,415,616 parameters, the published count.

``forward(ids)`` returns the logits ``[B, T, vocab]``.  Attention is
``F.scaled_dot_product_attention`` or explicit math (:func:`~roam_core.zoo.transformer.attend`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.zoo.transformer import attend

__all__ = ["LLAMA2_7B", "Llama", "LlamaConfig"]


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """Llama hyper-parameters (``n_positions``: the longest sequence, for RoPE tables)."""

    vocab_size: int = 32000
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 32
    ffn_dim: int = 11008
    n_positions: int = 4096
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


#: Llama-2-7B (``meta-llama/Llama-2-7b-hf``'s config).
LLAMA2_7B = LlamaConfig()


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, computed in float32 as Llama does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class _Attention(nn.Module):
    def __init__(self, c: LlamaConfig, impl: str) -> None:
        super().__init__()
        hd = c.dim // c.n_heads
        self.q_proj = nn.Linear(c.dim, c.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.n_heads * hd, c.dim, bias=False)
        self.n_heads, self.n_kv, self.hd, self.impl = c.n_heads, c.n_kv_heads, hd, impl

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if self.n_kv != self.n_heads:  # grouped-query attention: repeat_kv
            rep = self.n_heads // self.n_kv
            k = k[:, :, None].expand(b, self.n_kv, rep, t, self.hd).reshape(b, -1, t, self.hd)
            v = v[:, :, None].expand(b, self.n_kv, rep, t, self.hd).reshape(b, -1, t, self.hd)
        a = attend(q, k, v, causal=True, dropout_p=0.0, impl=self.impl)
        return self.o_proj(a.transpose(1, 2).reshape(b, t, -1))


class _Block(nn.Module):
    def __init__(self, c: LlamaConfig, impl: str) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.dim, c.norm_eps)
        self.self_attn = _Attention(c, impl)
        self.post_attention_layernorm = RMSNorm(c.dim, c.norm_eps)
        self.gate_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.up_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.down_proj = nn.Linear(c.ffn_dim, c.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """Llama causal LM (see the module notes); ``config`` default: Llama-2-7B."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, config: LlamaConfig | None = None, *, attention: str = "sdpa") -> None:
        super().__init__()
        c = config or LLAMA2_7B
        if c.dim % c.n_heads or c.n_heads % c.n_kv_heads:
            raise ValueError("dim must divide by n_heads and n_heads by n_kv_heads")
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(_Block(c, attention) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        hd = c.dim // c.n_heads
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(c.n_positions, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))
