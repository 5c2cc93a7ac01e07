"""A plain training loop wrapped by StalePipeline equals the emulator, bit for bit in float64.

The loop below is what a user writes (forward, loss, backward, ``optimizer.step()``,
``zero_grad()``; gradient accumulation for micro-batches) with the user's own
``torch.optim`` optimizer; the emulator replays the schedule stage by stage with its own
runtimes and optimizers. Same seed, data order, stages and hyper-parameters: the losses
and the final weights must be equal, and the versions the pipeline logged the IR's.
A control test reads one stage one version off and must see other losses.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from stalesim.emulator.replay import Emulator
from stalesim.errors import StalesimError
from stalesim.inject import StalePipeline
from stalesim.runtime.build import run_model
from stalesim.runtime.config import TrainConfig
from stalesim.runtime.optim import LookaheadAdam, lookahead_decay
from stalesim.runtime.rotation import RotatedAdam
from stalesim.runtime.tasks import loss_fn, task_of
from stalesim.schedule import Kind, Schedule, dry_run

GPT = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
STEPS = 8

# (model, schedule, micro-batches, stages, optimizer): every asynchronous schedule of one
# worker, on the zoo models the emulator's own tests use, and a synchronous control
CASES = [
    ("lenet5", "pipedream", 1, 3, "sgd"),
    ("lenet5", "stale", 1, 3, "sgd"),
    ("lenet5", "2bw", 2, 3, "sgd"),
    ("lenet5", "hybrid", 1, 3, "sgd"),
    ("lenet5", "interleaved-2bw", 2, 4, "sgd"),
    ("lenet5", "interleaved-pipedream", 2, 4, "sgd"),
    ("lenet5", "gpipe", 2, 3, "sgd"),
    (GPT, "pipedream", 1, 3, "adamw"),
    (GPT, "stale", 1, 3, "adam"),
    (GPT, "2bw", 2, 3, "adamw"),
    ("lenet5", "pipe-sgd", 1, 3, "sgd"),
]


def _cfg(model: str, schedule: str, micro: int, stages: int, optimizer: str, **kw: object) -> TrainConfig:
    wd = 1e-3 if optimizer == "sgd" else 0.1
    kw.setdefault("batch_size", 8)
    return TrainConfig(model=model, dataset="synthetic", schedule=schedule, stages=stages, iterations=STEPS,
                       dtype="float64", lr=0.05 if optimizer == "sgd" else 3e-3, momentum=0.9,
                       weight_decay=wd, microbatches=micro, optimizer=optimizer, synthetic_size=64,
                       **kw).check()  # type: ignore[arg-type]


def _user_optimizer(cfg: TrainConfig, params: object) -> torch.optim.Optimizer:
    """What the user would write for the emulator's flags. The look-ahead and basis rotation
    are optimizers, not corrections around one: the user takes torch's Nesterov SGD (at lr
    (1 - mu) eta, :func:`_lr_scale`) or stalesim's Adam variants as their optimizer."""
    if cfg.optimizer == "sgd":
        kw = {"nesterov": True} if cfg.nesterov_lookahead else {}
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **kw)  # type: ignore[arg-type]
    adam = {"lr": cfg.lr, "betas": tuple(cfg.betas), "eps": cfg.eps, "weight_decay": cfg.weight_decay,
            "decoupled": cfg.optimizer == "adamw"}
    if cfg.basis_rotation:
        return RotatedAdam(params, freq=cfg.basis_rotation_freq, beta=cfg.basis_rotation_beta,  # type: ignore[arg-type]
                           max_dim=cfg.basis_rotation_max_dim, **adam)
    if cfg.nesterov_lookahead:
        return LookaheadAdam(params, momentum_decay=lookahead_decay(cfg), **adam)  # type: ignore[arg-type]
    kind = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.AdamW
    return kind(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)  # type: ignore[arg-type]


def _lr_scale(cfg: TrainConfig) -> float:
    """The SGD look-ahead is Nesterov SGD at (1 - mu) times the learning rate."""
    return 1.0 - cfg.momentum if cfg.nesterov_lookahead and cfg.optimizer == "sgd" else 1.0


def _emulate(cfg: TrainConfig) -> Emulator:
    emu = Emulator(cfg, progress=False)
    emu.replay()
    return emu


def _loss_order(sched: Schedule) -> dict[int, list[tuple[int, int | None]]]:
    """Per batch, the (worker, micro-batch) order of the emulator's last-stage LOSS actions: the
    order it sums a batch's reported loss in (its replay order; the training is not affected)."""
    order: dict[int, list[tuple[int, int | None]]] = {}
    for st in dry_run(sched):
        a = st.action
        if a.kind is Kind.LOSS and a.stage == sched.stages - 1:
            order.setdefault(a.batch, []).append((a.worker, a.micro))
    return order


def _user_loop(cfg: TrainConfig, emu: Emulator, sched: Schedule | None = None) -> tuple[list[float], StalePipeline]:
    """The user's loop on a fresh copy of the model, cut where the emulator cut it. With P
    data-parallel workers it runs one batch per worker (the emulator's shard), worker after
    worker, each loss not divided by P (each rank's own mean; the all-reduce averages)."""
    net = run_model(cfg).to(torch.float64)
    net.train()
    split = [list(stage._modules) for stage in emu.stage_mods[0]]
    pipe = StalePipeline(net, sched if sched is not None else cfg.schedule, steps=STEPS, split=split,
                         microbatches=cfg.microbatches, stages_per_device=cfg.stages_per_device,
                         warmup=cfg.warmup, workers=cfg.workers, compression=cfg.compression,
                         staleness_lr=cfg.staleness_lr, pipemare_lr=cfg.pipemare_lr,
                         pipemare_warmup=cfg.pipemare_warmup, weight_prediction=cfg.weight_prediction,
                         pipemare_correction=cfg.pipemare_correction, pipemare_gamma=cfg.pipemare_gamma,
                         spike_compensation=cfg.spike_compensation, error_feedback=cfg.error_feedback,
                         error_feedback_beta=cfg.error_feedback_beta)
    per_stage = cfg.staleness_lr or cfg.pipemare_lr or cfg.spike_compensation
    opt = pipe.attach(_user_optimizer(cfg, pipe.param_groups() if per_stage else net.parameters()))
    lossf, M, P = loss_fn(task_of(cfg)), len(pipe.micros), cfg.workers
    order = _loss_order(emu.sched)
    losses = []
    for t in range(STEPS):
        x, y = emu.stream(t)  # the emulator's data order
        values = {}
        for r, (xr, yr) in enumerate(zip(x.chunk(P), y.chunk(P))):  # each worker's batch, in turn
            for m, xm, ym in zip(pipe.micros, xr.chunk(M), yr.chunk(M)):  # accumulation = micro-batches
                loss = lossf(net(xm), ym) / M
                loss.backward()
                values[(r, m)] = loss.item()
        total = 0.0
        for key in order[t]:  # the batch's loss: the mean over workers of their summed micro-batches
            total += values[key] / P
        for group in opt.param_groups:  # the user's own lr schedule: the emulator's formula
            group["lr"] = cfg.lr_at(t, STEPS) * _lr_scale(cfg)
        if cfg.clip_grad_norm is not None:
            pipe.clip_grad_norm_(cfg.clip_grad_norm)  # per stage, as the emulator clips
        opt.step()
        opt.zero_grad()
        losses.append(total)
    pipe.weights = [p.detach().clone() for p in net.parameters()]  # type: ignore[attr-defined]
    return losses, pipe


# the IR's synchronous warm-up phase, the emulator's learning-rate mitigations, per-stage clipping
OPTIONS = [
    ("lenet5", "pipedream", 1, 3, "sgd", {"warmup": 3}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"staleness_lr": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"pipemare_lr": True, "pipemare_warmup": 4}),
    ("lenet5", "2bw", 2, 3, "sgd", {"pipemare_lr": True}),
    (GPT, "stale", 1, 3, "adamw", {"staleness_lr": True, "pipemare_lr": True}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"clip_grad_norm": 0.05}),
    (GPT, "2bw", 2, 3, "adamw", {"clip_grad_norm": 0.05}),
    ("lenet5", "stale", 1, 3, "sgd", {"lr_schedule": "cosine", "lr_warmup": 2, "lr_min": 1e-3,
                                      "staleness_lr": True}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"weight_prediction": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"weight_prediction": True}),
    ("lenet5", "2bw", 2, 3, "sgd", {"weight_prediction": True, "staleness_lr": True}),
    (GPT, "stale", 1, 3, "adamw", {"weight_prediction": True}),
    (GPT, "pipedream", 1, 3, "adam", {"weight_prediction": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"pipemare_correction": True}),
    (GPT, "stale", 1, 3, "adamw", {"pipemare_correction": True, "pipemare_gamma": 0.5, "pipemare_lr": True}),
    ("lenet5", "hybrid", 1, 3, "sgd", {"pipemare_correction": True}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"spike_compensation": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"spike_compensation": True, "staleness_lr": True, "warmup": 2}),
    ("lenet5", "2bw", 2, 3, "sgd", {"spike_compensation": True, "clip_grad_norm": 0.05}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"error_feedback": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"error_feedback": True, "error_feedback_beta": 0.5, "warmup": 2}),
    (GPT, "stale", 1, 3, "adamw", {"error_feedback": True}),
    (GPT, "2bw", 2, 3, "adam", {"error_feedback": True, "pipemare_lr": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"spike_compensation": True, "error_feedback": True}),
    ("lenet5", "stale", 1, 3, "sgd", {"error_feedback": True, "pipemare_correction": True}),
    ("lenet5", "pipedream", 1, 3, "sgd", {"nesterov_lookahead": True}),
    (GPT, "stale", 1, 3, "adamw", {"nesterov_lookahead": True}),
    (GPT, "pipedream", 1, 3, "adam", {"nesterov_lookahead": True, "lookahead_momentum": "constant"}),
    (GPT, "stale", 1, 3, "adamw", {"basis_rotation": True, "basis_rotation_freq": 2}),
]

# data-parallel workers (one batch each per step, the all-reduce's mean, its compression), with
# P = 3 where dividing by P and the order of the sum are not exact by luck, and mitigations
WORKERS = [
    ("lenet5", "dp", 1, 3, "sgd", {"workers": 3, "batch_size": 12}),
    ("lenet5", "pipe-sgd", 1, 2, "sgd", {"workers": 2}),
    ("lenet5", "pipe-sgd", 1, 1, "sgd", {"workers": 4, "warmup": 1, "compression": "int8"}),
    ("lenet5", "pipe-sgd", 1, 3, "sgd", {"workers": 2, "compression": "fp16", "staleness_lr": True}),
    ("lenet5", "pipe-sgd", 1, 2, "sgd", {"workers": 3, "batch_size": 12, "error_feedback": True,
                                         "clip_grad_norm": 0.05}),
    (GPT, "pipe-sgd", 1, 2, "adamw", {"workers": 3, "batch_size": 12, "weight_prediction": True}),
    (GPT, "dp", 1, 2, "adam", {"workers": 2, "clip_grad_norm": 0.05}),
]


@pytest.mark.parametrize(("model", "schedule", "micro", "stages", "optimizer", "options"),
                         [(*c, {}) for c in CASES] + OPTIONS + WORKERS)
def test_user_loop_equals_the_emulator(model, schedule, micro, stages, optimizer, options):
    cfg = _cfg(model, schedule, micro, stages, optimizer, **options)
    emu = _emulate(cfg)
    losses, pipe = _user_loop(cfg, emu)
    assert losses == [emu.state.losses[t] for t in range(STEPS)]
    emu_weights = [p.detach() for p in emu.models[0].parameters()]
    assert all(torch.equal(a, b) for a, b in zip(pipe.weights, emu_weights))  # type: ignore[attr-defined]
    assert pipe.versions_match()
    assert len(pipe.log.upd) == STEPS * stages * cfg.workers
    # every row the loop ran is the IR's row, read for read
    assert pipe.log.vf == {k: v for k, v in pipe.table.vf.items() if k[2] < STEPS}
    assert pipe.log.vb == {k: v for k, v in pipe.table.vb.items() if k[2] < STEPS}


def test_stale_reads_other_versions_in_backward_than_in_forward():
    """The case the tokens exist for: under the latest policy some backward reads a newer
    version than its forward (and the loop still equals the emulator, above)."""
    cfg = _cfg("lenet5", "stale", 1, 3, "sgd")
    _, pipe = _user_loop(cfg, _emulate(cfg))
    assert any(pipe.log.vb[k] > v for k, v in pipe.log.vf.items())
    assert pipe.table.staleness() == [4, 2, 0]


def test_memory_is_the_stash_the_table_asks_for():
    """pipedream keeps exactly the emulator's stash; stale keeps copies the pipeline does
    not (its forwards of batch t run at step t, after the updates the pipeline ran later)."""
    cfg = _cfg("lenet5", "pipedream", 1, 3, "sgd")
    emu = _emulate(cfg)
    _, pipe = _user_loop(cfg, emu)
    assert pipe.stash_peak_bytes == sum(r.stash_peak_bytes for r in emu.rts.values()) > 0
    cfg = _cfg("lenet5", "stale", 1, 3, "sgd")
    emu = _emulate(cfg)
    _, pipe = _user_loop(cfg, emu)
    assert sum(r.stash_peak_bytes for r in emu.rts.values()) == 0 < pipe.stash_peak_bytes


@pytest.mark.parametrize(("schedule", "stages", "options", "worker", "stage"), [
    ("pipedream", 3, {}, 0, 1),
    ("pipe-sgd", 2, {"workers": 2}, 1, 0),  # one worker's rows: each worker reads its own
])
def test_a_stage_reading_one_version_off_gives_other_losses(schedule, stages, options, worker, stage):
    """Control: the same loop with one (worker, stage) reading one version older from batch 3
    on (a tampered table, forward and backward alike) no longer equals the emulator."""
    cfg = _cfg("lenet5", schedule, 1, stages, "sgd", **options)
    emu = _emulate(cfg)
    table = dataclasses.replace(emu.sched.table, vf=dict(emu.sched.table.vf), vb=dict(emu.sched.table.vb))
    for key in table.vf:
        if key[0] == worker and key[1] == stage and key[2] >= 3:
            table.vf[key] -= 1
            table.vb[key] -= 1
    off, pipe = _user_loop(cfg, emu, dataclasses.replace(emu.sched, versions=table))
    exact = [emu.state.losses[t] for t in range(STEPS)]
    assert off[:3] == exact[:3]  # batch 3's forward is the first to read another version
    assert all(abs(a - b) > 1e-9 for a, b in zip(off[3:], exact[3:]))
    key = (worker, stage, 3, None)
    assert pipe.log.vf[key] == emu.sched.table.vf[key] - 1


# ------------------------------------------------------------------ bad use, one line each
def _small() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _step(net: torch.nn.Module, opt: torch.optim.Optimizer, forwards: int = 1) -> None:
    for _ in range(forwards):
        net(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize(("make", "message"), [
    (lambda net: object(), "optimizer: expected a torch.optim.Optimizer, got object"),
    (lambda net: torch.optim.LBFGS(net.parameters()), "optimizer: LBFGS re-runs the model inside step()"),
    (lambda net: torch.optim.SGD([*net.parameters(), torch.nn.Parameter(torch.ones(3))], lr=0.1),
     "optimizer: param group 0 holds a tensor of shape (3,) that is no trainable parameter of a stage"),
])
def test_optimizers_it_cannot_wrap_are_refused(make, message):
    net = _small()
    pipe = StalePipeline(net, "pipedream", steps=4, split=["0", "2"])
    with pytest.raises(StalesimError) as e:
        pipe.attach(make(net))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_loop_mistakes_are_one_line():
    net = _small()
    pipe = StalePipeline(net, "2bw", steps=2, split=["0", "2"], microbatches=2)
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(StalesimError, match=r"optimizer.step\(\): step 0 ran 1 forward\(s\) with grad; the "
                                            r"schedule has 2 micro-batch\(es\) per step"):
        _step(net, opt, forwards=1)
    net(torch.ones(2, 4)).sum().backward()  # the second micro-batch of step 0
    with pytest.raises(StalesimError, match=r"forward: step 0 already ran its 2 micro-batch\(es\)"):
        net(torch.ones(2, 4))
    opt.step()
    _step(net, opt, forwards=2)
    with pytest.raises(StalesimError, match="steps: the pipeline was built for 2 steps; step 2 needs"):
        net(torch.ones(2, 4))
    with pytest.raises(StalesimError, match=r"optimizer.step\(closure\)"):
        opt.step(lambda: 0.0)


def test_construction_mistakes_are_one_line():
    net = _small()
    with pytest.raises(StalesimError, match="steps: expected an integer >= 1"):
        StalePipeline(net, "stale", steps=0)
    with pytest.raises(StalesimError, match="schedule: local gives every stage its own loss"):
        StalePipeline(net, "local", steps=4)
    with pytest.raises(StalesimError, match="workers: schedule 'stale' is not data-parallel"):
        StalePipeline(net, "stale", steps=4, workers=2)
    with pytest.raises(StalesimError, match="compression: 'int8' compresses the gradient all-reduce of "
                                            "data-parallel workers; the schedule has one worker"):
        StalePipeline(net, "pipe-sgd", steps=4, compression="int8")
    skewed = Schedule_of("pipe-sgd", stages=2, workers=2, batches=4)
    skewed.table.vf[(1, 0, 2, None)] -= 1
    skewed.table.vb[(1, 0, 2, None)] -= 1
    StalePipeline(net, skewed, steps=4)  # each worker reads its own rows
    with pytest.raises(StalesimError, match="staleness_lr: worker 1 reads other versions than worker 0; the "
                                            "mitigations of a loop follow worker 0's rows"):
        StalePipeline(net, skewed, steps=4, staleness_lr=True)
    with pytest.raises(StalesimError, match="stages: 3 but split names 2 stages"):
        StalePipeline(net, "stale", steps=4, stages=3, split=["0", "2"])
    with pytest.raises(StalesimError, match="schedule: expected a schedule name or a built Schedule, got int"):
        StalePipeline(net, 3, steps=4)  # type: ignore[arg-type]
    with pytest.raises(StalesimError, match="model: expected an nn.Module, got str"):
        StalePipeline("net", steps=4)  # type: ignore[arg-type]


def test_worker_mistakes_are_one_line():
    """Workers run in turn, each its forward then its backward: a second worker's forward
    before the first's backward, a backward after the all-reduce landed, too few workers."""
    net = _small()
    pipe = StalePipeline(net, "dp", steps=3, split=["0", "2"], workers=2)
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(StalesimError, match=r"optimizer.step\(\): step 0 ran 1 forward\(s\) with grad; the "
                                            r"schedule has 2 workers x 1 micro-batch\(es\) per step"):
        _step(net, opt, forwards=1)
    loss = net(torch.ones(2, 4)).sum()  # worker 1
    loss.backward(retain_graph=True)  # the mean lands in .grad
    with pytest.raises(StalesimError, match="backward: a gradient of step 0 arrived after its workers' all-reduce"):
        loss.backward()
    with pytest.raises(StalesimError, match=r"forward: step 0 already ran its 2 forward\(s\) \(2 workers x 1 "):
        net(torch.ones(2, 4))
    net = _small()
    pipe = StalePipeline(net, "dp", steps=3, split=["0", "2"], workers=2)
    pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1))
    first = net(torch.ones(2, 4)).sum()
    with pytest.raises(StalesimError, match="forward: worker 0 of step 0 ran no backward before worker 1's forward"):
        net(torch.ones(2, 4))
    del first


def Schedule_of(name: str, **kw: int) -> Schedule:
    from stalesim.schedule import ScheduleConfig, build_schedule

    return build_schedule(ScheduleConfig(name, **kw))


def test_forwards_without_grad_read_the_live_weights_and_count_no_micro_batch():
    """Evaluation inside the loop: the current weights (as the emulator evaluates), and the
    step's micro-batch count is untouched; close() makes the model plain again."""
    net = _small()
    pipe = StalePipeline(net, "stale", steps=6, split=["0", "2"])
    opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.5))
    for _ in range(3):
        _step(net, opt)
    with torch.no_grad():
        plain = torch.nn.functional.linear(torch.tanh(net[0](torch.ones(1, 4))), net[2].weight, net[2].bias)
        assert torch.equal(net(torch.ones(1, 4)), plain)
    assert pipe.forwards == 0
    _step(net, opt)
    assert pipe.versions_match() and pipe.log.vf[(0, 0, 3, None)] == pipe.table.vf[(0, 0, 3, None)] < 3
    pipe.close()
    for _ in range(4):  # past the pipeline's steps: hooks gone
        _step(net, opt)


@pytest.mark.parametrize("prediction", [False, True])
def test_resume_from_state_dicts_is_exact(tmp_path, prediction):
    """Six steps straight equal three, a save of model + optimizer + pipeline, a fresh
    process's objects loading them, and three more (stale keeps copies across the save;
    weight prediction the directions of the versions still read, the correction its deltas,
    error feedback its last step)."""
    def build():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                  torch.nn.Linear(8, 2)).double()
        # stage 0 ends in a layer whose weight its backward reads, so the correction shows
        pipe = StalePipeline(net, "stale", steps=6, split=[["0", "2"], ["4"]], weight_prediction=prediction,
                             pipemare_correction=not prediction, error_feedback=not prediction)
        opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.9))
        return net, pipe, opt

    def run(net, opt, steps):
        out = []
        for t in steps:
            x = torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(2, 4) * (t + 1)
            loss = net(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        return out

    net, pipe, opt = build()
    straight = run(net, opt, range(6))
    final = [p.detach().clone() for p in net.parameters()]
    net, pipe, opt = build()
    first = run(net, opt, range(3))
    assert pipe.store.nbytes() > 0  # copies a later batch reads are part of the state
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "pipe": pipe.state_dict()}, tmp_path / "c.pt")
    net, pipe, opt = build()
    ck = torch.load(tmp_path / "c.pt", weights_only=True)
    net.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    pipe.load_state_dict(ck["pipe"])
    assert first + run(net, opt, range(3, 6)) == straight
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), final))
    assert pipe.versions_match()
    with pytest.raises(StalesimError, match="state_dict: saved for steps=6, this pipeline has steps=7"):
        StalePipeline(_small(), "stale", steps=7, split=["0", "2"]).load_state_dict(ck["pipe"])


def test_resume_with_workers_is_exact(tmp_path):
    """pipe-sgd on 2 workers: six steps straight equal three, a save, fresh objects loading
    it, and three more (between steps no worker's gradient is held: the state is the stash)."""
    def build():
        net = _small().double()
        pipe = StalePipeline(net, "pipe-sgd", steps=6, split=["0", "2"], workers=2, compression="int8")
        return net, pipe, pipe.attach(torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.9))

    def run(net, opt, steps):
        out = []
        for t in steps:
            for r in range(2):
                x = torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(2, 4) * (t + 1) * (r - 0.5)
                loss = net(x).square().mean()
                loss.backward()
                out.append(loss.item())
            opt.step()
            opt.zero_grad()
        return out

    net, pipe, opt = build()
    straight = run(net, opt, range(6))
    net, pipe, opt = build()
    first = run(net, opt, range(3))
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "pipe": pipe.state_dict()}, tmp_path / "c.pt")
    net(torch.ones(2, 4, dtype=torch.float64)).sum().backward()  # worker 0 of step 3: mid-step
    with pytest.raises(StalesimError, match=r"state_dict: step 3 is half done \(1 forward"):
        pipe.state_dict()
    net, pipe, opt = build()
    ck = torch.load(tmp_path / "c.pt", weights_only=True)
    net.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    pipe.load_state_dict(ck["pipe"])
    assert first + run(net, opt, range(3, 6)) == straight
    assert pipe.versions_match()


def test_clipping_is_per_stage_and_checked():
    net = _small()
    pipe = StalePipeline(net, "stale", steps=2, split=["0", "2"])
    net(torch.ones(2, 4)).sum().backward()
    norms = pipe.clip_grad_norm_(1e-3)
    assert len(norms) == 2 and all(n > 1e-3 for n in norms)
    for ps in pipe.split.params:  # each stage on its own lands on the limit
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ps]))
        assert total == pytest.approx(1e-3, rel=1e-3)
    with pytest.raises(StalesimError, match="max_norm: expected a number > 0, got 0"):
        pipe.clip_grad_norm_(0)


def test_autocast_is_refused_where_the_backward_reads_another_version():
    """stale's backward reads a newer version than its forward (from step 1 on stage 0 here);
    autocast's saved weights are cast copies of the forward's, so that is one line. pipedream
    (v_B = v_F) runs under autocast."""
    for name, fails in (("stale", True), ("pipedream", False)):
        net = _small()
        pipe = StalePipeline(net, name, steps=4, split=["0", "2"])
        opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.1))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _step(net, opt)  # step 0: every version is 0
            if fails:
                with pytest.raises(StalesimError, match="autocast: stage 0's backward of step 1 reads version 1, "
                                                        "its forward 0"):
                    net(torch.ones(2, 4))
            else:
                _step(net, opt)
                assert pipe.versions_match()


def test_autocast_casts_of_one_version_are_never_reused_for_another():
    """autocast caches a parameter's cast for the whole autocast region, by the parameter
    whatever its data points at: pipedream's version swaps must never reuse a cast, so one
    region around every step and one per step give the losses of autocast without a cache."""
    def losses(one_region: bool, cache: bool = True) -> list[float]:
        net = _small()
        pipe = StalePipeline(net, "pipedream", steps=5, split=["0", "2"])
        opt = pipe.attach(torch.optim.SGD(net.parameters(), lr=0.5))
        out = []
        region = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache)
        with region if one_region else contextlib.nullcontext():
            for t in range(5):
                inner = contextlib.nullcontext() if one_region else region
                with inner:
                    loss = net(torch.ones(2, 4) * (t + 1)).float().square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                out.append(loss.item())
        return out

    truth = losses(False, cache=False)
    assert losses(True) == losses(False) == truth
