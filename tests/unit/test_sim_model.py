"""Resolved hardware and stage costs."""

import math

import pytest

from stalesim.errors import StalesimError
from stalesim.sim.model import SimHardware, resolve_cuts, stage_costs, to_ns
from stalesim.workloads.hardware import hardware_from_catalog
from stalesim.workloads.profile import uniform_profile


def test_from_hardware_matches_workloads_formulas():
    for algo in ("ring", "tree"):
        hwc = hardware_from_catalog("a100-80gb-sxm", "100gbe", allreduce_algorithm=algo)
        hw = SimHardware.from_hardware(hwc)
        for n, p in [(1e6, 2), (3e7, 4), (5e8, 8)]:
            assert hw.allreduce_ns(n, p) == pytest.approx(hwc.allreduce_time(n, p) * 1e9, abs=2)
        assert hw.p2p_ns(1e6) == pytest.approx(hwc.p2p_time(1e6) * 1e9, abs=2)
    cpu = SimHardware.from_hardware(hardware_from_catalog("cpu-core", "gloo-loopback"))
    assert not cpu.comm_overlaps_compute and cpu.cpu_ns(1000) == round(cpu.cpu_comm_occupancy * 1000)


def test_ideal_link_costs_nothing():
    hw = SimHardware.ideal()
    assert hw.is_ideal and hw.p2p_ns(1e12) == 0 and hw.allreduce_ns(1e12, 8) == 0


def test_bad_hardware_fields():
    with pytest.raises(StalesimError, match="topology"):
        SimHardware(device="x", link="l", topology="mesh")
    with pytest.raises(StalesimError, match="bandwidth"):
        SimHardware(device="x", link="l", bandwidth_Bps=0.0)
    with pytest.raises(StalesimError, match="cpu_comm_occupancy"):
        SimHardware(device="x", link="l", cpu_comm_occupancy=2.0)


def test_stage_costs_sum_layers_and_scale_batch():
    prof = uniform_profile(6, 1e-3, 2e-3, 128, update_s=1e-4, output_bytes=1280, saved_bytes=640,
                           param_bytes=10)
    cuts, ppv = resolve_cuts(prof, 3, None, 128)
    assert cuts == [2, 4] and ppv == [2, 4]
    c = stage_costs(prof, cuts, batch_size=128, action_batch=32)
    assert c.f_ns == (to_ns(0.5e-3),) * 3 and c.b_ns == (to_ns(1e-3),) * 3
    assert c.u_ns == (to_ns(2e-4),) * 3  # update does not scale with the batch
    assert c.msg_bytes == (320,) * 3 and c.saved_bytes == (320,) * 3 and c.param_bytes == (20,) * 3
    assert c.seq_ns == to_ns(6 * 3e-3 + 6e-4)


def test_resolve_cuts_errors():
    prof = uniform_profile(4, 1e-3, 2e-3, 8)
    with pytest.raises(StalesimError, match="stages"):
        resolve_cuts(prof, 5, None, 8)
    with pytest.raises(StalesimError, match=r"ppv\[0\]"):
        resolve_cuts(prof, None, [4], 8)
    with pytest.raises(StalesimError, match="ppv"):
        resolve_cuts(prof, 3, [1], 8)
    assert resolve_cuts(prof, 1, None, 8) == ([], [])
    assert math.isinf(SimHardware.ideal().bandwidth_Bps)


@pytest.mark.parametrize("table", [{"RECV_F": (0, -1)}, {"RECV_B": (5,)}])
def test_a_bad_arrival_table_is_refused_naming_the_field(table):
    from stalesim.sim.model import uniform_costs

    with pytest.raises(StalesimError, match=rf"arrival_ns\[{next(iter(table))}\]: expected 2 values >= 0"):
        uniform_costs(2, 1000, 2000).with_overheads(arrival=table)
