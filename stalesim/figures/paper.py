"""Published numbers of the three seed papers, as data.

One place for the figures, the notebooks and ``docs/RESULTS.md`` to read them
from, so a number set beside ours is typed in exactly once. Sources are named
per table; percentages are accuracy points unless said otherwise.
"""

from __future__ import annotations

from typing import Any

# Zhang & Abdelrahman, "Pipelined Training with Stale Weights of Deep Convolutional
# Neural Networks", arXiv 1912.12675 / ACISC 2021. Their "4-stage" pipeline = our S = 2.
STALE_DROPS_4STAGE = {  # model -> (dataset, PPV, accuracy drop in points vs non-pipelined)
    "lenet5": ("mnist", [2], 0.4),
    "alexnet": ("cifar10", [3], 4.0),
    "vgg16": ("cifar10", [2], 0.83),
    "resnet20": ("cifar10", [7], 1.45),
}
STALE_DEEP_DROPS = {"vgg16": 12.0, "resnet20": 8.5}  # "up to" drops for deep placements

# Table 9: memory increase of 4-stage pipelined training (batch 128), % of the
# non-pipelined memory, PipeDream (weight stashing) vs this work (stale weights).
STALE_MEMORY_TABLE9: dict[str, dict[str, Any]] = {  # model -> dict
    "lenet5": {"ppv": [2], "act_mb_per_sample": 0.06, "weights_mb": 0.24, "pipedream_pct": 109, "stale_pct": 97},
    "alexnet": {"ppv": [3], "act_mb_per_sample": 0.88, "weights_mb": 88.87, "pipedream_pct": 214, "stale_pct": 37},
    "vgg16": {"ppv": [2], "act_mb_per_sample": 3.30, "weights_mb": 58.16, "pipedream_pct": 124, "stale_pct": 75},
    "resnet20": {"ppv": [7], "act_mb_per_sample": 3.84, "weights_mb": 1.03, "pipedream_pct": 61, "stale_pct": 60},
}

# 2-GPU ResNet table (CIFAR-10): PPV after group 1, accuracy (%) and speed-up over 1 GPU.
STALE_2GPU: list[dict[str, Any]] = [
    {"model": "resnet56", "ppv": [19], "acc_nonpipelined": 92.63, "acc_pipelined": 92.89,
     "acc_hybrid": 92.75, "speedup_pipelined": 1.65, "speedup_hybrid": 1.24},
    {"model": "resnet110", "ppv": [37], "acc_nonpipelined": 93.59, "acc_pipelined": 92.88,
     "acc_hybrid": 93.55, "speedup_pipelined": 1.73, "speedup_hybrid": 1.26},
    {"model": "resnet224", "ppv": [75], "acc_nonpipelined": 92.77, "acc_pipelined": 91.39,
     "acc_hybrid": 93.33, "speedup_pipelined": 1.81, "speedup_hybrid": 1.28},
    {"model": "resnet362", "ppv": [121], "acc_nonpipelined": 93.46, "acc_pipelined": 90.53,
     "acc_hybrid": 93.98, "speedup_pipelined": 1.82, "speedup_hybrid": 1.29},
]

# He et al. 2016, CIFAR-10 test accuracy (%).
HE_RESNET_CIFAR10 = {"resnet20": 91.25, "resnet56": 93.03, "resnet110": 93.4}

# Li et al., "Pipe-SGD", NeurIPS 2018: best end-to-end speed-up over conventional training.
PIPE_SGD_MAX_SPEEDUP = 5.4
PIPE_SGD_NODES = 4


def implied_pipelined_fraction(pipelined: float, hybrid: float) -> float:
    """Fraction f of the run spent pipelined that makes hybrid = 1 / (f/p + 1 - f).

    The 2-GPU table gives both speed-ups; solving for f shows the hybrid runs
    ran about half their iterations pipelined (we simulate ``hybrid`` with the
    switch at N/2 accordingly).
    """
    return (1.0 - 1.0 / hybrid) / (1.0 - 1.0 / pipelined)
