"""A mixture-of-experts decoder in plain torch: the Llama-style model with GShard routing.

:func:`moe_llama` is :class:`~roam_core.zoo.llama.Llama` with the SwiGLU MLP of every block
replaced by :class:`MoEFeedForward`: a linear router (no bias), softmax, the top ``top_k``
experts per token with their gates renormalised (Mixtral), and GShard's fixed-capacity
dispatch: each expert takes at most ``ceil(capacity_factor * tokens * top_k / experts)``
tokens (choices of rank 0 first, then rank 1; overflowing choices are dropped), gathered and
scattered by one-hot dispatch / combine tensors.  Every shape is static, so the step traces
with fake tensors like any dense model, and the experts run as one batched matmul each
(weights ``[experts, d, f]``).  It is a held-out family for the planner's scaling
benchmark: nothing in roam was tuned on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.zoo.llama import Llama, LlamaConfig

__all__ = ["MoEConfig", "MoEFeedForward", "moe_llama"]


@dataclass(frozen=True, slots=True)
class MoEConfig:
    """Expert settings (defaults: 8 experts of SwiGLU width 704, top-2, capacity 1.25)."""

    n_experts: int = 8
    top_k: int = 2
    expert_intermediate: int = 704
    capacity_factor: float = 1.25


class MoEFeedForward(nn.Module):
    """Top-k routed SwiGLU experts with GShard's fixed-capacity dispatch (``[B, T, d]`` in
    and out)."""

    def __init__(self, d: int, moe: MoEConfig) -> None:
        super().__init__()
        e, f = moe.n_experts, moe.expert_intermediate
        self.moe = moe
        self.router = nn.Linear(d, e, bias=False)
        self.w_gate = nn.Parameter(torch.empty(e, d, f).normal_(std=d ** -0.5))
        self.w_up = nn.Parameter(torch.empty(e, d, f).normal_(std=d ** -0.5))
        self.w_down = nn.Parameter(torch.empty(e, f, d).normal_(std=f ** -0.5))

    def capacity(self, tokens: int) -> int:
        """Tokens one expert takes at most."""
        m = self.moe
        return max(1, math.ceil(m.capacity_factor * tokens * m.top_k / m.n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        m = self.moe
        tokens = x.reshape(b * t, d)
        n, cap = b * t, self.capacity(b * t)
        gate, idx = self.router(tokens).softmax(-1).topk(m.top_k, dim=-1)  # [n, k]
        gate = gate / gate.sum(-1, keepdim=True)
        experts = torch.arange(m.n_experts, device=x.device)
        onehot = (idx[..., None] == experts).to(x.dtype)  # [n, k, E]
        # slot of every (token, choice) in its expert's buffer: rank-0 choices first
        by_rank = onehot.transpose(0, 1).reshape(m.top_k * n, m.n_experts)
        slot = (by_rank.cumsum(0) - 1).reshape(m.top_k, n, m.n_experts).transpose(0, 1)
        slot = (slot * onehot).sum(-1)  # [n, k]
        kept = onehot * (slot < cap).to(x.dtype)[..., None]  # [n, k, E]
        slots = torch.arange(cap, device=x.device)
        at = (slot[..., None] == slots).to(x.dtype)  # [n, k, C]
        dispatch = kept[..., None] * at[:, :, None, :]  # [n, k, E, C]
        combine = (gate[..., None, None] * dispatch).sum(1)  # [n, E, C]
        expert_in = torch.einsum("nec,nd->ecd", dispatch.sum(1), tokens)
        hidden = F.silu(torch.bmm(expert_in, self.w_gate)) * torch.bmm(expert_in, self.w_up)
        expert_out = torch.bmm(hidden, self.w_down)  # [E, C, d]
        return torch.einsum("nec,ecd->nd", combine, expert_out).reshape(b, t, d)


def moe_llama(config: LlamaConfig | None = None, moe: MoEConfig | None = None, *,
              lm_head: bool = True, attention: str = "sdpa") -> Llama:
    """The Llama-style decoder with a :class:`MoEFeedForward` in every block.

    Examples
    --------
    >>> m = moe_llama(LlamaConfig(vocab_size=64, n_embd=32, n_layer=1, n_head=4,
    ...                           n_kv_head=2), MoEConfig(expert_intermediate=16))
    >>> m(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 64])
    """
    model = Llama(config, lm_head=lm_head, attention=attention)
    c, e = model.config, moe or MoEConfig()
    for block in model.layers:
        block.mlp = MoEFeedForward(c.n_embd, e)
    return model
