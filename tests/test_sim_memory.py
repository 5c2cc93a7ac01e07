"""Memory model: bytes per device from the liveness counts and the stage costs."""

from stalesim.schedule import ScheduleConfig, build_schedule
from stalesim.sim.memory import memory_report
from stalesim.sim.model import uniform_costs

S = 4


def test_bytes_per_component():
    sched = build_schedule(ScheduleConfig("pipedream", stages=S, batches=12))
    c = uniform_costs(S, 1, 1, param_bytes=100, saved_bytes=10, msg_bytes=7)
    rep = memory_report(sched, c, optimizer_state_factor=2.0)
    b0 = rep.breakdown[0]
    assert b0 == {"weights": 400, "gradients": 100, "optimizer": 200, "activations": 40,
                  "deferred_w": 0, "comm_buffers": 14}
    assert rep.peak_bytes[0] == sum(b0.values())
    mid = rep.breakdown[1]
    assert mid["comm_buffers"] == 4 * 7  # activation in/out, gradient in/out


def test_folded_device_sums_its_stages():
    sched = build_schedule(ScheduleConfig("gpipe", stages=4, batches=4, microbatches=2, fold=2))
    c = uniform_costs(4, 1, 1, param_bytes=100)
    rep = memory_report(sched, c)
    assert len(rep.peak_bytes) == 2
    assert rep.breakdown[0]["weights"] == 200
