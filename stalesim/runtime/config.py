"""TrainConfig: every training flag shared by ``stalesim emulate`` and ``stalesim run``.

One dataclass so the emulator and the executor cannot drift apart: both build
the schedule (``build_schedule(cfg.schedule_config(batches, batches_per_epoch))``,
the same call the simulator makes), the data
order (:func:`stalesim.runtime.data.batch_stream`), the learning-rate schedule
(:meth:`TrainConfig.lr_at`) and the mitigations from the same fields.
:meth:`TrainConfig.check` raises :class:`StalesimError` naming the bad field; what
a schedule allows (split batches, workers, folding, a switch point, ...) it asks the
schedule package (:meth:`ScheduleSpec.check <stalesim.schedule.spec.ScheduleSpec.check>`),
so each rule has one message wherever it is broken.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from stalesim.errors import StalesimError
from stalesim.limits import MAX_COUNT, MAX_FACTOR, MAX_SEED, check_int

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from stalesim.schedule import Schedule, ScheduleConfig

DATASETS = ("mnist", "fashion-mnist", "cifar10", "synthetic", "shakespeare")
LR_SCHEDULES = ("constant", "step", "cosine")
DTYPES = ("float32", "float64")
COMPRESSIONS = ("none", "fp16", "int8")
OPTIMIZERS = ("sgd", "adam", "adamw", "muon")
# momentum coefficient of the Adam look-ahead (NAdam): torch's schedule (the paper's code) or beta1
LOOKAHEAD_MOMENTA = ("nadam", "constant")
# Newton-Schulz iterations of Muon: torch.optim.Muon refuses 100 or more
MUON_MAX_NS_STEPS = 99
# training-set sizes (the files are verified against torchvision's MD5s, so these are exact);
# the synthetic set has ``synthetic_size`` samples
TRAIN_SIZES = {"mnist": 60_000, "fashion-mnist": 60_000, "cifar10": 50_000}
# the synthetic set is materialized (1.25 x this many inputs): 100,000 CIFAR-shaped
# float32 samples are 1.5 GB
MAX_SYNTHETIC = 100_000


@dataclass
class TrainConfig:
    """Training run description (JSON round-trips through ``to_dict``/``from_dict``).

    Sizes: ``batch_size`` is the *global* mini-batch. Data-parallel schedules
    (dp, pipe-sgd) give each of the ``workers`` an equal shard; micro-batch
    schedules (gpipe, 1f1b, 2bw) split a batch into ``microbatches`` equal parts.
    Length: ``iterations`` (mini-batches) or ``epochs`` (full passes; the last
    incomplete batch of an epoch is dropped so every batch has the same size).
    ``switch``/``switch_epoch``: hybrid switch point in iterations or epochs.
    ``warmup``: synchronous warm-up iterations (the IR's warm-up phase: the first
    ``warmup`` batches run as the schedule's staleness-free counterpart).
    ``fold``: run the S stages on this many devices (ranks) instead of S.
    """

    model: str = "lenet5"
    dataset: str = "mnist"
    schedule: str = "sequential"
    stages: int | None = None
    ppv: list[int] | None = None
    microbatches: int = 1
    workers: int = 1
    fold: int | None = None
    iterations: int | None = None
    epochs: int | None = None
    batch_size: int = 128
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    data_dir: str | None = None
    switch: int | None = None
    switch_epoch: int | None = None
    warmup: int = 0
    stages_per_device: int | None = None  # V model chunks per device (None: the schedule's)
    compression: str = "none"
    # mitigations (see stalesim.runtime.mitigations and docs/emulator.md)
    weight_prediction: bool = False
    spike_compensation: bool = False
    pipemare_lr: bool = False
    pipemare_warmup: int = 0
    pipemare_correction: bool = False
    pipemare_gamma: float = 0.9
    staleness_lr: bool = False
    # --- optimizers, lr warm-up/floor, clipping and optimizer-aware mitigations
    # (stalesim.runtime.optim, checked by _check_optimizer)
    optimizer: str = "sgd"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    nesterov: bool = False
    lr_warmup: int = 0
    lr_min: float = 0.0
    clip_grad_norm: float | None = None
    nesterov_lookahead: bool = False
    lookahead_momentum: str = "nadam"
    nadam_momentum_decay: float = 0.004
    error_feedback: bool = False
    error_feedback_beta: float = 1.0
    # Muon (stalesim.runtime.muon): its learning rate for the hidden matrices (lr is AdamW's
    # for the rest), momentum and Newton-Schulz steps (Keller Jordan's defaults)
    muon_lr: float = 0.02
    muon_momentum: float = 0.95
    muon_ns_steps: int = 5
    # basis rotation (stalesim.runtime.rotation): Adam/AdamW in each matrix's approximate
    # eigenbasis, refreshed every freq updates; beta: the factors' EMA (None: beta2);
    # max_dim: longer sides keep the identity (the paper's and SOAP's defaults)
    basis_rotation: bool = False
    basis_rotation_freq: int = 10
    basis_rotation_beta: float | None = None
    basis_rotation_max_dim: int = 10_000
    eval_windows: int = 256
    # --- end of the optimizer fields
    # data details
    num_classes: int = 10
    synthetic_size: int = 1024
    augment: bool = True
    # a user's schedule (--schedule-file: our action-list JSON or torch's CSV) instead of the
    # registered ``schedule``; its stages, micro-batches and workers must match this config's
    schedule_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------ validation
    def check(self) -> TrainConfig:
        """Raise StalesimError naming the first bad field; returns self."""
        from stalesim.plugins import is_plugin
        from stalesim.schedule import get_spec

        self._check_types()
        if self.schedule_file is not None:
            return self._check_with_file()
        spec = get_spec(self.schedule)  # an unknown name: the registry's message, with the known ones
        if self.dataset not in DATASETS and not is_plugin(self.dataset):
            raise StalesimError(f"dataset: unknown {self.dataset!r} (known: {', '.join(DATASETS)}, "
                                "or your own as pkg.module:factory)")
        for name in ("microbatches", "workers", "batch_size", "num_classes"):
            _positive_int(name, getattr(self, name))
        check_int("synthetic_size", self.synthetic_size, lo=1, hi=MAX_SYNTHETIC)
        for name in ("iterations", "epochs", "stages", "fold"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        for name in ("switch", "switch_epoch"):
            if getattr(self, name) is not None:
                _nonneg_int(name, getattr(self, name))
        _nonneg_int("warmup", self.warmup)
        _nonneg_int("pipemare_warmup", self.pipemare_warmup)
        check_int("seed", self.seed, hi=MAX_SEED)
        if (self.iterations is None) == (self.epochs is None):
            raise StalesimError("iterations/epochs: give exactly one of --iterations or --epochs")
        if self.ppv is not None:
            if not isinstance(self.ppv, (list, tuple)) or not all(
                isinstance(k, int) and not isinstance(k, bool) for k in self.ppv
            ):
                raise StalesimError(f"ppv: expected a list of integers, got {self.ppv!r}")
            if self.stages is not None and self.stages != len(self.ppv) + 1:
                raise StalesimError(
                    f"stages: {self.stages} disagrees with ppv {list(self.ppv)} "
                    f"(a PPV with {len(self.ppv)} entries gives {len(self.ppv) + 1} stages)"
                )
        if not _finite(self.lr) or self.lr <= 0 or self.lr > MAX_FACTOR:
            raise StalesimError(f"lr: expected a finite number in (0, {MAX_FACTOR:g}], got {self.lr!r}")
        if not _finite(self.momentum) or not 0 <= self.momentum < 1:
            raise StalesimError(f"momentum: expected a number in [0, 1), got {self.momentum!r}")
        if not _finite(self.weight_decay) or self.weight_decay < 0:
            raise StalesimError(f"weight_decay: expected a number >= 0, got {self.weight_decay!r}")
        if not _finite(self.pipemare_gamma) or not 0 <= self.pipemare_gamma < 1:
            raise StalesimError(f"pipemare_gamma: expected a number in [0, 1), got {self.pipemare_gamma!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise StalesimError(f"lr_schedule: unknown {self.lr_schedule!r} (known: {', '.join(LR_SCHEDULES)})")
        if self.dtype not in DTYPES:
            raise StalesimError(f"dtype: unknown {self.dtype!r} (known: {', '.join(DTYPES)})")
        if self.compression not in COMPRESSIONS:
            raise StalesimError(f"compression: unknown {self.compression!r} (known: {', '.join(COMPRESSIONS)})")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise StalesimError(f"device: expected cpu or cuda[:N], got {self.device!r}")
        if self.stages_per_device is not None:
            _positive_int("stages_per_device", self.stages_per_device)
        if self.switch is not None and self.switch_epoch is not None:
            raise StalesimError("switch: give --switch (iterations) or --switch-epoch, not both")
        # what the schedule allows (split batches, workers, folding, a switch point, stages per
        # device, the fewest micro-batches, ...) is the schedule package's rule and message: the
        # field names are the flags' names, and a one-batch config is enough to ask
        spec.check(self.schedule_config(1))
        if self.compression != "none" and not spec.data_parallel:
            raise StalesimError(
                f"compression: {self.compression!r} compresses the gradient all-reduce of a "
                f"data-parallel schedule, not {self.schedule!r}"
            )
        shards = self.workers * self.microbatches
        if self.batch_size % shards:
            what = "workers" if self.workers > 1 else "microbatches"
            raise StalesimError(
                f"batch_size: {self.batch_size} is not divisible by {what} "
                f"({self.workers} x {self.microbatches}); each shard must be equal"
            )
        if self.switch_epoch is not None and self.epochs is None:
            raise StalesimError("switch_epoch: needs --epochs (use --switch for iterations)")
        self._check_optimizer()
        self._check_size()
        return self

    def _check_with_file(self) -> TrainConfig:
        """:meth:`check` for a user's schedule file: the fields the file does not fix, then
        the file itself (read and checked by the IR), whose shape must be this config's."""
        from stalesim.plugins import is_plugin
        from stalesim.schedule.userfile import load_schedule_file

        if self.dataset not in DATASETS and not is_plugin(self.dataset):
            raise StalesimError(f"dataset: unknown {self.dataset!r} (known: {', '.join(DATASETS)}, "
                                "or your own as pkg.module:factory)")
        for name in ("microbatches", "workers", "batch_size", "num_classes"):
            _positive_int(name, getattr(self, name))
        check_int("seed", self.seed, hi=MAX_SEED)
        for name in ("switch", "switch_epoch", "fold", "stages_per_device"):
            if getattr(self, name) is not None:
                raise StalesimError(f"{name}: the schedule file fixes the order; drop --{name.replace('_', '-')}")
        if self.warmup or self.compression != "none":
            raise StalesimError("schedule_file: --warmup and --compression shape a registered schedule; "
                                "the file's order runs as written")
        if self.iterations is None:
            raise StalesimError("iterations: a schedule file runs a given number of iterations, not epochs")
        _positive_int("iterations", self.iterations)
        assert self.schedule_file is not None  # (the caller's condition)
        sched = load_schedule_file(self.schedule_file, self.iterations)
        shape = {"stages": (self.num_stages, sched.stages), "microbatches": (self.microbatches, sched.microbatches),
                 "workers": (self.workers, sched.workers)}
        for name, (ours, file) in shape.items():
            if ours != file:
                raise StalesimError(f"{name}: {ours} disagrees with the schedule file's {file} "
                                    f"({self.schedule_file})")
        if self.batch_size % (self.workers * self.microbatches):
            raise StalesimError(f"batch_size: {self.batch_size} is not divisible by {self.workers} worker(s) "
                                f"x {self.microbatches} micro-batch(es); each shard must be equal")
        for name in ("lr", "momentum", "pipemare_gamma"):
            if not _finite(getattr(self, name)):
                raise StalesimError(f"{name}: expected a finite number, got {getattr(self, name)!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise StalesimError(f"lr_schedule: unknown {self.lr_schedule!r} (known: {', '.join(LR_SCHEDULES)})")
        if self.dtype not in DTYPES:
            raise StalesimError(f"dtype: unknown {self.dtype!r} (known: {', '.join(DTYPES)})")
        self._check_optimizer()
        return self

    def build_schedule(self, batches: int | None, batches_per_epoch: int | None = None) -> Schedule:
        """The run's :class:`~stalesim.schedule.Schedule` over ``batches`` mini-batches: the
        registered schedule built by the IR (:meth:`schedule_config`), or the user's file
        (:mod:`stalesim.schedule.userfile`; None: as many batches as it holds). The one call the
        emulator and the executor make."""
        if self.schedule_file is not None:
            from stalesim.schedule.userfile import load_schedule_file

            return load_schedule_file(self.schedule_file, batches)
        if batches is None:
            raise StalesimError(f"iterations: schedule {self.schedule!r} needs a run length "
                                "(only a schedule file carries its own)")
        from stalesim.schedule import build_schedule

        return build_schedule(self.schedule_config(batches, batches_per_epoch))

    def _check_types(self) -> None:
        """Field types first (a config read from JSON may hold anything), so every later
        check compares like with like and names the field."""
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("str", "str | None"):
                ok = isinstance(v, str) or (v is None and f.type == "str | None")
            elif f.type == "bool":
                ok = isinstance(v, bool)
            elif f.type in ("float",):
                ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            elif f.type.startswith("dict"):
                ok = isinstance(v, dict)
            else:
                continue  # integers and the PPV are checked with their ranges
            if not ok:
                raise StalesimError(f"{f.name}: expected {f.type.replace(' | None', ' or null')}, got {v!r}")

    def _check_size(self) -> None:
        """What the run will build, checked before any data or model is loaded: the
        model holds enough blocks for the stages, a batch fits in the training set, and
        the whole run's schedule is one the IR builds (a million stages or a billion
        iterations are refused here, in milliseconds, not after minutes of building)."""
        from stalesim.plugins import is_plugin
        from stalesim.schedule import resolve
        from stalesim.workloads.names import model_task
        from stalesim.workloads.zoo_facts import model_facts

        facts = model_facts(self.model)  # None: not a zoo name (the caller brings its module)
        if facts is not None and self.num_stages > facts.blocks:
            raise StalesimError(f"stages: {self.num_stages} stages requested but model {self.model!r} "
                                f"has only {facts.blocks} blocks")
        if facts is not None and self.ppv is not None and any(
                not 1 <= k < facts.weight_layers for k in self.ppv):
            bad = next(k for k in self.ppv if not 1 <= k < facts.weight_layers)
            raise StalesimError(f"ppv: {bad} is out of range; model {self.model!r} has "
                                f"{facts.weight_layers} weight layers, so an entry must be between 1 "
                                f"and {facts.weight_layers - 1}")
        if facts is not None and model_task(self.model) == "lm":
            # a language model samples batch_size windows of block_size characters (with
            # replacement); an epoch is train_chars // (B T) batches, at least 1. The
            # Shakespeare text's length is known only once it is read: 1 is a lower bound.
            from stalesim.runtime.text import check_synthetic_text, synthetic_text_chars

            T = facts.input_shape[0]
            chars = 0
            if self.dataset == "synthetic":
                check_synthetic_text(self.synthetic_size, T)
                chars = synthetic_text_chars(self.synthetic_size, T)[0]
            bpe = max(1, chars // (self.batch_size * T))
        elif is_plugin(self.dataset):  # its size is known once the factory ran: 1 is a lower bound
            bpe = 1
        else:
            train = self.train_size
            if self.batch_size > train:
                raise StalesimError(f"batch_size: {self.batch_size} is larger than the training set of "
                                    f"{self.dataset} ({train:,} samples)")
            bpe = train // self.batch_size
        if self.epochs is not None and self.epochs * bpe > MAX_COUNT:
            raise StalesimError(f"epochs: {self.epochs} epochs of {bpe:,} batches are more iterations "
                                f"than this tool runs (at most {MAX_COUNT:,})")
        # the same call the consumers make, without building the actions
        resolve(self.schedule_config(self.total_iterations(bpe), bpe))

    def check_runnable(self, *, own_model: bool = False) -> TrainConfig:
        """:meth:`check`, plus what a run needs before it builds anything: a zoo model
        (unless the caller brings its own module; asked of the zoo without building one)
        and an existing data folder. A user's ``pkg.module:factory`` code is checked by
        :func:`stalesim.runtime.build.check_own_code` (it builds what it checks)."""
        from stalesim.plugins import is_plugin

        self.check()
        if not own_model and not is_plugin(self.model):
            from stalesim.workloads.zoo import model_factory

            try:
                model_factory(self.model)
            except StalesimError as exc:
                raise StalesimError(f"model: {exc}") from None
        self.check_data_dir()
        return self

    def check_data_dir(self) -> None:
        """A data folder given (``--data-dir``) must be a folder; what it holds is verified
        when the data is loaded (:mod:`stalesim.runtime.datafiles`)."""
        from stalesim.runtime.datapaths import check_data_dir

        check_data_dir(self.data_dir)

    @property
    def train_size(self) -> int:
        """Samples in the training set (exact: the data files are verified)."""
        return TRAIN_SIZES.get(self.dataset, self.synthetic_size)

    def schedule_config(self, batches: int, batches_per_epoch: int | None = None) -> ScheduleConfig:
        """The :class:`ScheduleConfig` of this run over ``batches`` mini-batches: what the
        emulator, the executor and ``validate``'s simulation all build, one call."""
        from stalesim.schedule import ScheduleConfig

        switch = self.switch
        if self.switch_epoch is not None:
            switch = self.switch_epoch * (batches_per_epoch or 0)
        if switch is not None:
            switch = min(switch, batches)
        return ScheduleConfig(
            schedule=self.schedule, stages=self.num_stages, batches=batches,
            microbatches=self.microbatches, workers=self.workers, fold=self.fold,
            switch=switch, warmup=min(self.warmup, batches),
            stages_per_device=self.stages_per_device,
        )

    def _check_optimizer(self) -> None:
        """Optimizer, lr warm-up/floor, clipping, task/dataset and optimizer-aware mitigations."""
        from stalesim.workloads.names import model_task  # torch-free

        if self.optimizer not in OPTIMIZERS:
            raise StalesimError(f"optimizer: unknown {self.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
        b = self.betas
        if not isinstance(b, (list, tuple)) or len(b) != 2 or not all(_finite(x) and 0 <= x < 1 for x in b):
            raise StalesimError(f"betas: expected two numbers in [0, 1), got {b!r}")
        if not _finite(self.eps) or self.eps <= 0:
            raise StalesimError(f"eps: expected a finite number > 0, got {self.eps!r}")
        _nonneg_int("lr_warmup", self.lr_warmup)
        if not _finite(self.lr_min) or not 0 <= self.lr_min <= self.lr:
            raise StalesimError(f"lr_min: expected a number in [0, lr={self.lr}], got {self.lr_min!r}")
        if self.lr_min and self.lr_schedule != "cosine":
            raise StalesimError(f"lr_min: only the cosine schedule decays to a floor, not {self.lr_schedule!r}")
        if self.clip_grad_norm is not None and (not _finite(self.clip_grad_norm) or self.clip_grad_norm <= 0):
            raise StalesimError(f"clip_grad_norm: expected a finite number > 0, got {self.clip_grad_norm!r}")
        _positive_int("eval_windows", self.eval_windows)
        if not _finite(self.error_feedback_beta) or self.error_feedback_beta <= 0:
            raise StalesimError(
                f"error_feedback_beta: expected a finite number > 0, got {self.error_feedback_beta!r}")
        if self.lookahead_momentum not in LOOKAHEAD_MOMENTA:
            raise StalesimError(f"lookahead_momentum: unknown {self.lookahead_momentum!r} "
                                f"(known: {', '.join(LOOKAHEAD_MOMENTA)})")
        if not _finite(self.nadam_momentum_decay) or self.nadam_momentum_decay <= 0:
            raise StalesimError(
                f"nadam_momentum_decay: expected a finite number > 0, got {self.nadam_momentum_decay!r}")
        self._check_muon()
        self._check_rotation()
        sgd = self.optimizer == "sgd"
        if self.nesterov and not (sgd and self.momentum > 0):
            raise StalesimError("nesterov: Nesterov momentum needs --optimizer sgd with --momentum > 0 "
                                f"(got {self.optimizer}, momentum {self.momentum})")
        if self.spike_compensation and not sgd:
            raise StalesimError(f"spike_compensation: corrects SGD momentum (a = mu^D, b = (1 - mu^D)/(1 - mu)); "
                                f"it does not apply to --optimizer {self.optimizer}")
        if self.spike_compensation and (self.nesterov or self.nesterov_lookahead):
            raise StalesimError("spike_compensation: is defined for heavy-ball SGD momentum, "
                                "not with --nesterov or --nesterov-lookahead")
        if self.weight_prediction and sgd and self.momentum == 0:
            raise StalesimError("weight_prediction: with SGD it extrapolates along the momentum buffer; "
                                "needs --momentum > 0")
        if self.nesterov_lookahead:
            if sgd and self.momentum == 0:
                raise StalesimError("nesterov_lookahead: the look-ahead is gamma (w_t - w_{t-1}) with "
                                    "gamma = --momentum; needs --momentum > 0")
            if self.nesterov:
                raise StalesimError("nesterov_lookahead: already runs Nesterov SGD; drop --nesterov")
            if self.weight_prediction:
                raise StalesimError("nesterov_lookahead: the look-ahead is itself a weight prediction; "
                                    "do not combine it with --weight-prediction")
        task = model_task(self.model)
        if self.dataset == "shakespeare" and task == "classify":
            raise StalesimError(f"dataset: shakespeare is text; model {self.model!r} is an image "
                                "classifier (use gpt-char)")
        if task == "lm" and self.dataset not in ("shakespeare", "synthetic"):
            raise StalesimError(f"dataset: {self.model!r} is a language model and trains on text "
                                f"(shakespeare or synthetic), not {self.dataset!r}")

    def _check_muon(self) -> None:
        """Muon's hyper-parameters, and the mitigations that read a direction Muon does not
        define (its step is an orthogonalised matrix, recomputed only at an update)."""
        if not _finite(self.muon_lr) or self.muon_lr <= 0:
            raise StalesimError(f"muon_lr: expected a finite number > 0, got {self.muon_lr!r}")
        if not _finite(self.muon_momentum) or not 0 <= self.muon_momentum < 1:
            raise StalesimError(f"muon_momentum: expected a number in [0, 1), got {self.muon_momentum!r}")
        n = self.muon_ns_steps
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MUON_MAX_NS_STEPS:
            raise StalesimError(f"muon_ns_steps: expected an integer in [1, {MUON_MAX_NS_STEPS}], got {n!r}")
        if self.optimizer != "muon":
            return
        for flag in ("weight_prediction", "nesterov_lookahead"):
            if getattr(self, flag):
                raise StalesimError(f"{flag}: reads the optimizer's next direction, which Muon does not "
                                    "define (its orthogonalised step exists only at an update); "
                                    "use --optimizer sgd/adam/adamw")

    def _check_rotation(self) -> None:
        """Basis rotation's hyper-parameters, and what it does not combine with."""
        check_int("basis_rotation_freq", self.basis_rotation_freq, lo=1, hi=MAX_COUNT)
        check_int("basis_rotation_max_dim", self.basis_rotation_max_dim, lo=1, hi=MAX_COUNT)
        b = self.basis_rotation_beta
        if b is not None and (not _finite(b) or not 0 <= b < 1):
            raise StalesimError(f"basis_rotation_beta: expected a number in [0, 1), got {b!r}")
        if not self.basis_rotation:
            return
        if self.optimizer not in ("adam", "adamw"):
            raise StalesimError(f"basis_rotation: rotates Adam's coordinates; it needs --optimizer adam or "
                                f"adamw, not {self.optimizer}")
        for flag in ("weight_prediction", "nesterov_lookahead"):
            if getattr(self, flag):
                raise StalesimError(f"{flag}: not defined with --basis-rotation (its direction or NAdam step "
                                    "would be taken in the unrotated coordinates); drop one of the two")

    # --------------------------------------------------------------- helpers
    @property
    def num_stages(self) -> int:
        if self.ppv is not None:
            return len(self.ppv) + 1
        return self.stages or 1

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return torch.float64 if self.dtype == "float64" else torch.float32

    def total_iterations(self, batches_per_epoch: int) -> int:
        if self.iterations is not None:
            return self.iterations
        return int(self.epochs) * batches_per_epoch  # type: ignore[arg-type]

    def lr_at(self, t: int, total: int) -> float:
        """Base learning rate of the update fed by batch ``t`` (same on every consumer).

        ``lr_warmup`` W > 0: lr (t + 1) / W for t < W (linear warm-up), then the
        schedule runs over the remaining total - W batches. ``step``: x0.1 at 50% and
        again at 75% of the run (the CIFAR ResNet recipe of He et al.); ``cosine``:
        lr_min + (lr - lr_min) 0.5 (1 + cos(pi t / total)).
        """
        W = self.lr_warmup
        if W and t < W:
            return self.lr * (t + 1) / W
        if self.lr_schedule == "constant" or total <= 0:
            return self.lr
        if W:
            t, total = t - W, total - W
            if total <= 0:
                return self.lr
        frac = min(max(t / total, 0.0), 1.0)
        if self.lr_schedule == "step":
            return self.lr * (0.1 ** ((frac >= 0.5) + (frac >= 0.75)))
        return self.lr_min + (self.lr - self.lr_min) * 0.5 * (1.0 + math.cos(math.pi * frac))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
            raise StalesimError(f"training config: expected a JSON object, got {type(d).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise StalesimError(f"{unknown[0]}: unknown training config field")
        return cls(**d)


def _positive_int(name: str, value: Any) -> None:
    check_int(name, value, lo=1)


def _nonneg_int(name: str, value: Any) -> None:
    check_int(name, value, lo=0)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
