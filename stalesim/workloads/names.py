"""Model names without torch: the GPT's options and which task a zoo name trains.

Kept free of torch so that :meth:`stalesim.runtime.config.TrainConfig.check` (and
everything that builds a schedule from a config) stays importable and fast without
torch; :mod:`stalesim.workloads.gpt` and :mod:`stalesim.workloads.zoo` build on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from stalesim.errors import StalesimError

BASE_NAME = "gpt-char"
CNN_FIXED = ("lenet5", "alexnet", "vgg16")
RESNET_RE = re.compile(r"^resnet(\d+)$")
# Bounds on the GPT's options (docs/failure.md): far beyond the CPU model, so that a typo
# such as n_layer=1000000 is refused in milliseconds, not after minutes of building.
# GPT-3 175B has 96 layers of width 12,288 and 2,048 positions.
GPT_LIMITS = {"n_layer": 1024, "n_embd": 16384, "n_head": 1024, "block_size": 65536}
MAX_GPT_PARAMS = 1 << 32  # ~4.3e9 (17 GB of float32 weights before optimizer state)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the character GPT (defaults: the small CPU model, 4 x 128)."""

    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    block_size: int = 128

    def check(self) -> GPTConfig:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise StalesimError(f"model: {BASE_NAME} option {f.name} must be an integer >= 1, got {v!r}")
        for name, most in GPT_LIMITS.items():
            if getattr(self, name) > most:
                raise StalesimError(f"model: {BASE_NAME} option {name}={getattr(self, name)} is larger "
                                    f"than this tool builds (at most {most:,})")
        if self.n_embd % self.n_head:
            raise StalesimError(
                f"model: {BASE_NAME} n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        params = 12 * self.n_layer * self.n_embd**2 + self.block_size * self.n_embd
        if params > MAX_GPT_PARAMS:
            raise StalesimError(f"model: {BASE_NAME} with n_layer={self.n_layer}, n_embd={self.n_embd}, "
                                f"block_size={self.block_size} has about {params:,} parameters, more than "
                                f"this tool builds (at most {MAX_GPT_PARAMS:,})")
        return self


def is_gpt_name(name: str) -> bool:
    key = str(name).strip().lower()
    return key == BASE_NAME or key.startswith(BASE_NAME + ":")


def parse_gpt_name(name: str) -> GPTConfig:
    """``gpt-char[:k=v,...]`` -> GPTConfig (StalesimError naming a bad option)."""
    key = str(name).strip().lower()
    if not is_gpt_name(key):
        raise StalesimError(f"model: {name!r} is not a {BASE_NAME} name")
    opts: dict[str, int] = {}
    rest = key[len(BASE_NAME) + 1:] if ":" in key else ""
    known = [f.name for f in fields(GPTConfig)]
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep:
            raise StalesimError(f"model: option {part!r} of {BASE_NAME} must be key=value "
                                f"(e.g. {BASE_NAME}:n_layer=12,n_embd=384)")
        if k not in known:
            raise StalesimError(f"model: unknown {BASE_NAME} option {k!r} (known: {', '.join(known)})")
        try:
            opts[k] = int(v)
        except ValueError:
            raise StalesimError(f"model: {BASE_NAME} option {k} must be an integer, got {v.strip()!r}") from None
    return GPTConfig(**opts).check()


def gpt_name(cfg: GPTConfig) -> str:
    """Canonical name: the base name plus every option that differs from the default."""
    default = GPTConfig()
    diff = [f"{f.name}={getattr(cfg, f.name)}" for f in fields(cfg)
            if getattr(cfg, f.name) != getattr(default, f.name)]
    return BASE_NAME + (":" + ",".join(diff) if diff else "")


def model_task(name: str) -> str | None:
    """``"lm"`` for the GPT names, ``"classify"`` for the zoo CNNs, None for a name the zoo
    does not know (a bring-your-own model). Builds nothing."""
    key = str(name).strip().lower()
    if is_gpt_name(key):
        return "lm"
    if key in CNN_FIXED or RESNET_RE.match(key):
        return "classify"
    return None
