"""Unit tests of the executor's pieces that need no process group (fast)."""

from __future__ import annotations

import pytest

from stalesim.errors import StalesimError
from stalesim.executor.faults import parse_faults
from stalesim.executor.launch import parse_devices
from stalesim.schedule import Kind, build_schedule, dry_run, get_spec, schedule_names


def test_parse_devices():
    d = parse_devices("cpu:3")
    assert (d.kind, d.count, d.backend, str(d)) == ("cpu", 3, "gloo", "cpu:3")
    g = parse_devices("cuda:0,2")
    assert (g.kind, g.ids, g.backend, g.device_for(1)) == ("cuda", (0, 2), "nccl", "cuda:2")
    for bad in ("gpu:2", "cpu", "cpu:0", "cpu:x", "cuda:", "cuda:0,0", "cuda:-1", ""):
        with pytest.raises(StalesimError, match="--devices"):
            parse_devices(bad)


def test_parse_faults():
    assert parse_faults("1:1F3:crash; 0:w1:0AR5:hang") == {(1, "1F3"): "crash", (0, "w1:0AR5"): "hang"}
    with pytest.raises(ValueError):
        parse_faults("1:1F3:explode")


@pytest.mark.parametrize("name", schedule_names())
def test_tags_are_unique_per_peer(name):
    """No two messages between the same pair of ranks share a tag (gloo pairs by tag)."""
    torch = pytest.importorskip("torch")  # noqa: F841
    from stalesim.executor.transport import ACT, GRAD, LABELS, tag_for

    spec = get_spec(name)
    sched = build_schedule(spec.config(stages=1 if spec.data_parallel else 3 * spec.stages_per_device,
                                       batches=12, microbatches=3, workers=2))
    seen: dict[tuple, set] = {}
    for d, acts in enumerate(sched.device_actions):
        for a in acts:
            if a.kind is Kind.SEND_F:
                chans = ((ACT, sched.device_of(a.stage + 1)), (LABELS, sched.device_of(a.stage + 1)))
            elif a.kind is Kind.SEND_B:
                chans = ((GRAD, sched.device_of(a.stage - 1)),)
            else:
                continue
            for ch, dst in chans:
                tag = tag_for(ch, a.stage, a.batch, a.micro)
                assert 0 <= tag < 2**31
                bucket = seen.setdefault((d, dst), set())
                assert tag not in bucket, f"{name}: tag clash at {a}"
                bucket.add(tag)


@pytest.mark.parametrize("name", schedule_names())
def test_checkpoint_cuts_are_consistent(name):
    """Every message received before a cut was sent before it (a consistent cut)."""
    from stalesim.executor.checkpoint import checkpoint_cuts
    from stalesim.schedule.deps import peer

    spec = get_spec(name)
    sched = build_schedule(spec.config(stages=1 if spec.data_parallel else 3 * spec.stages_per_device,
                                       batches=10, microbatches=2, workers=2))
    cuts = checkpoint_cuts(sched, 3)
    assert sorted(cuts) == [3, 6, 9]
    where = {a.key: (d, i) for d, acts in enumerate(sched.device_actions) for i, a in enumerate(acts)}
    for k, cut in cuts.items():
        for d, acts in enumerate(sched.device_actions):
            for a in acts[:cut[d]]:
                if a.kind in (Kind.RECV_F, Kind.RECV_B):
                    sd, si = where[peer(a)]
                    assert si < cut[sd], f"{name}: {a} before cut {k} but its send is after"
    # every batch < k is updated on every device before the cut
    for k, cut in cuts.items():
        for d, acts in enumerate(sched.device_actions):
            for i, a in enumerate(acts):
                if a.kind is Kind.U and a.batch < k:
                    assert i < cut[d]
    assert dry_run(sched)


def test_summarize_steady_state():
    from stalesim.executor.measure import summarize

    # two devices, 4 batches, each batch's U ends 1 s after the previous one
    rows = {0: [], 1: []}
    for t in range(4):
        rows[0].append([f"0F{t}", "F", 0, t, None, 0, t + 0.0, t + 0.5])
        rows[0].append([f"0U{t}", "U", 0, t, None, 0, t + 0.5, t + 0.6])
        rows[1].append([f"1U{t}", "U", 1, t, None, 0, t + 0.6, t + 1.0])
    s = summarize(rows, batches=4, stages=2, samples_per_batch=10)
    assert s["iteration_time_s"] == pytest.approx(1.0)
    assert s["throughput_samples_per_s"] == pytest.approx(10.0)
    assert s["utilization"]["0"] == pytest.approx(0.6)


def test_run_and_validate_count_the_same_compute_kinds():
    """A split backward's I and W are busy time in ``run``'s summary as in validate's measured
    side (one kind set, from the IR): zero-bubble runs no longer under-report utilization."""
    from stalesim.executor.measure import summarize
    from stalesim.schedule import ScheduleConfig, build_schedule
    from stalesim.validate.measured import measured_timing

    rows = {0: [], 1: []}
    for t in range(4):
        rows[0].append([f"0F{t}", "F", 0, t, None, 0, t + 0.0, t + 0.2])
        rows[0].append([f"0I{t}", "I", 0, t, None, 0, t + 0.2, t + 0.4])
        rows[0].append([f"0W{t}", "W", 0, t, None, 0, t + 0.4, t + 0.5])
        rows[0].append([f"0U{t}", "U", 0, t, None, 0, t + 0.5, t + 0.6])
        rows[1].append([f"1U{t}", "U", 1, t, None, 0, t + 0.6, t + 1.0])
    run = summarize(rows, batches=4, stages=2, samples_per_batch=10)
    assert run["utilization"]["0"] == pytest.approx(0.6)  # F + I + W + U, not F + U alone
    sched = build_schedule(ScheduleConfig("sequential", stages=2, batches=4))
    val = measured_timing({"rows": rows, "iterations": 4}, sched)
    assert val["utilization"][0] == pytest.approx(run["utilization"]["0"])


def test_ranks_start_when_stderr_has_no_file_descriptor(monkeypatch):
    """Jupyter's sys.stderr has no fileno(); launching ranks must still work there."""
    import io

    from stalesim.executor import launch

    class NoFileno(io.StringIO):
        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    monkeypatch.setattr(launch.sys, "stderr", NoFileno())
    assert launch._child_stdout() is None
    monkeypatch.undo()
    import sys

    assert launch._child_stdout() == sys.stderr.fileno()


@pytest.mark.parametrize("name", schedule_names())
def test_p2p_order_matches_on_every_pair_and_direction(name):
    """NCCL pairs point-to-point messages by order per communicator: on every (sender,
    receiver, direction) the sends and the receives must come in the same order (the
    executor posts receives in list order). Virtual stages put several chunks' messages
    on one pair; their orders must still agree."""
    from stalesim.schedule.deps import peer

    spec = get_spec(name)
    for R in (2, 3):
        sched = build_schedule(spec.config(stages=1 if spec.data_parallel else R * spec.stages_per_device,
                                           batches=6, microbatches=R * 2, workers=2))
        sends: dict[tuple, list] = {}
        recvs: dict[tuple, list] = {}
        for d, acts in enumerate(sched.device_actions):
            for a in acts:
                if a.kind in (Kind.SEND_F, Kind.SEND_B):
                    p = peer(a)
                    dst = sched.device_of(p[2], p[1])
                    sends.setdefault((d, dst, a.kind is Kind.SEND_F), []).append(p)
                elif a.kind in (Kind.RECV_F, Kind.RECV_B):
                    src = sched.device_of(peer(a)[2], a.worker)
                    recvs.setdefault((src, d, a.kind is Kind.RECV_F), []).append(a.key)
        assert sends == recvs, f"{name} on {R} devices: send and receive orders differ"
