"""A Vision Transformer written the usual torch way, as a ``--model`` plug-in.

Nothing of stalesim is imported: the factory returns an ``nn.Sequential`` whose children are
the pipeline blocks (a cut falls only between them):

* a patch embedding that owns its conv *and*, as parameters of its own, the class token and
  the position embedding (used in its ``forward``, not by any sub-module);
* ``depth`` x ``nn.TransformerEncoderLayer(batch_first=True)``: its ``nn.MultiheadAttention``
  returns a tuple and reads its ``out_proj`` weights without calling ``out_proj``;
* a head: layer norm and a linear classifier on the class token.

Dropout is 0 so every process computes the same numbers (the executor's losses equal the
emulator's). Run it from this folder, e.g.::

    stalesim profile --model vit_plugin:vit --batch-size 16 --repeats 1 --warmup 0
    stalesim validate --model vit_plugin:vit --devices cpu:2 --schedules zb-h1 --iterations 4 --out val
    stalesim plan --model vit_plugin:vit --devices 2 --target-loss 2.0 --iterations 8 --out plan

The input is a 3 x 32 x 32 image (the ``input_shape`` attribute; ``--dataset synthetic`` by
default), the output 10 logits.
"""

from __future__ import annotations

import torch
from torch import nn


class PatchEmbedding(nn.Module):
    """Image -> tokens: a strided conv cuts ``patch`` x ``patch`` patches, the class token
    goes first and the (learned) position embedding is added."""

    def __init__(self, image: int, patch: int, channels: int, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.conv(x).flatten(2).transpose(1, 2)  # (batch, tokens, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embedding


class ClassifierHead(nn.Module):
    """The class token's features -> logits."""

    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x[:, 0]))


def vit(image: int = 32, patch: int = 8, channels: int = 3, dim: int = 32, depth: int = 4,
        heads: int = 4, classes: int = 10) -> nn.Sequential:
    """The ViT as pipeline blocks (called with no arguments by ``--model vit_plugin:vit``)."""
    layers = [nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0,
                                         activation="gelu", batch_first=True, norm_first=True)
              for _ in range(depth)]
    seq = nn.Sequential(PatchEmbedding(image, patch, channels, dim), *layers, ClassifierHead(dim, classes))
    seq.input_shape = (channels, image, image)  # type: ignore[assignment]
    return seq
