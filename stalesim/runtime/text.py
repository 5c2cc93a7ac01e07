"""Character-level text data for the language model: the corpus and its batch stream.

``--dataset shakespeare`` reads ``shakespeare/shakespeare_complete.txt.gz`` (or the
unpacked ``.txt``) under the data root (``cfg.data_dir`` or ``$STALESIM_DATA``; also
looked for in the root itself and in the stalesim cache). The split is the usual
one: the first 90% of the characters train, the last 10% validate.

**Vocabulary**: the 128 ASCII code points, token id = byte value
(:data:`stalesim.workloads.gpt.VOCAB_SIZE`). It is fixed by construction, so the
emulator, every executor rank and both splits agree without reading the text; a
byte >= 128 is refused (StalesimError with its offset).

**Batches** (:class:`TextStream`, the text twin of ``BatchStream``): global batch t
is ``batch_size`` windows of ``block_size + 1`` consecutive characters whose start
offsets are drawn uniformly from the training split by a generator seeded with
(seed, t) alone; x is the first ``block_size`` characters, y the same window
shifted by one (next-character targets). So batch t is the same bits in every
process and does not depend on what ran before. One *epoch* is
``train_chars // (batch_size * block_size)`` batches (every character seen once
in expectation). Validation uses ``eval_windows`` fixed, evenly spaced windows of
the validation split (the same for every run and seed, so runs compare on the
same text); its metric is the mean next-character cross-entropy in nats and in
bits per character (nats / ln 2).

``--dataset synthetic`` with the LM gives a seeded synthetic text (a sparse
order-2 Markov chain over 28 letters, so it is learnable) of about
``synthetic_size * block_size`` training characters: tests need no data files.
A Markov chain is drawn one character after the other (each depends on the two
before it), a few hundred nanoseconds per character in Python, so its length is bounded
(:data:`MAX_SYNTHETIC_TEXT_CHARS`, a few seconds of drawing): ``synthetic_size``
windows of a huge ``block_size`` (65,536) are refused in one line naming both,
by the memory preflight before anything is built and by the generator itself.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from stalesim.errors import StalesimError
from stalesim.inputs import read_bytes
from stalesim.limits import MAX_CORPUS_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig

SHAKESPEARE_FILE = "shakespeare_complete.txt"
TRAIN_FRACTION = 0.9
# training characters of the synthetic text at most: drawn sequentially at about 0.22 us per
# character on one core (4.7M characters in 1.0 s on a shared 2-core machine; the generator before,
# with Python lists, 0.29 us), so 8.4M characters (9.3M with the validation split) take about 2 s,
# twice that on a busy machine; the default 1,024 windows of the default 128 characters are 131,072
MAX_SYNTHETIC_TEXT_CHARS = 1 << 23
# characters per Python list of uniforms (bounds the transient lists to a few MB)
_CHUNK = 1 << 18
# bytes per character the generator holds: its float64 uniforms, the int16 contexts drawn, the uint8 text
SYNTHETIC_TEXT_BYTES_PER_CHAR = 11


@dataclass
class TextData:
    """A character corpus split into train/validation (uint8 ASCII codes)."""

    name: str
    train: torch.Tensor
    val: torch.Tensor
    note: str

    @property
    def train_size(self) -> int:
        return int(self.train.numel())


def _candidates(cfg: TrainConfig) -> list[Path]:
    from stalesim.runtime.datapaths import cache_dir, data_root

    root = data_root(cfg)
    # a given data folder is the only source (docs/failure.md): no silent fallback to the cache
    dirs = [root / "shakespeare", root] if root is not None else [cache_dir() / "shakespeare"]
    out = []
    for d in dirs:
        out += [d / (SHAKESPEARE_FILE + ".gz"), d / SHAKESPEARE_FILE]
    return out


def ascii_tensor(raw: bytes, source: str) -> torch.Tensor:
    """Bytes -> uint8 tensor of token ids; StalesimError at the first non-ASCII byte."""
    if not raw:  # torch.frombuffer refuses an empty buffer with a ValueError
        raise StalesimError(f"dataset: {source} holds no text (empty file)")
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    bad = (t >= 128).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise StalesimError(
            f"dataset: {source} has a non-ASCII byte 0x{int(t[i]):02x} at offset {i}; the "
            "character vocabulary is the 128 ASCII code points")
    return t


def split(tokens: torch.Tensor, name: str, note: str) -> TextData:
    n = tokens.numel()
    k = int(n * TRAIN_FRACTION)
    return TextData(name, tokens[:k], tokens[k:], note)


def load_shakespeare(cfg: TrainConfig) -> TextData:
    looked = _candidates(cfg)
    for path in looked:
        if path.is_file():
            # bounded after unpacking: a small gzip that unpacks to gigabytes is one line
            raw = read_bytes(path, "dataset", MAX_CORPUS_BYTES, gunzip=path.suffix == ".gz")
            tokens = ascii_tensor(raw, str(path))
            data = split(tokens, "shakespeare",
                         f"Shakespeare complete works ({tokens.numel():,} characters, "
                         f"90/10 split, ASCII vocabulary)")
            return data
    from stalesim.runtime.datapaths import data_root

    hint = "" if data_root(cfg) is not None else "; pass --data-dir or set STALESIM_DATA"
    raise StalesimError(
        f"dataset: shakespeare not found (looked for {SHAKESPEARE_FILE}[.gz] in "
        f"{', '.join(sorted({str(p.parent) for p in looked}))}){hint}")


def synthetic_text_chars(synthetic_size: int, block_size: int) -> tuple[int, int]:
    """(training characters, all characters) of the synthetic text of ``synthetic_size`` windows
    of ``block_size``: at least four windows to train on, a ninth more (at least two windows) to
    validate on."""
    n_train = max(int(synthetic_size) * int(block_size), 4 * (int(block_size) + 1))
    return n_train, n_train + max(n_train // 9, 2 * (int(block_size) + 1))


def check_synthetic_text(synthetic_size: int, block_size: int) -> None:
    """StalesimError naming ``synthetic_size`` and ``block_size`` when the synthetic text would be
    longer than :data:`MAX_SYNTHETIC_TEXT_CHARS` (module doc)."""
    n_train, _ = synthetic_text_chars(synthetic_size, block_size)
    if n_train > MAX_SYNTHETIC_TEXT_CHARS:
        most = MAX_SYNTHETIC_TEXT_CHARS // int(block_size)
        fix = (f"give --synthetic-size {most} or less" if most >= 4
               else f"use a block_size of at most {MAX_SYNTHETIC_TEXT_CHARS // 4 - 1:,}")
        raise StalesimError(
            f"synthetic_size: {synthetic_size:,} windows of block_size {block_size:,} are {n_train:,} characters "
            f"of synthetic text, more than this tool draws (at most {MAX_SYNTHETIC_TEXT_CHARS:,}); {fix}, "
            "or train on a real text (--dataset shakespeare)")


def synthetic_text(cfg: TrainConfig, block_size: int) -> TextData:
    """Seeded order-2 Markov text over 'a'..'z', space and newline (learnable, no files).

    The state is the context of the last two symbols (``a * A + b``); each context allows three
    next symbols, and the next state of choice k is precomputed, so the loop does one table look-up
    and two comparisons per character. The uniforms are read in chunks and the contexts kept in an
    array, so what it holds is :data:`SYNTHETIC_TEXT_BYTES_PER_CHAR` per character, not Python lists
    of the whole text."""
    from stalesim.runtime.datapaths import mix_seed

    check_synthetic_text(cfg.synthetic_size, block_size)
    g = torch.Generator().manual_seed(mix_seed(cfg.seed, 31337))
    alphabet = torch.tensor(list(b"abcdefghijklmnopqrstuvwxyz \n"), dtype=torch.uint8)
    A = alphabet.numel()
    # each (prev2, prev1) context allows 3 next symbols with random probabilities
    choices = torch.randint(0, A, (A * A, 3), generator=g)
    w = torch.rand((A * A, 3), generator=g, dtype=torch.float64) + 0.1
    cum = (w.cumsum(1) / w.sum(1, keepdim=True)).tolist()
    following = ((torch.arange(A * A)[:, None] % A) * A + choices).tolist()  # the context after choice k
    table = [(c[0], c[1], *f) for c, f in zip(cum, following)]
    n_train, n = synthetic_text_chars(cfg.synthetic_size, block_size)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    # the contexts drawn, 2 bytes each (an array: a list of ints and torch.tensor(list) took twice as long)
    drawn = array("h")
    put = drawn.append
    ctx = 1  # symbols (0, 1) before the text
    for lo in range(0, n, _CHUNK):
        for x in u[lo:lo + _CHUNK].tolist():
            c0, c1, k0, k1, k2 = table[ctx]
            ctx = k0 if x < c0 else (k1 if x < c1 else k2)
            put(ctx)
    contexts = torch.frombuffer(drawn, dtype=torch.int16)
    tokens = torch.empty(n, dtype=torch.uint8)
    for lo in range(0, n, _CHUNK):  # a context's last symbol is the character drawn
        tokens[lo:lo + _CHUNK] = alphabet[contexts[lo:lo + _CHUNK].long() % A]
    return TextData("synthetic", tokens[:n_train], tokens[n_train:], "synthetic text (order-2 Markov chain)")


def load_text(cfg: TrainConfig, block_size: int) -> TextData:
    if cfg.dataset == "synthetic":
        return synthetic_text(cfg, block_size)
    if cfg.dataset == "shakespeare":
        return load_shakespeare(cfg)
    raise StalesimError(f"dataset: {cfg.dataset!r} is not a text dataset (use shakespeare or synthetic)")


class TextStream:
    """Callable t -> (x, y): global batch t of the LM (see the module doc)."""

    def __init__(self, cfg: TrainConfig, data: TextData, block_size: int) -> None:
        self.cfg = cfg
        self.data = data
        self.block_size = int(block_size)
        self.batch_size = cfg.batch_size
        need = self.block_size + 1
        if data.train_size < need or data.val.numel() < need:
            raise StalesimError(
                f"model: block_size {self.block_size} needs windows of {need} characters but the "
                f"{data.name} splits have {data.train_size} / {data.val.numel()}")
        self.batches_per_epoch = max(1, data.train_size // (cfg.batch_size * self.block_size))
        self._offsets = torch.arange(need)

    def windows(self, source: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = source[starts[:, None] + self._offsets[None, :]].long()
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def __call__(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        from stalesim.runtime.datapaths import mix_seed

        g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, 7340033, int(t)))
        high = self.data.train_size - self.block_size  # last valid start + 1
        starts = torch.randint(0, high, (self.batch_size,), generator=g)
        return self.windows(self.data.train, starts)

    def eval_starts(self) -> torch.Tensor:
        """``eval_windows`` evenly spaced window starts in the validation split."""
        last = self.data.val.numel() - self.block_size - 1
        k = max(1, min(int(self.cfg.eval_windows), last + 1))
        if k == 1:
            return torch.zeros(1, dtype=torch.long)
        return torch.div(torch.arange(k) * last, k - 1, rounding_mode="floor")

    def test_batches(self, batch_size: int = 64) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The validation windows in order, ``batch_size`` at a time."""
        starts = self.eval_starts()
        for a in range(0, starts.numel(), batch_size):
            yield self.windows(self.data.val, starts[a:a + batch_size])


def text_stream(cfg: TrainConfig, block_size: int, data: TextData | None = None) -> TextStream:
    return TextStream(cfg, data if data is not None else load_text(cfg, block_size), block_size)
