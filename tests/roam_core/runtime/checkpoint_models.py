"""Small real models of four families for the exported checkpointing policy's tests.

Each builder returns ``(model, example_inputs, loss_fn, optimizer)`` on CPU with seeded
weights: the zoo's GPT-2 class with dropout, a Llama-style model in plain torch (RMSNorm,
rotary embeddings, SwiGLU, no biases), the zoo's ResNet-50 class with one bottleneck per
stage (batch norm, in-place ReLU), and a Hugging Face BERT built from a tiny config (no
weights downloaded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from roam_core.zoo.cnn import ResNet50
from roam_core.zoo.steps import SelfSupervised, Supervised, ce_labels, lm_shifted
from roam_core.zoo.transformer import GPT2, GPT2Config

Case = tuple[nn.Module, list[Any], Any, str]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class LlamaAttention(nn.Module):
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.n_head, -1).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        a = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(a.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, d: int, n_head: int, hidden: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = LlamaAttention(d, n_head)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = SwiGLU(d, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaLike(nn.Module):
    """A Llama-style causal LM: ``forward(ids)`` returns logits."""

    def __init__(self, vocab: int = 128, d: int = 64, n_layer: int = 2, n_head: int = 4,
                 hidden: int = 172) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(LlamaBlock(d, n_head, hidden) for _ in range(n_layer))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        half = d // n_head // 2
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(half) / half),
                             persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def gpt2_case() -> Case:
    """The zoo's GPT-2 class: 2 blocks, d 64, dropout 0.1, math attention."""
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     dropout=0.1)
    ids = torch.randint(0, 128, (2, 32), generator=_gen())
    return SelfSupervised(GPT2(cfg, lm_head=True, attention="math")), [ids], lm_shifted, \
        "adamw"


def llama_case() -> Case:
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 32), generator=_gen())
    return SelfSupervised(LlamaLike()), [ids], lm_shifted, "adamw"


def resnet_case() -> Case:
    """The zoo's ResNet-50 class, one bottleneck per stage, 96x96 images, batch 4 (so that
    activations, not the 7.7 M parameters, make the peak)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 96, 96, generator=_gen())
    y = torch.randint(0, 10, (4,), generator=_gen())
    return Supervised(ResNet50(num_classes=10, layers=(1, 1, 1, 1))), [x, y], ce_labels, \
        "adamw"


def bert_case() -> Case:
    """Hugging Face BERT (masked LM) from a tiny config, dropout 0.1, eager attention."""
    import transformers

    from roam_core.zoo.hf import _HFStep

    cfg = transformers.AutoConfig.for_model(
        "bert", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, vocab_size=128, max_position_embeddings=64,
        attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(cfg).train()
    ids = torch.randint(0, 128, (2, 32), generator=_gen())
    return _HFStep(model, "masked-lm", "math"), [ids], None, "adamw"


CASES: dict[str, Callable[[], Case]] = {
    "gpt2": gpt2_case, "llama": llama_case, "resnet": resnet_case, "bert": bert_case}
