"""Small configurations of every zoo model and of Hugging Face models built from configs.

Each entry builds ``(model, example_inputs, loss_fn, optimizer)`` for one training step
small enough to replay on CPU in a test: the zoo's own classes (same layers, fewer of them,
narrower, smaller images) and HF models from configs with no weights and no network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from roam_core.zoo import ZOO, build_model
from roam_core.zoo.cnn import ResNet50
from roam_core.zoo.llama import Llama, LlamaConfig
from roam_core.zoo.steps import SelfSupervised, Supervised, ce_labels, lm_same, lm_shifted
from roam_core.zoo.transformer import GPT2, GPT2Config, Roberta, VisionTransformer

Case = tuple[torch.nn.Module, list[Any], Any, str]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _vision(model: torch.nn.Module, size: int, batch: int = 2, classes: int = 1000,
            optimizer: str = "adamw") -> Case:
    x = torch.randn(batch, 3, size, size, generator=_gen())
    y = torch.randint(0, classes, (batch,), generator=_gen())
    return Supervised(model), [x, y], ce_labels, optimizer


def _zoo_vision(name: str, size: int, optimizer: str = "adamw") -> Callable[[], Case]:
    return lambda: _vision(build_model(name, device="cpu"), size, optimizer=optimizer)


def _gpt(**cfg: Any) -> Callable[[], Case]:
    def make() -> Case:
        torch.manual_seed(0)
        c = GPT2Config(vocab_size=128, n_positions=32, **cfg)
        ids = torch.randint(0, 128, (2, 12), generator=_gen())
        return SelfSupervised(GPT2(c, lm_head=True)), [ids], lm_shifted, "adamw"
    return make


def _llama() -> Case:
    """RMSNorm, SwiGLU, grouped-query attention (4 heads over 2 key/value heads), RoPE."""
    torch.manual_seed(0)
    c = LlamaConfig(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                    n_kv_head=2, intermediate=64)
    ids = torch.randint(0, 128, (2, 12), generator=_gen())
    return SelfSupervised(Llama(c, lm_head=True)), [ids], lm_shifted, "adamw"


def _roberta() -> Case:
    torch.manual_seed(0)
    model = Roberta(vocab_size=128, d=32, n_layer=2, n_head=2, pooler=False, lm_head=True)
    ids = torch.randint(4, 128, (2, 12), generator=_gen())
    return SelfSupervised(model), [ids], lm_same, "adamw"


def _vit() -> Case:
    torch.manual_seed(0)
    return _vision(VisionTransformer(image_size=32, patch=8, d=32, n_layer=2, n_head=2,
                                     mlp=64, num_classes=10), 32, classes=10)


def _resnet() -> Case:
    torch.manual_seed(0)
    return _vision(ResNet50(num_classes=10, layers=(1, 1, 1, 1)), 32, classes=10)


def _vectors(name: str, optimizer: str = "sgd") -> Callable[[], Case]:
    """A ``[B, 784]``-input zoo model (mlp and the teach_* models), batch 4."""

    def build() -> Case:
        torch.manual_seed(0)
        x = torch.randn(4, 784, generator=_gen())
        y = torch.randint(0, 10, (4,), generator=_gen())
        return Supervised(build_model(name, device="cpu")), [x, y], ce_labels, optimizer

    return build


def _residual() -> Case:
    torch.manual_seed(0)
    return _vision(build_model("residual_block", device="cpu"), 32, classes=10)


#: zoo name -> (builder, slow).  Every zoo model has an entry (a test checks it).
ZOO_SMALL: dict[str, tuple[Callable[[], Case], bool]] = {
    "alexnet": (_zoo_vision("alexnet", 64, "sgd"), True),  # 61 M parameters: the real net
    "vgg11": (_zoo_vision("vgg11", 32, "sgd"), True),  # 133 M parameters
    "mnasnet0_5": (_zoo_vision("mnasnet0_5", 32), True),
    "mobilenet_v2": (_zoo_vision("mobilenet_v2", 32), True),
    "efficientnet_b0": (_zoo_vision("efficientnet_b0", 32), True),  # stochastic depth
    "vit_b_16": (_vit, True),  # the ViT-B/16 class, 2 layers, d 32, 32x32 images
    "resnet50": (_resnet, True),  # the ResNet-50 class, one bottleneck per stage
    "roberta-base": (_roberta, True),
    "gpt2": (_gpt(n_embd=32, n_layer=2, n_head=2, dropout=0.1), True),
    "llama": (_llama, True),
    "llama-125m": (_llama, True),  # the same Llama class as llama and llama2-7b
    "llama2-7b": (_llama, True),
    "tiny_llama": (_llama, True),
    "gpt2-xl": (_gpt(n_embd=50, n_layer=2, n_head=25, dropout=0.1), True),  # 25 heads
    "mlp": (_vectors("mlp"), False),
    "teach_order": (_vectors("teach_order", "adamw"), False),
    "teach_updates": (_vectors("teach_updates", "adamw"), True),
    "teach_layout": (_vectors("teach_layout", "adamw"), True),
    "teach_recompute": (_vectors("teach_recompute", "adamw"), False),
    "tiny_gpt": (_gpt(n_embd=64, n_layer=2, n_head=4, dropout=0.0), True),
    "residual_block": (_residual, True),
}
assert set(ZOO_SMALL) == set(ZOO), set(ZOO) ^ set(ZOO_SMALL)

_TOKENS = {"vocab_size": 64, "max_position_embeddings": 32}

#: HF model type -> (head, seq len or None, config overrides, slow)
HF_SMALL: dict[str, tuple[str, int | None, dict[str, Any], bool]] = {
    "llama": ("causal-lm", 12, {"hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 2,
                                "num_key_value_heads": 1, **_TOKENS}, False),
    "bert": ("masked-lm", 12, {"hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 2, "num_attention_heads": 2, **_TOKENS},
             True),
    "t5": ("seq2seq-lm", 12, {"d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2,
                              "num_decoder_layers": 2, "num_heads": 2, "vocab_size": 64,
                              "decoder_start_token_id": 0, "pad_token_id": 0},
           True),
    "gpt_neox": ("causal-lm", 12, {"hidden_size": 32, "intermediate_size": 64,
                                   "num_hidden_layers": 2, "num_attention_heads": 2,
                                   **_TOKENS}, True),
    "vit": ("image-classification", None, {"image_size": 32, "patch_size": 8,
                                           "hidden_size": 32, "intermediate_size": 64,
                                           "num_hidden_layers": 2, "num_attention_heads": 2,
                                           "num_labels": 10}, True),
    "resnet": ("image-classification", None, {"embedding_size": 16, "hidden_sizes": [16, 32],
                                              "depths": [1, 1], "layer_type": "basic",
                                              "num_labels": 10, "image_size": 32}, True),
}
