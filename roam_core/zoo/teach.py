"""Teaching models: each one makes a single planner effect plain (plain torch, tiny).

All take ``[B, 784]`` vectors and return 10 class logits (the zoo's ``mlp`` family), so they
trace like the ``mlp`` teaching model:

* :class:`TeachOrder`: **the order**.  A wide branch makes a big temporary activation that
  no backward needs; program order makes it after the narrow branch's saved activations, so
  it stacks on them.  Computing the wide branch first frees it before they exist.
* :class:`TeachUpdates`: **weight-update placement**.  Large weights, small activations: in
  program order every gradient is alive when the optimizer runs at the end.  Applying each
  update as soon as its gradient is ready frees the gradients one by one.
* :class:`TeachLayout`: **the layout**.  Activations that grow, shrink and grow again: a
  caching allocator replaying program order splits its segments into holes too small for
  the next request and reserves new ones; roam's arena places every tensor at a fixed offset.
* :class:`TeachRecompute`: **recomputation**.  A chain of cheap elementwise layers on a wide
  activation: every layer's output is saved for the backward, the order is already at the
  live-set floor, and only dropping and re-running cheap layers fits a smaller budget.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

__all__ = ["TeachLayout", "TeachOrder", "TeachRecompute", "TeachUpdates"]


class TeachOrder(nn.Module):
    """Two branches; the wide one's big temporary is freed in the forward itself."""

    scale: torch.Tensor  # a registered buffer

    def __init__(self, width: int = 8, depth: int = 6, num_classes: int = 10) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(784))
        self.depth = depth
        self.narrow_head = nn.Linear(784, num_classes)
        self.register_buffer("scale", torch.ones(width))  # a buffer: no gradient through it
        self.wide_head = nn.Linear(784, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x * self.gain
        for _ in range(self.depth):  # every output is saved for the backward
            a = torch.tanh(a)
        # a [B, width, 784] temporary that no backward needs: freed once its mean is taken
        big = (x.unsqueeze(1) * self.scale[None, :, None]).mean(1)
        return self.narrow_head(a) + self.wide_head(big)


class TeachUpdates(nn.Module):
    """Eight big square layers on a small batch: the gradients dominate the step."""

    def __init__(self, hidden: int = 512, depth: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(784, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        layers.append(nn.Linear(hidden, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class TeachLayout(nn.Module):
    """Widths that swell and shrink, so freed blocks rarely fit the next request."""

    def __init__(self, widths: tuple[int, ...] = (512, 64, 1024, 32, 2048, 16),
                 num_classes: int = 10) -> None:
        super().__init__()
        dims = (784, *widths)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


class TeachRecompute(nn.Module):
    """A chain of cheap elementwise layers on the input, every output saved for the backward."""

    def __init__(self, depth: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(784))
        self.depth = depth
        self.head = nn.Linear(784, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.gain
        for _ in range(self.depth):
            h = torch.tanh(h)
        return self.head(h)
