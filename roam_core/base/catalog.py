"""Names that torch-free code (the app's web server, the CLI's help) needs without importing
the torch-only packages that own them.

:data:`ZOO_NAMES` lists the keys of :data:`roam_core.zoo.ZOO`, teaching models first (a test
checks that the two agree).
"""

from __future__ import annotations

__all__ = ["ZOO_NAMES"]

#: Model names of :data:`roam_core.zoo.ZOO` (``roam trace MODEL``), teaching models first.
ZOO_NAMES: tuple[str, ...] = (
    "mlp", "tiny_gpt", "residual_block", "teach_order", "teach_updates", "teach_layout",
    "teach_recompute", "alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2",
    "efficientnet_b0", "vit_b_16", "resnet50", "roberta-base", "gpt2", "gpt2-xl", "llama",
)
