"""The repeated blocks of a model: the modules that checkpointing every block wraps and
FSDP2's ``blocks`` policy shards one by one.

Examples
--------
>>> import torch
>>> class Block(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = torch.nn.Linear(4, 4)
>>> stem = torch.nn.Sequential(torch.nn.Linear(4, 4))
>>> m = torch.nn.Sequential(stem, Block(), Block(), torch.nn.Linear(4, 2))
>>> [name for name, _ in block_modules(m)]
['1', '2']
"""

from __future__ import annotations

from collections import Counter

from torch import nn

__all__ = ["block_modules"]


def block_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The repeated blocks to checkpoint, ``(qualified name, module)`` in model order.

    Blocks are composite modules (modules with children) kept in a list: every composite
    child of an ``nn.ModuleList``, and the children of the most common composite class of
    an ``nn.Sequential`` that holds at least two of it.  So transformer layers count in
    either container (torchvision's ViT keeps them in a ``Sequential``), and so do
    MobileNet's inverted residuals beside its stem and head, ResNet's bottlenecks in all
    four stages and T5's encoder and decoder layers.  Lists inside a block (a mixture of
    experts' experts) are part of that block.
    """
    def composite(m: nn.Module) -> bool:
        return next(iter(m.children()), None) is not None

    found: dict[str, list[str]] = {}  # list path -> the names of its blocks
    for name, m in model.named_modules():
        kids = [(k, c) for k, c in m.named_children() if composite(c)]
        if isinstance(m, nn.Sequential) and kids:
            common = Counter(type(c) for _, c in kids).most_common(1)[0]
            kids = [(k, c) for k, c in kids if type(c) is common[0]] if common[1] >= 2 else []
        elif not isinstance(m, nn.ModuleList):
            kids = []
        if kids:
            found[name] = [f"{name}.{k}" if name else k for k, _ in kids]
    blocks = [b for bs in found.values() for b in bs]
    mods = dict(model.named_modules())
    return [(b, mods[b]) for b in blocks
            if not any(b.startswith(o + ".") for o in blocks)]
