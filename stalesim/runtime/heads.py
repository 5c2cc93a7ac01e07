"""Auxiliary heads for local-update schedules (Laskin et al., "Parallel Training of
Deep Networks with Local Updates"): each stage but the last trains on its own
small classifier (global average pool + linear) on its output; the last stage's
own head is the model's classifier."""

from __future__ import annotations

import torch
from torch import nn


class AuxHead(nn.Module):
    """Global average pool (for feature maps) + linear classifier."""

    def __init__(self, features: int, num_classes: int, spatial: bool) -> None:
        super().__init__()
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()) if spatial else nn.Flatten()
        self.fc = nn.Linear(features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(x))


def make_aux_heads(stages: list[nn.Module], input_shape: tuple[int, ...], num_classes: int,
                   seed: int) -> list[nn.Module | None]:
    """One head per stage but the last (None there), seeded, sized from a dry forward."""
    heads: list[nn.Module | None] = []
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + 4242)
        p = next(stages[0].parameters())
        x = torch.zeros((2, *input_shape), dtype=p.dtype, device=p.device)
        training = [m.training for m in stages]
        for m in stages:
            m.eval()
        try:
            for s, m in enumerate(stages):
                x = m(x)
                if s == len(stages) - 1:
                    heads.append(None)
                    break
                spatial = x.dim() == 4
                feats = x.shape[1] if spatial else int(x[0].numel())
                heads.append(AuxHead(feats, num_classes, spatial).to(device=p.device, dtype=p.dtype))
        finally:
            for m, tr in zip(stages, training):
                m.train(tr)
    return heads
