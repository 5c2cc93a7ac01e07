"""The executor under NCCL's ordering rules, on gloo (``STALESIM_STRICT_COMM=1``).

Strict mode runs each communicator's operations one at a time in issue order, with a
rendezvous per message (:mod:`stalesim.executor.strict`), so a posting order NCCL would hang on
hangs here too, and fails within the deadline naming the action. Every registered
schedule runs under it on 3 and on 4 ranks and still equals the emulator; the layout
before per-edge groups fails; resume re-sends in an order strict mode accepts.

Cost control: one process group per rank count runs every schedule back to back.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _equivalence import check_equal, micro_for

from stalesim.executor import make_job, run_local
from stalesim.executor.launch import ExecutorError
from stalesim.executor.strict import STRICT_ENV
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import get_spec, schedule_names

STRICT = {STRICT_ENV: "1"}


def _cfg(name: str, devices: int, **over) -> TrainConfig:
    """A short run of ``name`` on ``devices`` ranks: LeNet-5 for one stage per device,
    ResNet-14 (8 blocks) for two chunks per device, dp/pipe-sgd over the ranks."""
    spec = get_spec(name)
    kw = dict(  # noqa: C408
        model="lenet5", dataset="synthetic", schedule=name, stages=devices, iterations=3,
        batch_size=24, synthetic_size=96, lr=0.05)
    if spec.stages_per_device > 1:
        kw.update(model="resnet14", stages=devices * spec.stages_per_device, batch_size=4 * devices,
                  synthetic_size=16 * devices)
    if spec.uses_micro:
        kw["microbatches"] = micro_for(name, kw["stages"], devices, kw["batch_size"])
    if spec.data_parallel:
        kw.update(workers=devices, stages=2)
    if name == "pipe-sgd":
        kw["warmup"] = 1
    kw.update(over)
    return TrainConfig(**kw).check()


def _run_all(devices: int) -> None:
    cases = [_cfg(n, devices) for n in schedule_names()]
    jobs = [make_job(c, keep_rows=True, deterministic=True, label=c.schedule, evaluate=False)
            for c in cases]
    results = run_local(jobs, f"cpu:{devices}", timeout_s=60, env=STRICT)
    assert len(results) == len(cases)
    for cfg, res in zip(cases, results):
        check_equal(cfg, res, f"{cfg.schedule} strict on {devices} ranks")


@pytest.mark.slow
def test_every_schedule_runs_under_strict_ordering_on_three_ranks() -> None:
    _run_all(3)


@pytest.mark.slow
def test_every_schedule_runs_under_strict_ordering_on_four_ranks() -> None:
    _run_all(4)


def test_the_legacy_layout_fails_under_strict_ordering_naming_the_action() -> None:
    """One group per channel and receives in list order (the layout before per-edge
    groups): on 2 ranks of interleaved 1F1B each rank's first receive sits in front of
    its own first send on the same communicator; plain gloo ran it, strict mode (like
    NCCL) does not, and says where within the deadline."""
    cfg = _cfg("interleaved-1f1b", 2, model="lenet5", stages=4, batch_size=8, synthetic_size=32,
               microbatches=2, iterations=2)
    env = dict(STRICT, STALESIM_COMM_LAYOUT="legacy")
    with pytest.raises(ExecutorError) as err:
        run_local(make_job(cfg, evaluate=False), "cpu:2", timeout_s=3, env=env)
    msg = str(err.value)
    assert "timed out after 3 s" in msg
    assert "at action 2RECV_F0.0" in msg and "at action 1RECV_F0.0" in msg


@pytest.mark.slow
def test_resume_is_exact_under_strict_ordering(tmp_path) -> None:
    """Resumed runs re-send the messages the peer had not received before any newer one:
    on per-edge groups with sender-order posting that is the order strict mode demands."""
    cfgs = [_cfg(n, 2, model="lenet5", stages=2 * get_spec(n).stages_per_device, batch_size=8,
                 synthetic_size=32, iterations=7,
                 microbatches=2 if get_spec(n).uses_micro else 1)
            for n in ("interleaved-pipedream", "local", "zb-v")]
    assert _resent_at_newest_cut(cfgs[0]) > 0 and _resent_at_newest_cut(cfgs[1]) > 0
    outs = [str(tmp_path / c.schedule) for c in cfgs]
    full = run_local([make_job(c, out=o, checkpoint_every=3, evaluate=False) for c, o in zip(cfgs, outs)],
                     "cpu:2", timeout_s=30, env=STRICT)
    resumed = run_local([make_job(c, out=o, checkpoint_every=3, resume=o, evaluate=False)
                         for c, o in zip(cfgs, outs)], "cpu:2", timeout_s=30, env=STRICT)
    for cfg, a, b in zip(cfgs, full, resumed):
        assert b["losses"] == a["losses"], cfg.schedule


def _resent_at_newest_cut(cfg: TrainConfig, every: int = 3) -> int:
    """Messages sent before the newest checkpoint and received after it (re-sent on resume)."""
    from stalesim.executor.checkpoint import _peer_recv_index, checkpoint_cuts
    from stalesim.executor.job import plan
    from stalesim.schedule import Kind
    from stalesim.schedule.deps import peer

    _, sched = plan(cfg)
    cuts = checkpoint_cuts(sched, every)
    cut = cuts[max(cuts)]
    recv_at = _peer_recv_index(sched)
    n = 0
    for me, acts in enumerate(sched.device_actions):
        for i, a in enumerate(acts):
            if a.kind in (Kind.SEND_F, Kind.SEND_B):
                d, j = recv_at[peer(a)]
                n += i < cut[me] and j >= cut[d]
    return n


def test_strict_transport_refuses_a_tensor_off_the_compute_device() -> None:
    """NCCL moves device tensors only: strict mode names the action and the peer when a
    tensor handed to a send/receive/all-reduce lives elsewhere (checked before any I/O)."""
    from stalesim.executor.strict import StrictComm
    from stalesim.executor.transport import Transport, TransportError

    tr = Transport(0, 1.0, strict=StrictComm(0, torch.device("meta"), 1.0))
    with pytest.raises(TransportError, match=r"sending the labels from/to rank 1 at action 0SEND_F0.*on cpu, "
                                             r"not on the rank's compute device meta") as err:
        tr.send(torch.zeros(3), 1, 7, "0SEND_F0", "the labels")
    assert err.value.action == "0SEND_F0" and err.value.peer == 1
    with pytest.raises(TransportError, match="receiving x from/to rank 1 at action 1RECV_B0"):
        tr.post_recv(torch.zeros(2), 1, 7, "1RECV_B0", "x")
    with pytest.raises(TransportError, match="all-reduce at action 0AR0"):
        tr.all_reduce_start(torch.zeros(2), "0AR0")


def test_strict_work_times_out_and_reports_a_lane_failure() -> None:
    """The futures the compute thread waits on: a deadline, and a failed operation
    fails every later one of its communicator (an NCCL communicator is dead after it)."""
    import datetime

    from stalesim.executor.strict import StrictWork, _Lane

    w = StrictWork()
    with pytest.raises(RuntimeError, match="timed out after 0.05 s"):
        w.wait(datetime.timedelta(seconds=0.05))
    lane = _Lane("test")
    first, second = StrictWork(), StrictWork()

    def boom() -> None:
        raise RuntimeError("peer went away")

    lane.q.put((boom, first))
    lane.q.put((lambda: None, second))
    with pytest.raises(RuntimeError, match="peer went away"):
        first.wait(datetime.timedelta(seconds=5))
    with pytest.raises(RuntimeError, match="an earlier operation on this communicator failed"):
        second.wait(datetime.timedelta(seconds=5))
    lane.q.put(None)
    lane.thread.join(timeout=5)
    assert not lane.thread.is_alive()
