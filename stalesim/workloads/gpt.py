"""Character-level decoder-only GPT as a :class:`LayeredModel` (``gpt-char`` in the zoo).

Blocks (each one a pipeline split point):

* ``embed``: token embedding + learned position embedding (sum);
* ``h0`` .. ``h{n_layer-1}``: pre-norm transformer blocks,
  ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``; causal multi-head
  self-attention through :func:`torch.nn.functional.scaled_dot_product_attention`
  (``is_causal=True``), MLP 4x wide with GELU;
* ``head``: final LayerNorm + linear head to the vocabulary.

**PPV counting on blocks.** A transformer block is indivisible (its residual
stream would otherwise have to cross a stage boundary twice), so every block
counts as exactly one PPV unit: ``weight_layers = [1] * (n_layer + 2)``. PPV
entry k places the pipeline register after block k counted from 1 (the
embedding is block 1, transformer layer i is block i + 2, the head is the last):
``ppv=[1]`` puts the embedding alone on stage 0, ``ppv=[3]`` the embedding and
two transformer layers. S can be 1 .. n_layer + 2.

**Vocabulary.** Fixed by construction to the 128 ASCII code points (token id =
byte value), independent of the data, so the emulator, every executor rank and
every data split agree without reading the text; text with a non-ASCII byte is
refused by the loader. Unused ids just learn low logits.

No dropout (its RNG stream would differ between the emulator and the executor)
and no weight tying between the embedding and the head (they sit on different
stages; tying would need a cross-stage reduction no pipeline schedule has).
Initialisation follows GPT-2: N(0, 0.02) for linear and embedding weights,
residual output projections N(0, 0.02 / sqrt(2 n_layer)), zero biases.

Options come with the model name: ``gpt-char`` (n_layer=4, n_embd=128, n_head=4,
block_size=128) or ``gpt-char:n_layer=12,n_embd=384,n_head=6,block_size=256``
(any subset, any order); :func:`parse_gpt_name` validates them and
:func:`gpt_name` gives the canonical spelling (both in the torch-free
:mod:`stalesim.workloads.names`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from stalesim.workloads.names import BASE_NAME, GPTConfig, gpt_name, is_gpt_name, parse_gpt_name

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.workloads.layered import LayeredModel

__all__ = ["BASE_NAME", "VOCAB_SIZE", "GPTConfig", "build_gpt", "gpt_name", "is_gpt_name", "parse_gpt_name"]

VOCAB_SIZE = 128  # ASCII


class Embedding(nn.Module):
    """Token + learned position embedding; input (B, T) int64 ids, output (B, T, C)."""

    def __init__(self, vocab: int, block_size: int, n_embd: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.block_size = block_size

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[-1]
        if self.block_size < T:
            raise RuntimeError(f"stalesim: sequence of {T} tokens exceeds block_size {self.block_size}")
        pos = torch.arange(T, device=idx.device)
        return self.tok(idx) + self.pos(pos)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        shape = (B, T, self.n_head, C // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.proj(self.act(self.fc(self.ln2(x))))


class LMHead(nn.Module):
    """Final LayerNorm + linear map to vocabulary logits (B, T, V)."""

    def __init__(self, n_embd: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.out = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def _init_gpt(model: nn.Module, n_layer: int) -> None:
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            std = 0.02
            if isinstance(m, nn.Linear) and name.endswith(".proj"):
                std = 0.02 / math.sqrt(2 * n_layer)  # residual output projections (GPT-2)
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:  # an embedding has no bias
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build_gpt(name: str) -> LayeredModel:
    """The LayeredModel for a ``gpt-char[:...]`` name (unseeded; the zoo seeds it)."""
    from stalesim.workloads.layered import LayeredModel

    cfg = parse_gpt_name(name)
    blocks: list[tuple[str, nn.Module]] = [("embed", Embedding(VOCAB_SIZE, cfg.block_size, cfg.n_embd))]
    blocks += [(f"h{i}", TransformerBlock(cfg.n_embd, cfg.n_head)) for i in range(cfg.n_layer)]
    blocks.append(("head", LMHead(cfg.n_embd, VOCAB_SIZE)))
    model = LayeredModel(
        blocks, name=gpt_name(cfg), input_shape=(cfg.block_size,), default_dataset="shakespeare",
        weight_layers=[1] * len(blocks), input_dtype=torch.long, label_shape=(cfg.block_size,),
        task="lm",
    )
    _init_gpt(model, cfg.n_layer)
    model.gpt_config = cfg
    model.vocab_size = VOCAB_SIZE
    return model
