"""Model -> partition -> stages -> auxiliary heads -> stage runtimes, written once.

The emulator (every stage of every worker in one process) and the executor (the
stages of one rank) must start from bit-identical weights split at the same
place, or "the emulator is exact" would be a coincidence. Both call
:func:`build_stage_modules` (the full model from the zoo with the run's seed,
the PPV or the FLOP-balanced default cut found on the float32 model, the split,
the seeded auxiliary heads of local-update schedules) and :func:`stage_runtimes`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from stalesim.errors import StalesimError
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.heads import make_aux_heads
from stalesim.runtime.stage import StageRuntime
from stalesim.schedule import Schedule


@dataclass
class StageModules:
    """One worker's copy of the model, its PPV, its stage modules (sharing the model's
    parameters) and the auxiliary heads (None where a stage has none)."""

    model: Any  # LayeredModel
    ppv: list[int]
    stages: list[nn.Module]
    heads: list[nn.Module | None]


def run_model(cfg: TrainConfig) -> Any:
    """The run's full model, seeded: what the emulator and every rank build."""
    return model_of(cfg.model, cfg.dataset, seed=cfg.seed, num_classes=cfg.num_classes)


def model_of(name: str, dataset: str | None = None, *, seed: int | None = 0, num_classes: int = 10) -> Any:
    """Zoo model ``name``, or the user's (``pkg.module:factory``) whose input shape, when the
    model does not state one, is ``dataset``'s (:func:`stalesim.runtime.data.input_shape_of`)."""
    from stalesim.plugins import is_plugin
    from stalesim.workloads.zoo import build_model

    shape = None
    if is_plugin(name):
        from stalesim.runtime.data import input_shape_of

        shape = input_shape_of(dataset, seed or 0)
    return build_model(name, num_classes=num_classes, seed=seed, input_shape=shape)


def own_model(spec: str, dataset: str | None = None, *, seed: int = 0) -> Any:
    """The user's model as the commands without a training config build it (``profile``,
    ``simulate --model``): :func:`model_of`, checked by one forward of its input shape."""
    from stalesim.workloads.own import check_own_model

    net = model_of(spec, dataset, seed=seed)
    check_own_model(net, spec)
    return net


def check_own_code(cfg: TrainConfig, *, model: bool = True) -> None:
    """The user's ``--dataset``/``--model`` (``pkg.module:factory``), built once here, before
    any rank starts: importable, the factories return what they must, and the model reads
    the data set's inputs and gives one logit per class. One line naming the flag if not."""
    from stalesim.plugins import is_plugin

    classes = None  # classes the data set's labels need
    if is_plugin(cfg.dataset):
        from stalesim.runtime.owndata import load_own_dataset

        data = load_own_dataset(cfg.dataset, cfg.seed)
        if cfg.batch_size > data.train_size:
            raise StalesimError(f"batch_size: {cfg.batch_size} is larger than the training set of "
                                f"{cfg.dataset} ({data.train_size:,} samples)")
        classes = int(data.train_y.max()) + 1
        if data.test_y is not None:
            classes = max(classes, int(data.test_y.max()) + 1)
        if not is_plugin(cfg.model):
            _check_zoo_model_reads(cfg, data.train_x.shape[1:], classes)
    elif cfg.dataset == "synthetic":
        classes = cfg.num_classes
    if model and is_plugin(cfg.model):
        from stalesim.workloads.own import check_own_model

        net = run_model(cfg)
        if net.input_shape and cfg.dataset != "synthetic":
            from stalesim.runtime.data import dataset_input_shape

            shape = dataset_input_shape(cfg)
            if shape is not None and tuple(shape) != tuple(net.input_shape):
                raise StalesimError(f"--model: {cfg.model} reads inputs of shape {tuple(net.input_shape)}, "
                                    f"but data set {cfg.dataset} has {tuple(shape)}")
        if cfg.num_stages > len(net.block_names):
            raise StalesimError(f"stages: {cfg.num_stages} stages requested but model {cfg.model!r} has "
                                f"only {len(net.block_names)} blocks")
        logits = check_own_model(net, cfg.model)
        if classes is not None and logits < classes:
            raise StalesimError(f"--model: {cfg.model} gives {logits} logits, but the labels of data set "
                                f"{cfg.dataset} go up to class {classes - 1}")


def _check_zoo_model_reads(cfg: TrainConfig, shape: Iterable[int], classes: int) -> None:
    """A zoo model given the user's data set: its input shape is the data's, and its head has a
    logit for every label (a label beyond the head trained into torch's ``IndexError: Target 999
    is out of bounds`` mid-run)."""
    from stalesim.workloads.zoo_facts import model_facts

    facts = model_facts(cfg.model)
    shape = tuple(int(d) for d in shape)
    if facts is not None and facts.input_shape and tuple(facts.input_shape) != shape:
        raise StalesimError(f"--dataset: {cfg.dataset} has inputs of shape {shape}, but model {cfg.model} "
                            f"reads {tuple(facts.input_shape)}")
    if classes > cfg.num_classes:
        raise StalesimError(f"--dataset: {cfg.dataset} has labels up to class {classes - 1}, but model "
                            f"{cfg.model} has {cfg.num_classes} classes (labels 0..{cfg.num_classes - 1}); "
                            "relabel, or give a model of more classes (--model pkg.module:factory)")


def build_stage_modules(cfg: TrainConfig, sched: Schedule, *, model: Any = None,
                        device: torch.device | str | None = None) -> StageModules:
    """The run's model (``model`` or the zoo's, seeded), split into ``sched.stages`` stages.

    ``device``: move the whole model there first (the emulator); the executor
    leaves it on the CPU and moves only its own stages.
    """
    from stalesim.workloads.partition import default_ppv

    S = sched.stages
    base = model if model is not None else run_model(cfg)
    # the FLOP-balanced cut is found on the model as built (float32), on every consumer
    ppv = list(cfg.ppv) if cfg.ppv is not None else (default_ppv(base, S) if S > 1 else [])
    base.to(dtype=cfg.torch_dtype)
    if device is not None:
        base.to(device=device)
    base.train()
    return _split(cfg, sched, base, ppv)


def replicate(mods: StageModules, cfg: TrainConfig, sched: Schedule) -> StageModules:
    """An independent copy for another data-parallel worker (same initial weights and heads)."""
    return _split(cfg, sched, copy.deepcopy(mods.model), list(mods.ppv))


def _split(cfg: TrainConfig, sched: Schedule, model: Any, ppv: list[int]) -> StageModules:
    from stalesim.workloads.partition import split_stages

    stages: list[nn.Module] = list(split_stages(model, ppv=ppv))
    if len(stages) != sched.stages:
        raise StalesimError(f"ppv: gives {len(stages)} stages but the schedule has {sched.stages}")
    heads: list[nn.Module | None] = [None] * sched.stages
    if sched.local_loss:
        heads = make_aux_heads(stages, model.input_shape, cfg.num_classes, cfg.seed,
                               example=model.example_input(2))
    return StageModules(model, ppv, stages, heads)


def stage_runtimes(cfg: TrainConfig, sched: Schedule, mods: StageModules, *, worker: int,
                   stages: Iterable[int], device: torch.device | str, total: int) -> dict[int, StageRuntime]:
    """A :class:`StageRuntime` per stage in ``stages`` of ``worker``, on ``device``, with the
    run's learning-rate schedule over ``total`` batches."""
    def lr_fn(t: int) -> float:
        return cfg.lr_at(t, total)

    out: dict[int, StageRuntime] = {}
    for s in stages:
        mod = mods.stages[s].to(device)
        head = mods.heads[s]
        if head is not None:
            head = head.to(device)
        out[s] = StageRuntime(mod, stage=s, num_stages=sched.stages, schedule=sched, cfg=cfg,
                              device=device, worker=worker, head=head, lr_fn=lr_fn)
    return out
