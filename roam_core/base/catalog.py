"""Names that torch-free code (the app's web server, the CLI's help) needs without importing
the torch-only packages that own them.

:data:`ZOO_NAMES` lists the keys of :data:`roam_core.zoo.ZOO`, teaching models first;
:data:`TRANSFORMER_NAMES` those that are transformers (trained, and so by default traced by
``roam fit`` and the app's what-fits, in ``bf16-mixed``): tests check that both agree with
the zoo.
"""

from __future__ import annotations

__all__ = ["TRANSFORMER_NAMES", "ZOO_NAMES", "default_precision"]

#: Model names of :data:`roam_core.zoo.ZOO` (``roam trace MODEL``), teaching models first.
ZOO_NAMES: tuple[str, ...] = (
    "mlp", "tiny_gpt", "tiny_llama", "residual_block", "teach_order", "teach_updates",
    "teach_layout", "teach_recompute", "alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2",
    "efficientnet_b0", "vit_b_16", "resnet50", "roberta-base", "gpt2", "gpt2-xl", "llama",
    "llama-125m", "llama2-7b",
)

#: The transformers among :data:`ZOO_NAMES` (``roam_core.zoo.sources.TRANSFORMER_ZOO``).
TRANSFORMER_NAMES: tuple[str, ...] = ("tiny_gpt", "tiny_llama", "vit_b_16", "roberta-base",
                                     "gpt2", "gpt2-xl", "llama", "llama-125m", "llama2-7b")


def default_precision(model: str | None, hf_config: bool = False) -> str:
    """``bf16-mixed`` for a transformer (any Hugging Face config), else ``fp32``.

    Examples
    --------
    >>> default_precision("gpt2"), default_precision("resnet50"), default_precision(None, True)
    ('bf16-mixed', 'fp32', 'bf16-mixed')
    """
    return "bf16-mixed" if hf_config or model in TRANSFORMER_NAMES else "fp32"
