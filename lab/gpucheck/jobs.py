"""The training configurations the campaign runs: datasets, schedules, shapes.

Built once here so the GPU steps and the dry mode (which builds and checks every one of them,
then runs a few on the CPU) use the same configs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stalesim.runtime.config import TrainConfig
from stalesim.schedule import get_spec, schedule_names

# where each real dataset sits under $STALESIM_DATA (the loaders also look elsewhere; these are
# the folders the project's data README names, enough to decide "present")
_DATA_FOLDERS = {"cifar10": ("CIFAR10", "cifar10", "cifar-10-batches-py"), "shakespeare": ("shakespeare",)}


def dataset_for(real: str, data_dir: str | None) -> tuple[str, str | None]:
    """(dataset, data_dir): the real one when its folder is under ``data_dir``, else synthetic.
    Never the loaders' download path: a lent GPU machine reaches no network."""
    if data_dir and any((Path(data_dir) / f).is_dir() for f in _DATA_FOLDERS[real]):
        return real, data_dir
    return "synthetic", None


def _micro(name: str, stages: int, want: int) -> int:
    spec = get_spec(name)
    return spec.config(stages=stages, microbatches=want).microbatches if spec.uses_micro else 1


def executor_config(name: str, devices: int, *, fold: int | None = None, model: str = "lenet5",
                    device: str = "cpu", iterations: int = 6, **over: Any) -> TrainConfig:
    """``name`` on ``devices`` ranks: a pipeline with V chunks per device has S = devices x V
    stages; dp/pipe-sgd have ``devices`` workers of one stage. ``fold`` folds the S stages onto
    that many devices (one GPU: ``fold=1``, S still 2 x V). Batch 24 (divisible by every
    micro-batch count used here) unless that does not divide."""
    spec = get_spec(name)
    n = 2 if fold is not None else devices  # the unfolded device count the stages are cut for
    kw: dict[str, Any] = {"model": model, "dataset": "synthetic", "schedule": name, "iterations": iterations,
                          "lr": 0.05, "device": device}
    if spec.data_parallel:
        kw.update(workers=devices, stages=1)
    else:
        kw.update(stages=n * spec.stages_per_device, fold=fold)
    m = _micro(name, kw["stages"], n)
    if spec.uses_micro:
        kw["microbatches"] = m
    split = m * (devices if spec.data_parallel else 1)
    kw["batch_size"] = 24 if 24 % split == 0 else 8 * split
    kw["synthetic_size"] = max(192, 2 * kw["batch_size"])
    if spec.warmup_with is not None and spec.data_parallel:
        kw["warmup"] = 1  # pipe-sgd's first batch synchronous, as the equivalence tests run it
    kw.update(over)
    return TrainConfig(**kw).check()


def one_gpu_cases(device: str, iterations: int = 6) -> list[TrainConfig]:
    """Every schedule that folds (all but the data-parallel ones, whose workers each need a device)
    at S = 2 x V on one device; plus ResNet-8 (BatchNorm, cuDNN convolutions in TF32) under a
    stale-weights order and under a split backward."""
    cases = [executor_config(n, 1, fold=1, device=device, iterations=iterations)
             for n in schedule_names() if not get_spec(n).data_parallel]
    resnet: dict[str, Any] = {"model": "resnet8", "batch_size": 8, "synthetic_size": 64}
    cases.append(executor_config("stale", 1, fold=1, device=device, iterations=4, **resnet))
    cases.append(executor_config("zb-v", 1, fold=1, device=device, iterations=4, **resnet))
    # the optimizers and the mitigations whose state is versioned with the weights, on the GPU's
    # kernels (Muon's Newton-Schulz in bf16-free float32, the rotation's eigendecompositions)
    for name, over in OPTIMIZER_CASES:
        cases.append(executor_config(name, 1, fold=1, device=device, iterations=iterations, **over))
    return cases


# (schedule, overrides): one case per optimizer / mitigation with state of its own
OPTIMIZER_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("2bw", {"optimizer": "adamw", "lr": 1e-3, "error_feedback": True}),
    ("2bw", {"optimizer": "muon", "lr": 1e-3}),
    ("pipedream", {"optimizer": "adamw", "lr": 1e-3, "weight_prediction": True}),
    ("stale", {"optimizer": "adamw", "lr": 1e-3, "basis_rotation": True}),
)


def multi_gpu_device_counts(gpus: int) -> list[int]:
    """Rank counts to run on ``gpus`` visible GPUs: all of them, 3 where there are >= 3, and 2
    (the virtual-stage schedules' home: V chunks on each of 2 devices) where there are >= 2."""
    return sorted({n for n in (gpus, 3 if gpus >= 3 else 0, 2 if gpus >= 2 else 0) if n >= 2})


def model_for(stages: int) -> dict[str, Any]:
    """The smallest model with a block per stage: LeNet-5 (5 blocks) up to S = 5, else the
    shallowest ResNet-(6k+2) (3k + 2 blocks), for fewer iterations."""
    if stages <= 5:
        return {}
    k = -(-(stages - 2) // 3)
    return {"model": f"resnet{6 * k + 2}", "iterations": 3}


def multi_gpu_cases(gpus: int, device: str = "cuda:0") -> dict[int, list[TrainConfig]]:
    """Per rank count n: every registered schedule at S = n (x V chunks per device); where S
    outgrows LeNet-5 (virtual stages on 3+ devices, 6+ GPUs) a ResNet deep enough."""
    out: dict[int, list[TrainConfig]] = {}
    for n in multi_gpu_device_counts(gpus):
        out[n] = [executor_config(name, n, device=device, **model_for(n * get_spec(name).stages_per_device))
                  for name in schedule_names()]
    return out


def memory_cases(device: str, dry: bool) -> list[TrainConfig]:
    """A few schedules with different liveness (all activations of a batch, 1F1B's S in flight,
    stale weights' extra versions, a split backward's deferred W) on a model whose activations
    dwarf cuBLAS/cuDNN workspaces on a GPU (ResNet-20, batch 128); LeNet-5 in the dry mode."""
    shape: dict[str, Any] = ({"model": "lenet5", "batch_size": 24, "synthetic_size": 96} if dry else
                             {"model": "resnet20", "batch_size": 128, "synthetic_size": 512})
    names = ("gpipe", "stale") if dry else ("sequential", "gpipe", "1f1b", "stale", "zb-h1")
    cases = [executor_config(n, 1, fold=1, device=device, iterations=4, **shape) for n in names]
    # the optimizers' state (AdamW: two moments; Muon: one for its matrices, AdamW's two elsewhere)
    # under stale weights' stash, where a wrong count of state or versions shows most
    for opt in (("adamw",) if dry else ("adamw", "muon")):
        cases.append(executor_config("stale", 1, fold=1, device=device, iterations=4, optimizer=opt,
                                     lr=1e-3, **shape))
    if not dry:  # the rotation's factors and bases (2r^2 + 2c^2 per matrix) beside Adam's moments
        cases.append(executor_config("pipedream", 1, fold=1, device=device, iterations=4, optimizer="adamw",
                                     lr=1e-3, basis_rotation=True, **shape))
    return cases
