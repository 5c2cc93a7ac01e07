"""The busy-machine warning of ``validate``: the pure decision, and where it is shown."""

from __future__ import annotations

import pytest

from stalesim.validate.busy import (
    QUIET_LOAD,
    CpuSample,
    background_load,
    busy_warning,
    cores_used,
    cpu_sample,
    other_work_cores,
)


def test_cores_used_counts_threads_on_cpu_ranks_only() -> None:
    assert cores_used(2, 1, "cpu") == 2
    assert cores_used(4, 2, "cpu") == 8
    assert cores_used(4, 2, "cuda") == 4  # one host thread per GPU rank


def test_background_load_is_the_larger_of_before_and_after_minus_own() -> None:
    assert background_load([0.3, 0.2, 0.1], [2.9, 1.0, 0.5], used=2) == pytest.approx(0.9)
    assert background_load([1.5, 1.0, 0.5], [2.1, 1.0, 0.5], used=2) == pytest.approx(1.5)
    assert background_load([0.1], [1.2], used=2) == pytest.approx(0.1)
    assert background_load(None, [1.0], used=2) == 0.0  # never negative
    assert background_load(None, None, used=2) is None


def test_other_work_is_the_machines_busy_time_minus_our_own() -> None:
    a = CpuSample(wall_s=100.0, machine_busy_s=1000.0, own_s=50.0)
    # 10 s of run: the machine was busy 25 core-seconds, 18 of them ours -> 0.7 cores of others
    assert other_work_cores(a, CpuSample(110.0, 1025.0, 68.0)) == pytest.approx(0.7)
    assert other_work_cores(a, CpuSample(110.0, 1010.0, 70.0)) == 0.0  # rounding: never negative
    assert other_work_cores(a, None) is None and other_work_cores(None, a) is None
    assert other_work_cores(a, a) is None  # no time passed


def test_cpu_sample_reads_proc_stat(tmp_path) -> None:
    import os

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 5000 40 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    s = cpu_sample(str(stat))
    assert s is not None
    hz = os.sysconf("SC_CLK_TCK")
    assert s.machine_busy_s == pytest.approx((100 + 20 + 30 + 5 + 6 + 7) / hz)  # idle and iowait left out
    assert s.own_s >= 0 and s.wall_s > 0
    (tmp_path / "bad").write_text("intr 1 2 3\n")
    assert cpu_sample(str(tmp_path / "bad")) is None
    assert cpu_sample(str(tmp_path / "missing")) is None


def test_own_work_is_not_other_work() -> None:
    """Busy work in this process (what demo's earlier steps are) does not count as others'."""
    import time

    before = cpu_sample()
    if before is None:
        pytest.skip("no /proc/stat")
    # spin until this process has used 0.3 s of CPU (not 0.3 s of wall time: on a loaded machine
    # the spin gets only part of a core, and the test is about whose CPU time it is)
    start, give_up = time.process_time(), time.perf_counter() + 30
    while time.process_time() - start < 0.3 and time.perf_counter() < give_up:
        pass
    after = cpu_sample()
    assert after is not None
    # the spin is in our own time, so it is subtracted from the machine's (whatever else runs)
    assert after.own_s - before.own_s >= 0.2
    assert after.machine_busy_s - before.machine_busy_s >= 0.2


def test_running_descendants_count_as_own_work(tmp_path) -> None:
    """A child's child that is still running (a fork server's co-runner) is this process's work,
    with what the running ones waited for; other processes' are not."""
    from stalesim.validate.busy import _live_descendants_ticks

    def proc(pid: int, ppid: int, utime: int, stime: int, cutime: int, cstime: int) -> None:
        (tmp_path / str(pid)).mkdir()
        fields = ["S", ppid] + [0] * 9 + [utime, stime, cutime, cstime] + [0] * 5
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) " + " ".join(map(str, fields)))

    proc(10, 1, 5, 5, 0, 0)  # us
    proc(11, 10, 1, 1, 30, 10)  # the fork server: little of its own, its finished children's 40
    proc(12, 11, 100, 20, 0, 0)  # a running co-runner
    proc(13, 1, 999, 999, 0, 0)  # another user's work
    (tmp_path / "self").mkdir()
    assert _live_descendants_ticks(10, str(tmp_path)) == 2 + 40 + 120
    assert _live_descendants_ticks(12, str(tmp_path)) == 0


def test_the_warning_names_its_measure() -> None:
    w = busy_warning(1.7, 2, 2, None, None, measure="CPU use (cores busy on average during the run)")
    assert w is not None and "other work's CPU use (cores busy on average during the run) 1.70" in w


def test_quiet_machine_no_warning() -> None:
    # 2 cores, both used by the ranks, other work 0.3 (< QUIET_LOAD): quiet
    assert busy_warning(0.3, 2, 2, noise_floor=0.01, error=0.05) is None
    # 8 cores, 2 used: up to 6 + QUIET_LOAD of other work still leaves the ranks theirs
    assert busy_warning(6.5, 8, 2, noise_floor=None, error=0.05) is None


def test_load_above_the_free_cores_warns_with_the_numbers() -> None:
    w = busy_warning(1.7, 2, 2, noise_floor=None, error=0.05)
    assert w is not None and w.startswith("machine busy")
    assert "1.70" in w and "0 core(s)" in w and "2 cores, 2 used" in w
    w8 = busy_warning(6.0 + QUIET_LOAD + 0.01, 8, 2, noise_floor=None, error=None)
    assert w8 is not None and "6 core(s)" in w8
    # more ranks than cores: nothing is free, so any real load counts
    assert busy_warning(QUIET_LOAD + 0.1, 2, 4, None, None) is not None


def test_noise_floor_above_the_error_warns() -> None:
    w = busy_warning(0.0, 2, 2, noise_floor=0.12, error=-0.05)
    assert w is not None and "noise floor 12.0%" in w and "|time error| 5.0%" in w
    assert not w.startswith("machine busy")
    assert busy_warning(0.0, 2, 2, noise_floor=0.04, error=-0.05) is None
    # both reasons at once, in one line
    both = busy_warning(3.0, 2, 2, noise_floor=0.2, error=0.1)
    assert both is not None and both.startswith("machine busy") and "; noise floor" in both
    assert "\n" not in both


def test_unknowns_raise_no_warning() -> None:
    assert busy_warning(None, 2, 2, None, None) is None
    assert busy_warning(5.0, None, 2, None, 0.1) is None
    assert busy_warning(0.0, 2, 2, 0.5, None) is None
    assert busy_warning(float("nan"), 2, 2, float("nan"), 0.1) is None


def _summary(warning: str | None) -> dict:
    row = {"schedule": "1f1b", "predicted_iteration_time_s": 0.01, "measured_iteration_time_s": 0.012,
           "noise_floor": None, "time_error": -0.17, "replay_time_error": None,
           "predicted_utilization_mean": 0.5, "measured_utilization_mean": 0.4,
           "predicted_speedup": 1.2, "measured_speedup": 1.1, "memory_error": 0.0, "max_loss_rel_diff": 0.0}
    return {"config": {"model": "lenet5", "repeats": 1, "batch_size": 8, "microbatches": 2,
                       "iterations": 8, "dataset": "synthetic", "seed": 0, "threads": 1},
            "devices": "cpu:2", "rows": [row], "median_abs_time_error": 0.17,
            "load_average": {"before": [1.9, 1.0, 0.5], "after": [2.5, 1.2, 0.6]},
            "busy": {"warning": warning}}


def test_summary_line_and_report_show_the_warning() -> None:
    from stalesim.cli.validate_cmd import summary_table
    from stalesim.validate.report import render_report

    w = busy_warning(1.9, 2, 2, None, 0.17)
    assert w is not None
    last = summary_table(_summary(w)).splitlines()[-1]
    assert last.endswith(f"; warning: {w}")
    report = render_report(_summary(w))
    assert f"> **warning: {w}**" in report.splitlines()[:4]
    quiet = _summary(None)
    assert "warning" not in summary_table(quiet) and "warning" not in render_report(quiet)
