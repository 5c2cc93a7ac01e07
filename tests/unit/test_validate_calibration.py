"""Per-action runtime costs: calibration fitting and the replay on synthetic data.

A "measurement" here is the simulated timeline itself, produced with known per-action
costs (gaps, communication CPU, link latency, all-reduce time): the fitting must
recover those costs and the replay must reproduce the simulated iteration time.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim import SimOptions, simulate
from stalesim.sim.model import SimHardware, uniform_costs
from stalesim.validate.commcal import cost, fit_linear
from stalesim.validate.costmodel import (
    CostModel,
    allreduce_times,
    link_from_comm,
    message_delays,
    replay_costs,
    replay_link,
    runtime_overheads,
)
from stalesim.validate.measured import gaps_after
from stalesim.workloads.profile import uniform_profile

US = 1000  # ns


def _rows(result) -> dict[str, list[list]]:
    tl = result.timeline
    rows: dict[str, list[list]] = {}
    for gid, a in enumerate(tl.program.actions):
        d = tl.program.device_of_gid[gid]
        rows.setdefault(str(d), []).append([str(a.with_version(None)), a.kind.value, a.stage, a.batch,
                                            a.micro, a.worker, tl.start[gid] / 1e9, tl.end[gid] / 1e9])
    for r in rows.values():
        r.sort(key=lambda x: x[6])
    return rows


def test_fit_linear_and_cost() -> None:
    a, b = fit_linear([0, 100, 200], [1.0, 2.0, 3.0])
    assert a == pytest.approx(1.0) and b == pytest.approx(0.01)
    assert fit_linear([10, 20], [5.0, 4.0]) == (pytest.approx(4.5), 0.0)  # slope clamped at 0
    assert cost({"alpha_s": 1e-5, "beta_s_per_byte": 1e-9}, 1000) == pytest.approx(1.1e-5)
    from stalesim.errors import StalesimError

    with pytest.raises(StalesimError):
        fit_linear([1], [1.0])


def test_gaps_after_from_rows() -> None:
    rows = {"0": [["0F0", "F", 0, 0, None, 0, 0.0, 1.0], ["0LOSS0", "LOSS", 0, 0, None, 0, 1.2, 1.3],
                  ["0B0", "B", 0, 0, None, 0, 1.35, 2.0], ["0U0", "U", 0, 0, None, 0, 2.4, 2.5],
                  ["0F1", "F", 0, 1, None, 0, 2.6, 3.0]]}
    g = gaps_after(rows)
    assert g == {"F": pytest.approx(0.2), "LOSS": pytest.approx(0.05), "B": pytest.approx(0.4),
                 "U": pytest.approx(0.1), "comm": pytest.approx(0.05)}


def _cm() -> CostModel:
    prof = uniform_profile(4, 1e-3, 2e-3, 32, param_bytes=4000, output_bytes=10_000, saved_bytes=100)
    cm = CostModel(prof)
    cm.gaps_s = {"F": 20e-6, "B": 30e-6, "U": 10e-6, "LOSS": 5e-6, "comm": 3e-6}
    lin = {"alpha_s": 50e-6, "beta_s_per_byte": 1e-9}
    cm.comm = {"post": lin, "complete": {"alpha_s": 40e-6, "beta_s_per_byte": 0.0},
               "release": {"alpha_s": 10e-6, "beta_s_per_byte": 0.0},
               "arrive": {"alpha_s": 80e-6, "beta_s_per_byte": 2e-9},
               "ar_post": {"alpha_s": 60e-6, "beta_s_per_byte": 0.0},
               "ar_complete": {"alpha_s": 70e-6, "beta_s_per_byte": 0.0}}
    return cm


def test_runtime_overheads_come_from_the_calibration_and_the_ir() -> None:
    cm = _cm()
    sched = build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=4))
    base = uniform_costs(2, 100 * US, 200 * US, msg_bytes=10_000, param_bytes=4000, batch_size=32,
                         action_batch=8)
    c = runtime_overheads(cm, sched, base, recv_ahead=8, label_bytes=256)
    gap, com = c.gap_table(), c.comm_table()
    assert gap["F"] == (20 * US, 20 * US) and gap["SEND_F"] == (3 * US, 3 * US)
    # one labels message per batch rides with the first of its 4 sends: a quarter each; the
    # bytes at arrive's copy rate (send_post_fit)
    assert com["SEND_F"][0] == round((50e-6 + 2e-9 * 10_000 + (50e-6 + 2e-9 * 256) / 4) * 1e9)
    assert com["SEND_B"] == (0, round((50e-6 + 2e-9 * 10_000) * 1e9))
    assert com["RECV_B"][0] == 40 * US and com["RECV_F"][0] == 0
    # a receive also waits on the sends it proves complete (10 us each, counted from the IR)
    assert gap["RECV_B"][0] > 3 * US and gap["RECV_F"][1] > 3 * US
    assert runtime_overheads(CostModel(cm.profile), sched, base) is base  # nothing calibrated


def test_the_compute_a_message_takes_goes_to_its_sender_and_to_a_receive_that_found_it() -> None:
    """``lost_sender`` lengthens the gap after each post by its bytes' cost; ``lost_receiver``
    becomes the receive's arrival cost, which only a receive that did not block pays; the
    replay, whose compute already holds it, has none; calibrations without them are unchanged."""
    cm = _cm()
    sched = build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=4))
    base = uniform_costs(2, 100 * US, 200 * US, msg_bytes=10_000, param_bytes=4000, batch_size=32,
                         action_batch=8)
    before = runtime_overheads(cm, sched, base, recv_ahead=8)
    cm.comm = dict(cm.comm, lost_sender={"alpha_s": 5e-6, "beta_s_per_byte": 1e-9},
                   lost_receiver={"alpha_s": 7e-6, "beta_s_per_byte": 2e-9})
    after = runtime_overheads(cm, sched, base, recv_ahead=8)
    assert before.arrival_table() == {}
    assert after.arrival_table() == {"RECV_F": (0, 27 * US), "RECV_B": (27 * US, 27 * US)}
    g0, g1 = before.gap_table(), after.gap_table()
    assert g1["SEND_F"] == (g0["SEND_F"][0] + 15 * US, g0["SEND_F"][1] + 15 * US)
    assert g1["SEND_B"] == (g0["SEND_B"][0], g0["SEND_B"][1] + 15 * US)  # stage 0 sends no gradient
    assert {k: v for k, v in g1.items() if not k.startswith("SEND")} == \
        {k: v for k, v in g0.items() if not k.startswith("SEND")}
    assert after.comm_table() == before.comm_table()
    assert after.to_dict()["arrival_cpu_s"]["RECV_B"] == [27e-6, 27e-6]
    # the replay's compute is the run's, which already lost what its messages took
    r = simulate(after, sched, SimHardware.ideal())
    assert replay_costs(after, _rows(r), None).arrival_table() == {}


def test_sends_cost_what_posting_to_an_announced_receive_costs() -> None:
    """The executor posts receives ahead, so gloo writes the payload while posting: a send
    costs the post overhead plus its bytes at the link's calibrated copy rate (arrive's
    beta), and the link adds only its latency beyond the post."""
    cm = _cm()  # post 50 us + 1 ns/B, arrive 80 us + 2 ns/B
    sched = build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=4))
    base = uniform_costs(2, 100 * US, 200 * US, msg_bytes=1_000_000, param_bytes=4000, batch_size=32,
                         action_batch=8)
    com = runtime_overheads(cm, sched, base, recv_ahead=8).comm_table()
    assert com["SEND_B"] == (0, round((50e-6 + 2e-9 * 1_000_000) * 1e9))  # 2.05 ms, not 1.05 ms
    hw = link_from_comm(SimHardware.ideal(), cm.comm)
    assert hw.latency_ns == 30 * US and hw.bandwidth_Bps == float("inf")


def test_link_from_comm_and_the_measured_allreduce() -> None:
    cm = _cm()
    hw = link_from_comm(SimHardware.ideal(), cm.comm,
                        [{"bytes": 1000, "workers": 2, "seconds": 2e-4}, {"bytes": 3000, "workers": 2,
                                                                           "seconds": 4e-4},
                         {"bytes": 1000, "workers": 4, "seconds": 9.0}], workers=2)
    assert hw.latency_ns == 30 * US  # arrive 80 us from the post's start - the 50 us post
    assert hw.bandwidth_Bps == float("inf")  # the post moved the bytes (send_post_fit)
    assert hw.allreduce_ns(2000, 2) == pytest.approx(300 * US, abs=2)
    # calibrate keeps the mean beside the median: the mean is what a run pays, so it is fitted
    mean = link_from_comm(SimHardware.ideal(), cm.comm,
                          [{"bytes": 1000, "workers": 2, "seconds": 2e-4, "mean_s": 5e-4},
                           {"bytes": 3000, "workers": 2, "seconds": 4e-4, "mean_s": 9e-4}], workers=2)
    assert mean.allreduce_ns(2000, 2) == pytest.approx(700 * US, abs=2)


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "stale", "pipedream", "dp", "pipe-sgd"])
def test_replay_recovers_the_simulated_costs(name: str) -> None:
    """Simulate with known gaps, communication CPU, latency and all-reduce time; read the
    timeline as a measurement; the replay's fitted costs reproduce the iteration time."""
    from stalesim.schedule import get_spec

    spec = get_spec(name)
    sched = build_schedule(ScheduleConfig(name, stages=1 if spec.data_parallel else 2, batches=24,
                                          microbatches=4 if spec.uses_micro else 1,
                                          workers=2 if spec.data_parallel else 1))
    S = sched.stages
    true = uniform_costs(S, 300 * US, 500 * US, 50 * US, loss_ns=20 * US, msg_bytes=10_000,
                         param_bytes=40_000, batch_size=32, action_batch=sched.action_batch_size(32))
    true = true.with_overheads(
        gap={"F": (20 * US,) * S, "B": (25 * US,) * S, "U": (7 * US,) * S, "LOSS": (5 * US,) * S,
             "SEND_F": (3 * US,) * S, "SEND_B": (3 * US,) * S, "RECV_F": (12 * US,) * S,
             "RECV_B": (14 * US,) * S, "AR": (4 * US,) * S, "ARW": (6 * US,) * S},
        comm={"SEND_F": (60 * US,) * S, "SEND_B": (70 * US,) * S, "RECV_F": (40 * US,) * S,
              "RECV_B": (45 * US,) * S, "AR": (30 * US,) * S, "ARW": (35 * US,) * S})
    hw = replace(SimHardware.ideal(), latency_ns=90 * US, allreduce_alpha_ns=400 * US,
                 allreduce_bandwidth_Bps=float("inf"))
    r = simulate(true, sched, hw)
    rows = _rows(r)
    guess = uniform_costs(S, 1, 1, msg_bytes=10_000, param_bytes=40_000, batch_size=32,
                          action_batch=true.action_batch)
    rc = replay_costs(guess, rows)
    hw2 = replay_link(SimHardware.ideal(), rc, rows)
    replay = simulate(rc, sched, hw2, SimOptions(keep_timeline=False)).iteration_time_s
    assert replay == pytest.approx(r.iteration_time_s, rel=0.02), name
    if not spec.data_parallel:
        d = message_delays(rows)
        assert any(o["blocked"] for o in d.values())
        for o in d.values():  # delay + completion = what a blocked receive measured (90 + c)
            c_true = 40e-6 if o["kind"] == "RECV_F" else 45e-6
            if o["blocked"]:
                assert o["latency_s"] + o["complete_s"] == pytest.approx(90e-6 + c_true, rel=1e-3)
            if o["ready"] and o["latency_s"] < 89e-6:  # ready receives that all still waited a
                assert o["complete_s"] > c_true  # little: the split is not identifiable
    else:
        ar = allreduce_times(rows)
        assert ar["blocked"] > 0


def test_hooks_only_where_an_update_falls_between_forward_and_backward() -> None:
    from stalesim.validate.costmodel import hooked_stages

    assert hooked_stages(build_schedule(ScheduleConfig("1f1b", stages=2, batches=8, microbatches=2))) \
        == [False, False]
    # the register pipeline: stage 0 updates while younger forwards wait; the last stage never
    stale = build_schedule(ScheduleConfig("stale", stages=2, batches=8))
    assert hooked_stages(stale) == [True, False]


TINY_GPT = "gpt-char:n_layer=1,n_embd=8,n_head=1,block_size=8"


@pytest.mark.parametrize("model", ["lenet5", TINY_GPT])
def test_co_runner_trains_every_zoo_kind(model: str) -> None:
    """The co-runner loop (run here in a thread) takes its steps on the model's own example
    batch: the char-GPT's token ids, not float images."""
    import threading

    import torch

    from stalesim.validate.corunners import _busy_loop

    old = torch.get_num_threads()
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=_busy_loop, args=(model, 2, 1, "cpu", stop, ready, 1), daemon=True)
    errors: list[BaseException] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        errors.append(args.exc_value)  # type: ignore[arg-type]

    prev, threading.excepthook = threading.excepthook, hook
    try:
        t.start()
        for _ in range(600):
            if ready.wait(0.1) or not t.is_alive():
                break
        stop.set()
        t.join(timeout=30)
    finally:
        threading.excepthook = prev
        torch.set_num_threads(old)
    assert not errors and ready.is_set()


def test_the_labels_ride_the_executors_carriers() -> None:
    """The cost model charges the labels message to the sends and receives the executor
    sends it with (label_carriers): one per batch and stage edge, not one per micro-batch."""
    from stalesim.schedule import Kind
    from stalesim.validate.costmodel import _forward_messages

    sched = build_schedule(ScheduleConfig("gpipe", stages=3, batches=5, microbatches=2))
    assert _forward_messages(sched, Kind.SEND_F) == ({0: 10, 1: 10}, {0: 5, 1: 5})
    assert _forward_messages(sched, Kind.RECV_F) == ({1: 10, 2: 10}, {1: 5, 2: 5})


def test_replay_costs_are_the_mean_spans_that_add_up_to_the_measured_time() -> None:
    from stalesim.validate.costmodel import replay_costs

    # one slow forward in four: the window's time is the sum of the spans, i.e. 4 x their mean
    spans = [0.010, 0.010, 0.010, 0.040]
    rows, t = [], 0.0
    for b, d in enumerate(spans):
        rows.append([f"0F{b}", "F", 0, b, None, 0, t, t + d])
        t += d
    base = uniform_costs(1, 1000 * US, 1000 * US, batch_size=32, action_batch=32)
    assert replay_costs(base, {"0": rows}, overheads=False).f_ns == (17_500 * US,)


def test_an_allreduce_overlapped_with_compute_is_not_taken_as_a_slow_collective() -> None:
    from stalesim.validate.costmodel import allreduce_times

    def rows(wait_after_s: float, wait_s: float) -> dict[str, list[list[object]]]:
        out: dict[str, list[list[object]]] = {"0": [], "1": []}
        for b in range(8):
            t = b * 0.2
            for r in out.values():
                r.append([f"AR{b}", "AR", 0, b, None, 0, t, t + 0.001])
                r.append([f"ARW{b}", "ARW", 0, b, None, 0, t + 0.001 + wait_after_s,
                          t + 0.001 + wait_after_s + wait_s])
        return out

    # dp: the wait follows the start and lasts the collective (5 ms)
    dp = allreduce_times(rows(0.0, 0.005))
    assert dp["blocked"] == 16 and all(abs(c - 0.005 + dp["complete_s"]) < 1e-9 for c in dp["collective_s"])
    # pipe-sgd: the wait comes a batch's compute later and returns at once: no collective time
    overlapped = allreduce_times(rows(0.18, 0.0005))
    assert overlapped["blocked"] == 0 and overlapped["collective_s"] == []


def test_replay_jitter_is_each_action_over_its_rank_kind_and_stage_mean() -> None:
    """The replay's spread: per compute kind, each action in the window over the mean of its
    (rank, kind, stage), so a rank steadily slower than the other adds no spread; a kind with
    too few actions keeps its mean."""
    from stalesim.validate.costmodel import MIN_JITTER_SAMPLES, replay_jitter

    rows: dict[str, list[list]] = {"0": [], "1": []}
    for rank, slow in (("0", 1.0), ("1", 2.0)):  # rank 1 steadily twice as slow
        t = 0.0
        for b in range(MIN_JITTER_SAMPLES):
            d = slow * (0.010 if b % 2 else 0.030)
            rows[rank].append([f"0F{b}", "F", 0, b, None, int(rank), t, t + d])
            rows[rank].append([f"0U{b}", "U", 0, b, None, int(rank), t + d, t + d + 0.001])
            t += d + 0.001
    rows["0"].append(["0LOSS0", "LOSS", 0, 0, None, 0, 0.5, 0.6])  # too few: no spread
    j = replay_jitter(rows)
    assert j is not None and sorted(j.ratios) == ["F", "U"]
    assert sorted(set(round(x, 9) for x in j.ratios["F"])) == [0.5, 1.5]
    assert j.ratios["U"] == pytest.approx([1.0] * 2 * MIN_JITTER_SAMPLES)
    assert replay_jitter(rows, (10.0, 11.0)) is None  # nothing inside the window


def test_one_preempted_action_does_not_refuse_the_replays_spread() -> None:
    """An action 30x its kind's mean (a time slice lost on an oversubscribed host: 3 ranks on
    2 cores measured a LOSS 24x its mean) is kept at the bound, not refused: the replay, and
    the validate run around it, go on."""
    from stalesim.sim.jitter import MAX_RATIO
    from stalesim.validate.costmodel import MIN_JITTER_SAMPLES, replay_jitter

    n = 40 + MIN_JITTER_SAMPLES
    rows = {"0": [[f"0F{b}", "F", 0, b, None, 0, b * 0.1, b * 0.1 + (0.5 if b == 0 else 0.001)]
                  for b in range(n)]}
    j = replay_jitter(rows)
    assert j is not None
    j.check()  # within the bounds: no error
    mean = (0.5 + (n - 1) * 0.001) / n
    assert max(j.ratios["F"]) == MAX_RATIO < 0.5 / mean
    assert min(j.ratios["F"]) == pytest.approx(0.001 / mean)
