"""Memory preflight: refuse, in one line and before anything is allocated, work that cannot fit.

Every option of ``gpt-char`` may be inside its documented bound while their product
is not: ``block_size=65536`` with a batch of 128 windows, ~4e9 parameters with Adam,
or a synthetic set of a million windows each ask for tens of GB, and would end in a
``MemoryError`` or the OOM killer after minutes of building. So every command that
allocates a model or data (``emulate``, ``study``, ``run``, ``profile``,
``validate``) first calls :func:`check_memory` with an estimate made **without
building anything**, from the facts the zoo knows by name
(:mod:`stalesim.workloads.zoo_facts`, :mod:`stalesim.workloads.names`) and the data
set's size:

* **weights**: parameters x element size x (weights + gradients + optimizer state:
  :func:`stalesim.runtime.optim.state_copies`);
* **activations** of one batch: batch size x what one sample's forward keeps
  (measured once per zoo family: conv nets from their layer outputs, the GPT's
  ~16 x n_embd values per token and layer plus the logits);
* **data**: the training and test sets in memory (synthetic sets from their size;
  what the synthetic text is drawn through included). The synthetic text is also
  bounded in length, since it is drawn one character at a time
  (:func:`stalesim.runtime.text.check_synthetic_text`): a longer one is refused here,
  before anything is built, rather than drawn for minutes.

The estimate is a **lower bound** (no weight versions of stale schedules, one batch
of activations, no allocator slack), so a refusal is certain to be right, and what
passes may still be refused later by the finer estimate of ``study --batched``
(:meth:`stalesim.emulator.batched.BatchedEmulator.preflight`, which builds one model).
The memory compared with is ``MemAvailable`` of ``/proc/meminfo`` (the device's free
memory for the weights and activations on CUDA), or ``STALESIM_MEMORY_BYTES`` when set.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stalesim.errors import StalesimError
from stalesim.workloads.names import is_gpt_name, parse_gpt_name
from stalesim.workloads.zoo_facts import model_facts

if TYPE_CHECKING:  # pragma: no cover
    from stalesim.runtime.config import TrainConfig

__all__ = ["MEMORY_ENV", "MemoryEstimate", "available_memory", "check_memory", "data_bytes",
           "estimate_model", "estimate_run", "model_size", "preflight"]

MEMORY_ENV = "STALESIM_MEMORY_BYTES"

# (parameters, activation values of one sample's forward) of the fixed zoo models, 10
# classes; tests/integration/test_runtime_preflight.py checks them against the built models
_FIXED = {"lenet5": (61_706, 15_002), "alexnet": (23_272_266, 111_626), "vgg16": (15_249_354, 863_242)}
# CIFAR ResNet with n blocks per stage (depth 6n + 2): both exactly linear in n
_RESNET_PARAMS = (97_216, -21_926)
_RESNET_ACTS = (114_688, 49_290)
# per token and transformer block: x, ln1, qkv (3C), attention out, ln2, fc (4C), gelu (4C), ...
_GPT_ACTS_PER_LAYER = 16
# real data sets as uint8 in memory (train + test), decoded once
_DATA_BYTES = {"mnist": 70_000 * 784, "fashion-mnist": 70_000 * 784, "cifar10": 60_000 * 3072,
               "shakespeare": 5_500_000}

_GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes at least needed (see the module doc)."""

    weights: int
    activations: int
    data: int

    @property
    def device(self) -> int:
        return self.weights + self.activations

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.data

    def times(self, n: int, data: int | None = None) -> MemoryEstimate:
        """``n`` copies (processes or batched runs); ``data`` copies of the data set (default ``n``)."""
        return MemoryEstimate(self.weights * n, self.activations * n, self.data * (n if data is None else data))


def model_size(model: str, num_classes: int = 10) -> tuple[int, int]:
    """(parameters, activation values per sample) of zoo model ``model``, from its name.
    A name the zoo does not know is (0, 0): nothing to estimate."""
    if is_gpt_name(model):
        from stalesim.workloads.gpt import VOCAB_SIZE

        g = parse_gpt_name(model)
        L, C, T, V = g.n_layer, g.n_embd, g.block_size, VOCAB_SIZE
        params = 12 * L * C * C + 13 * L * C + (T + 2 * V) * C + 2 * C
        return params, T * (_GPT_ACTS_PER_LAYER * C * L + 2 * V)
    facts = model_facts(model)
    if facts is None:
        return 0, 0
    if facts.name in _FIXED:
        params, acts = _FIXED[facts.name]
    else:  # resnet<6n+2>
        n = (int(facts.name[len("resnet"):]) - 2) // 6
        params, acts = _RESNET_PARAMS[0] * n + _RESNET_PARAMS[1], _RESNET_ACTS[0] * n + _RESNET_ACTS[1]
    head = (num_classes - 10) * 64 if num_classes > 10 else 0  # a wider classifier (lower bound)
    return params + head, acts


def data_bytes(cfg: TrainConfig) -> int:
    """Bytes of ``cfg``'s data set in memory (one process); a synthetic text longer than its bound
    is refused (StalesimError naming ``synthetic_size``)."""
    if cfg.dataset == "synthetic":
        if is_gpt_name(cfg.model):
            from stalesim.runtime.text import SYNTHETIC_TEXT_BYTES_PER_CHAR, check_synthetic_text, synthetic_text_chars

            T = parse_gpt_name(cfg.model).block_size
            check_synthetic_text(cfg.synthetic_size, T)
            return synthetic_text_chars(cfg.synthetic_size, T)[1] * SYNTHETIC_TEXT_BYTES_PER_CHAR
        facts = model_facts(cfg.model)
        shape = facts.input_shape if facts is not None else (1, 28, 28)
        n = cfg.synthetic_size + max(cfg.synthetic_size // 4, 1)
        return n * math.prod(shape) * 4  # float32 samples
    return _DATA_BYTES.get(cfg.dataset, 0)


def estimate_model(model: str, *, batch_size: int, element_size: int, optimizer_copies: int,
                   num_classes: int = 10, data: int = 0) -> MemoryEstimate:
    """The estimate for one process training (or profiling) ``model`` at ``batch_size``."""
    params, acts = model_size(model, num_classes)
    return MemoryEstimate(weights=params * element_size * (2 + optimizer_copies),
                          activations=batch_size * acts * element_size, data=data)


def estimate_run(cfg: TrainConfig) -> MemoryEstimate:
    """The estimate for one emulation (or one run's ranks together) of ``cfg``."""
    from stalesim.runtime.optim import state_copies

    return estimate_model(cfg.model, batch_size=cfg.batch_size, element_size=8 if cfg.dtype == "float64" else 4,
                          optimizer_copies=state_copies(cfg), num_classes=cfg.num_classes,
                          data=data_bytes(cfg))


def available_memory(device: str = "cpu") -> tuple[int | None, str]:
    """(bytes free, where that number comes from) for ``device``'s tensors."""
    stated = os.environ.get(MEMORY_ENV)
    if stated:
        try:
            return int(float(stated)), MEMORY_ENV
        except ValueError:
            raise StalesimError(f"{MEMORY_ENV}: expected a number of bytes, got {stated[:40]!r}") from None
    if str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info(torch.device(device))
            return int(free), f"free on {device}"
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable"
    except (OSError, ValueError, IndexError):
        pass
    return None, "unknown"


def check_memory(est: MemoryEstimate, what: str, *, device: str = "cpu", hint: str = "",
                 split: int = 1) -> MemoryEstimate:
    """StalesimError (one line, naming the estimate and the limit) when ``est`` cannot fit;
    ``split``: GPUs the weights and activations are spread over (the ranks of a run)."""
    # on a GPU the weights and activations live there and the data on the host
    if str(device).startswith("cuda"):
        checks = [(est.device // max(split, 1), str(device)), (est.data, "cpu")]
    else:
        checks = [(est.total, "cpu")]
    for need, dev in checks:
        free, source = available_memory(dev)
        if free is None or need <= free:
            continue
        parts = (f"weights, gradients and optimizer state {est.weights / _GIB:.1f} GiB, activations of one "
                 f"batch {est.activations / _GIB:.1f} GiB, data {est.data / _GIB:.1f} GiB")
        raise StalesimError(f"memory: {what} needs at least {need / _GIB:.1f} GiB ({parts}) but "
                            f"{free / _GIB:.1f} GiB are available ({source})"
                            + (f"; {hint}" if hint else "; use a smaller model, batch or data set"))
    return est


def preflight(cfg: TrainConfig, *, what: str, processes: int = 1, runs_per_process: int = 1,
              data_copies: int | None = None, device: str | None = None, split: int = 1) -> MemoryEstimate:
    """:func:`check_memory` of ``processes`` processes, each training ``runs_per_process``
    runs of ``cfg`` (a batched study) and each holding its data set (``data_copies``
    in all; default: one per process, one per run when synthetic data depends on the seed);
    ``device``/``split``: where the model lives (default ``cfg.device``), over how many GPUs."""
    one = estimate_run(cfg)
    n = processes * runs_per_process
    if data_copies is None:
        data_copies = n if cfg.dataset == "synthetic" else processes
    return check_memory(one.times(n, data_copies), what, device=device or cfg.device, split=split)
