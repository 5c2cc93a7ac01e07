"""torch.distributed.pipelining interop: for every schedule both libraries have, the
per-rank compute order torch's own class builds equals ours (modulo naming); our
exports load into torch's runtime class (its validator checks them); the simulated
timings of both orders side by side under an ideal link.

Where torch differs: ``Schedule1F1B._get_pipeline_order`` (torch 2.14.1) numbers the
last rank's forwards 1..M instead of 0..M-1 (its ``num_forward`` is 0 there and the
counter is incremented before the first forward), so the static order it reports is
not a valid schedule; its runtime (``_step_microbatches``: warm-up of min(M, S - s)
forwards, then backward/forward pairs) runs exactly our 1F1B. The import refuses the
reported order with a one-line error; the test checks the other ranks are ours and the
last rank is ours shifted by one.
"""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("torch")

from stalesim.errors import ScheduleError
from stalesim.schedule import Kind, ScheduleConfig, build_schedule
from stalesim.schedule.torch_interop import (
    compute_orders,
    from_torch,
    read_torch_csv,
    schedule_from_orders,
    to_torch_csv,
    torch_orders,
)
from stalesim.sim import SimOptions, simulate
from stalesim.sim.model import SimHardware, uniform_costs

# (ours, torch class, ranks, stages per rank, micro-batches)
COMMON = [
    ("gpipe", "GPipe", 4, 1, 4),
    ("gpipe", "GPipe", 3, 1, 7),
    ("interleaved-1f1b", "Interleaved1F1B", 4, 2, 8),
    ("interleaved-1f1b", "Interleaved1F1B", 4, 2, 4),
    ("interleaved-1f1b", "Interleaved1F1B", 4, 3, 12),
    ("interleaved-1f1b", "Interleaved1F1B", 4, 2, 6),  # torch's flexible rounds: 6 % 1 == 0
    ("interleaved-1f1b", "Interleaved1F1B", 2, 1, 3),
    ("looped-bfs", "LoopedBFS", 4, 2, 4),
    ("looped-bfs", "LoopedBFS", 2, 3, 5),
    ("zb-h1", "InterleavedZeroBubble", 4, 1, 8),  # ZB-H1
    ("zb-h1", "InterleavedZeroBubble", 4, 2, 8),  # interleaved zero bubble
    ("zb-h1", "InterleavedZeroBubble", 3, 2, 6),
    ("zb-v", "ZBVZeroBubble", 4, 2, 8),
    ("zb-v", "ZBVZeroBubble", 4, 2, 4),  # fewer than 2R - 1: the order restricted
    ("zb-v", "ZBVZeroBubble", 3, 2, 9),
    ("dualpipev", "DualPipeV", 4, 2, 8),
    ("dualpipev", "DualPipeV", 4, 2, 10),
    ("dualpipev", "DualPipeV", 3, 2, 7),
]


def ours(name, R, V, M, batches=1):
    return build_schedule(ScheduleConfig(name, stages=R * V, batches=batches, microbatches=M,
                                         stages_per_device=V))


@pytest.mark.parametrize("name, cls, R, V, M", COMMON)
def test_torch_orders_equal_ours(name, cls, R, V, M):
    theirs = from_torch(cls, R, M, V, batches=2)
    mine = ours(name, R, V, M, batches=2)
    assert compute_orders(theirs) == compute_orders(mine)
    assert theirs.placement == mine.placement
    # and both lower to the same sends and receives, hence the same fingerprint but for the name
    assert [[str(a) for a in acts] for acts in theirs.device_actions] == \
        [[str(a) for a in acts] for acts in mine.device_actions]


@pytest.mark.parametrize("name, cls, R, V, M", COMMON[::3])
def test_simulated_timings_side_by_side(name, cls, R, V, M):
    """Ideal link, F = 1, I = W = 1 (B = 2): torch's order and ours take the same time."""
    costs = uniform_costs(R * V, 1000, 2000, bi_ns=1000, bw_ns=1000, batch_size=M)
    hw = SimHardware.ideal()
    t_theirs = simulate(costs, from_torch(cls, R, M, V, batches=8), hw, SimOptions()).iteration_time_s
    t_ours = simulate(costs, ours(name, R, V, M, batches=8), hw, SimOptions()).iteration_time_s
    assert t_theirs == t_ours > 0


def test_torch_1f1b_reported_order_is_off_by_one_on_the_last_rank():
    R, M = 4, 8
    with pytest.raises(ScheduleError, match=r"reports 3F8 on rank 3, outside micro-batches 0..7"):
        from_torch("1F1B", R, M)
    from torch.distributed.pipelining.schedules import Schedule1F1B

    from stalesim.schedule.torch_interop import _flatten, _StandInStage

    raw = Schedule1F1B(_StandInStage(0, R, R, 0), M)._get_pipeline_order()
    mine = compute_orders(ours("1f1b", R, 1, M))
    for r in range(R):
        got = [(k, s, m) for k, s, m in _flatten(raw[r])]
        want = [(k, s, m) for k, s, _t, m in mine[r]]
        if r < R - 1:
            assert got == want
        else:  # torch's forwards are numbered one too high there
            assert got == [(k, s, m + 1 if k is Kind.F else m) for k, s, m in want]


@pytest.mark.parametrize("name, R, V, M", [("zb-v", 4, 2, 8), ("dualpipev", 3, 2, 6),
                                           ("interleaved-1f1b", 4, 2, 8), ("zb-h2", 4, 1, 8),
                                           ("1f1b", 4, 1, 3), ("gpipe", 2, 1, 2),
                                           ("looped-bfs", 2, 2, 4)])
def test_exports_load_into_torchs_runtime_and_round_trip(tmp_path, name, R, V, M):
    """Our CSV passes torch's own validator and lowering (``_load_csv``), and reading
    it back gives our order."""
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from stalesim.schedule.torch_interop import _StandInStage

    sched = ours(name, R, V, M)
    path = to_torch_csv(sched, tmp_path / f"{name}.csv")
    own = [s for s in range(R * V) if sched.device_of(s) == 0]
    runtime = _PipelineScheduleRuntime([_StandInStage(s, R * V, R, 0) for s in own], M)
    runtime._load_csv(str(path))  # raises if torch finds the order invalid
    assert len(runtime.pipeline_order_with_comms) == R
    back = schedule_from_orders(read_torch_csv(path), batches=1)
    assert compute_orders(back) == compute_orders(sched)


def test_import_and_export_errors():
    with pytest.raises(ScheduleError, match="unknown torch schedule 'Nope'"):
        from_torch("Nope", 2, 4)
    with pytest.raises(ScheduleError, match="rejects ranks=4 microbatches=4"):
        torch_orders("DualPipeV", 4, 4)  # torch: at least as many micro-batches as stages
    with pytest.raises(ScheduleError, match="asynchronous"):
        to_torch_csv(build_schedule(ScheduleConfig("pipedream", stages=3, batches=4)), "x.csv")
    with pytest.raises(ScheduleError, match="not a pipeline with one loss"):
        to_torch_csv(build_schedule(ScheduleConfig("local", stages=3, batches=4)), "x.csv")


def test_reading_a_bad_csv(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("0F0,0Q1\n")
    with pytest.raises(ScheduleError, match=re.escape("row 1 (rank 0) column 1: cannot read '0Q1'")):
        read_torch_csv(p)
    p.write_text("0F0,0B0\n1F0\n")  # stage 1 never runs a backward
    with pytest.raises(ScheduleError, match="missing"):
        schedule_from_orders(read_torch_csv(p))


@pytest.mark.parametrize("cell", ["0F0junk", "1F0;2B0", "0F0 0B0", "F0", "0F", "(0F0;1B0)", "0F0)", "x"])
def test_a_cell_is_one_action_or_an_error(tmp_path, cell):
    p = tmp_path / "junk.csv"
    p.write_text(f"0F0,0B0\n1F0,{cell},1B0\n")
    if cell == "0F":  # the form of an action without micro-batch (0UNSHARD): read, then refused
        with pytest.raises(ScheduleError, match="needs a micro-batch index"):
            read_torch_csv(p)
        return
    with pytest.raises(ScheduleError, match=re.escape(f"row 2 (rank 1) column 1: cannot read {cell!r}")):
        read_torch_csv(p)


def test_strict_cells_still_read_what_torch_writes(tmp_path):
    p = tmp_path / "ok.csv"
    p.write_text("0F0, 0UNSHARD ,,(0F1;0B0)OVERLAP_F_B,0B1\n")
    assert read_torch_csv(p) == {0: [(Kind.F, 0, 0), (Kind.F, 0, 1), (Kind.B, 0, 0), (Kind.B, 0, 1)]}


def test_an_empty_csv_name_is_an_error(tmp_path):
    with pytest.raises(ScheduleError, match="--to-torch-csv: empty file name"):
        to_torch_csv(build_schedule(ScheduleConfig("1f1b", stages=2, microbatches=2, batches=1)), "")


@pytest.mark.parametrize("name", ["PipelineScheduleSingle", "PipelineScheduleMulti"])
def test_an_abstract_torch_class_is_one_line(name):
    with pytest.raises(ScheduleError, match=f"{name} is an abstract base class"):
        from_torch(name, 2, 4)


def test_cli_interop_errors_are_one_line(capsys, tmp_path):
    from stalesim.cli import main

    for argv, needle in ([["schedule", "1f1b", "-S", "2", "-M", "2", "--to-torch-csv", ""], "empty file name"],
                         [["schedule", "--from-torch", "PipelineScheduleMulti", "--ranks", "2", "-M", "2"],
                          "abstract base class"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("stalesim: error: ") and needle in err[0]
    assert os.listdir(tmp_path) == []
