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


class TokenHead(nn.Module):
    """Language models: LayerNorm + linear to the vocabulary at every position."""

    def __init__(self, features: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(features)
        self.fc = nn.Linear(features, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.ln(x))


def make_aux_heads(stages: list[nn.Module], input_shape: tuple[int, ...], num_classes: int,
                   seed: int, *, example: torch.Tensor | None = None) -> list[nn.Module | None]:
    """One head per stage but the last (None there), seeded, sized from a dry forward.

    ``example``: an input batch to size the heads with (token ids for a language model;
    default zeros of ``input_shape``). With integer inputs the heads are per-token
    :class:`TokenHead`s over the model's output vocabulary.
    """
    heads: list[nn.Module | None] = []
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + 4242)
        p = next(stages[0].parameters())
        tokens = example is not None and not example.is_floating_point()
        if example is None:
            x = torch.zeros((2, *input_shape), dtype=p.dtype, device=p.device)
        else:
            x = example.to(device=p.device, dtype=p.dtype if not tokens else example.dtype)
        training = [m.training for m in stages]
        for m in stages:
            m.eval()
        try:
            outs = []
            for m in stages:
                x = m(x)
                outs.append(x)
            vocab = outs[-1].shape[-1]
            for s, x in enumerate(outs):
                if s == len(stages) - 1:
                    heads.append(None)
                    break
                if tokens:
                    heads.append(TokenHead(x.shape[-1], vocab).to(device=p.device, dtype=p.dtype))
                    continue
                spatial = x.dim() == 4
                feats = x.shape[1] if spatial else int(x[0].numel())
                heads.append(AuxHead(feats, num_classes, spatial).to(device=p.device, dtype=p.dtype))
        finally:
            for m, tr in zip(stages, training):
                m.train(tr)
    return heads
