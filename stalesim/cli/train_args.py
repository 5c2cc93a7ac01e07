"""Training flags shared by ``stalesim emulate`` and ``stalesim run`` (-> TrainConfig)."""

from __future__ import annotations

import argparse

from stalesim.cli.common import (
    float_type,
    int_list,
    int_type,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    seed_int,
)
from stalesim.cli.schedule_cmd import add_schedule_args
from stalesim.runtime.config import LOOKAHEAD_MOMENTA, MUON_MAX_NS_STEPS, TrainConfig

MODEL_HELP = ("zoo model (lenet5, alexnet, vgg16, resnet20, ..., gpt-char or "
              "gpt-char:n_layer=L,n_embd=C,n_head=H,block_size=T), or your own as pkg.module:factory "
              "(returns an nn.Sequential or a list of blocks; docs/api.md)")
DATASET_HELP = ("mnist | fashion-mnist | cifar10 | shakespeare | synthetic, or your own as "
                "pkg.module:factory (returns (train, test) torch Datasets of (x, y); docs/api.md)")
# the schedule of emulate/run without --schedule (the default None tells "not given" apart,
# which --schedule-file needs)
DEFAULT_SCHEDULE = "sequential"
SCHEDULE_FILE_HELP = ("your own schedule instead of --schedule: our action-list JSON (as `stalesim "
                      "schedule NAME --json` prints) or torch.distributed.pipelining's CSV; it fixes "
                      "the stages and micro-batches (a JSON file also the iterations)")


def add_schedule_file_arg(p: argparse.ArgumentParser) -> None:
    """``--schedule-file`` of the commands that run one schedule (simulate, emulate, run)."""
    p.add_argument("--schedule-file", default=None, metavar="FILE.json|FILE.csv", help=SCHEDULE_FILE_HELP)

def add_train_args(p: argparse.ArgumentParser) -> None:
    """Model, data, schedule, optimizer and mitigation flags (names match TrainConfig).

    A training run's length is ``--iterations`` (TrainConfig.iterations, the summary's
    ``iterations``); the schedule-only commands' ``--batches``/``-N`` is not taken here."""
    p.add_argument("--model", default="lenet5", help=MODEL_HELP)
    p.add_argument("--dataset", default=None, help=DATASET_HELP + " (default: the model's; synthetic "
                   "for your own model)")
    p.add_argument("--schedule", default=None,
                   help=f"schedule name (see `stalesim schedule`; default {DEFAULT_SCHEDULE})")
    add_schedule_args(p, batches=False)
    p.add_argument("--ppv", type=int_list, default=None,
                   help="pipeline placement vector, e.g. 2 or 1,2,3 (S = entries + 1)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=positive_int, default=None, help="full passes over the data")
    length.add_argument("--iterations", type=positive_int, default=None,
                        help="mini-batches (optimizer steps) to run: the run length (the schedule's N)")
    p.add_argument("--batch-size", type=positive_int, default=128, help="global mini-batch size")
    p.add_argument("--lr", type=positive_float, default=0.01)
    p.add_argument("--momentum", type=nonneg_float, default=0.9)
    p.add_argument("--weight-decay", type=nonneg_float, default=0.0)
    p.add_argument("--lr-schedule", default="constant", help="constant | step | cosine")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--device", default="cpu", help="cpu | cuda[:N]")
    p.add_argument("--dtype", default="float32", help="float32 | float64")
    p.add_argument("--data-dir", default=None, help="dataset root (default $STALESIM_DATA)")
    p.add_argument("--switch-epoch", type=nonneg_int, default=None,
                   help="hybrid: epochs run stale-pipelined before switching")
    p.add_argument("--compression", default="none", help="dp/pipe-sgd all-reduce: none | fp16 | int8")
    p.add_argument("--synthetic-size", type=positive_int, default=1024,
                   help="training samples of the synthetic dataset")
    p.add_argument("--no-augment", action="store_true", help="CIFAR: no random crop/flip")
    m = p.add_argument_group("mitigations")
    m.add_argument("--weight-prediction", action="store_true",
                   help="forward/backward on w - lr*D*v (SpecTrain / linear weight prediction)")
    m.add_argument("--spike-compensation", action="store_true", help="Kosson et al. (a=mu^D, b=(1-mu^D)/(1-mu))")
    m.add_argument("--pipemare-lr", action="store_true", help="PipeMare lr rescheduling lr*tau^-p")
    m.add_argument("--pipemare-warmup", type=nonneg_int, default=0,
                   help="iterations over which PipeMare's p anneals from 1 to 0 (0: p stays 1)")
    m.add_argument("--pipemare-correction", action="store_true", help="PipeMare discrepancy correction")
    m.add_argument("--pipemare-gamma", type=nonneg_float, default=0.9, help="EMA decay of the correction")
    m.add_argument("--staleness-lr", action="store_true", help="staleness-aware lr: lr/(D+1)")
    # --warmup (synchronous warm-up iterations) comes from add_schedule_args
    _add_optimizer_args(p, m)


def _add_optimizer_args(p: argparse.ArgumentParser, m: argparse._ArgumentGroup) -> None:
    """Optimizers, lr warm-up/floor, clipping, optimizer-aware mitigations."""
    o = p.add_argument_group("optimizer")
    o.add_argument("--optimizer", default="sgd",
                   help="sgd | adam | adamw (decoupled weight decay) | muon (Muon on hidden "
                        "matrices, AdamW at --lr on the rest)")
    o.add_argument("--betas", type=_betas, default=[0.9, 0.999], help="Adam betas, e.g. 0.9,0.95")
    o.add_argument("--eps", type=positive_float, default=1e-8, help="Adam epsilon")
    o.add_argument("--nesterov", action="store_true", help="SGD: Nesterov momentum")
    o.add_argument("--muon-lr", type=positive_float, default=0.02, help="Muon: learning rate of the hidden matrices")
    o.add_argument("--muon-momentum", type=float_type(0.0, 1.0), default=0.95,
                   help="Muon: momentum (Nesterov), in [0, 1)")
    o.add_argument("--muon-ns-steps", type=int_type(1, MUON_MAX_NS_STEPS), default=5,
                   help=f"Muon: Newton-Schulz iterations (1..{MUON_MAX_NS_STEPS})")
    o.add_argument("--lr-warmup", type=nonneg_int, default=0,
                   help="linear lr warm-up over the first K iterations, then --lr-schedule")
    o.add_argument("--lr-min", type=nonneg_float, default=0.0, help="cosine schedule: final lr")
    o.add_argument("--clip-grad-norm", type=positive_float, default=None,
                   help="clip each stage's gradient to this global L2 norm (per stage)")
    o.add_argument("--eval-windows", type=positive_int, default=256,
                   help="language model: validation windows for val loss / bits per character")
    m.add_argument("--nesterov-lookahead", action="store_true",
                   help="Nesterov look-ahead for async pipelines (Ajanthan et al. 2025): "
                        "SGD -> Nesterov with lr*(1-momentum); Adam/AdamW -> NAdam(W) "
                        "(the paper recommends --betas 0.99,0.999)")
    m.add_argument("--lookahead-momentum", choices=LOOKAHEAD_MOMENTA, default="nadam",
                   help="Adam look-ahead's momentum mu_t: nadam = torch's NAdam schedule "
                        "beta1*(1-0.5*0.96^(t*psi)) as the paper's code (default); constant = beta1")
    m.add_argument("--nadam-momentum-decay", type=positive_float, default=0.004,
                   help="psi of the nadam momentum schedule (torch's momentum_decay)")
    m.add_argument("--basis-rotation", action="store_true",
                   help="Adam/AdamW in each weight matrix's approximate eigenbasis (Jung et al. 2026; "
                        "SOAP-style Kronecker factors)")
    m.add_argument("--basis-rotation-freq", type=positive_int, default=10,
                   help="basis rotation: refresh the eigenbasis every K updates")
    m.add_argument("--basis-rotation-beta", type=float_type(0.0, 1.0), default=None,
                   help="basis rotation: EMA decay of the Kronecker factors, in [0, 1) (default: beta2)")
    m.add_argument("--basis-rotation-max-dim", type=positive_int, default=10_000,
                   help="basis rotation: matrix sides longer than this are not rotated")
    m.add_argument("--error-feedback", action="store_true",
                   help="delayed steps get + beta*(step_t - step_{t-1}) (error feedback for one-step delay)")
    m.add_argument("--error-feedback-beta", type=positive_float, default=1.0,
                   help="coefficient of the error-feedback correction")


def _betas(text: str) -> list[float]:
    parts = text.split(",")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers like 0.9,0.999, got {text!r}") from None
    if len(vals) != 2 or not all(0 <= v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected two numbers in [0, 1) like 0.9,0.999, got {text!r}")
    return vals


def _optimizer_fields(args: argparse.Namespace) -> dict:
    names = ("optimizer", "betas", "eps", "nesterov", "lr_warmup", "lr_min", "clip_grad_norm",
             "eval_windows", "nesterov_lookahead", "lookahead_momentum", "nadam_momentum_decay",
             "error_feedback", "error_feedback_beta",
             "muon_lr", "muon_momentum", "muon_ns_steps", "basis_rotation", "basis_rotation_freq",
             "basis_rotation_beta", "basis_rotation_max_dim")
    return {k: getattr(args, k) for k in names}


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    iterations = args.iterations
    from stalesim.plugins import is_plugin

    dataset = args.dataset
    if dataset is None and is_plugin(args.model):
        dataset = "synthetic"  # the user's model knows no data set of the zoo's
    elif dataset is None:
        from stalesim.workloads.zoo import build_model

        dataset = build_model(args.model).default_dataset
    schedule_file = getattr(args, "schedule_file", None)
    if schedule_file is None and args.schedule is None:
        args.schedule = DEFAULT_SCHEDULE
    if schedule_file is not None:
        import os

        schedule_file = os.path.abspath(schedule_file)  # the ranks and a resumed run read it too
        args.schedule_file = schedule_file
        iterations = _apply_schedule_file(args, iterations)
    cfg = TrainConfig(
        model=args.model, dataset=dataset, schedule=args.schedule,
        stages=args.stages, ppv=args.ppv, microbatches=args.microbatches, workers=args.workers,
        fold=args.fold,
        iterations=iterations, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        momentum=args.momentum, weight_decay=args.weight_decay, lr_schedule=args.lr_schedule,
        seed=args.seed, device=args.device, dtype=args.dtype, data_dir=args.data_dir,
        switch=args.switch, switch_epoch=args.switch_epoch, warmup=args.warmup,
        stages_per_device=args.stages_per_device,
        compression=args.compression, weight_prediction=args.weight_prediction,
        spike_compensation=args.spike_compensation, pipemare_lr=args.pipemare_lr,
        pipemare_warmup=args.pipemare_warmup, pipemare_correction=args.pipemare_correction,
        pipemare_gamma=args.pipemare_gamma, staleness_lr=args.staleness_lr,
        synthetic_size=args.synthetic_size, augment=not args.no_augment, schedule_file=schedule_file,
        **_optimizer_fields(args),
    )
    return cfg.check()


def _apply_schedule_file(args: argparse.Namespace, iterations: int | None) -> int | None:
    """Read ``--schedule-file`` up front (the IR checks it) and take the shape it fixes
    (:func:`stalesim.schedule.userfile.fill_from_file`); returns the iterations."""
    from stalesim.schedule.userfile import fill_from_file

    names = ("schedule", "epochs", "stages", "ppv", "microbatches", "workers")
    filled = fill_from_file(args.schedule_file, {"iterations": iterations,
                                                 **{k: getattr(args, k) for k in names}})
    for k in names:
        setattr(args, k, filled[k])
    return filled["iterations"]
