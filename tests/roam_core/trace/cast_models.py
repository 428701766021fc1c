"""Small models whose autocast step casts one activation several times (merged-casts tests)."""

from __future__ import annotations

import torch
from torch import nn


class Fanout(nn.Module):
    """One fp32 activation read by three linears (a Llama layer's q, k and v projections)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        return (self.q(h) * self.k(h) + self.v(h)).float().square().mean()
