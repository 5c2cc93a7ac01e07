"""The message-stall experiment's bookkeeping (experiments/bench_stalls.py): stall counts
from matched send/receive rows, and the summary table."""

from __future__ import annotations

import pytest

from experiments.bench_stalls import stalls, summarize


def _rows(delays_ms: list[float]) -> dict[str, list[list]]:
    """Rank 0 posts SEND_F of micro m at m*10 ms (0.1 ms post); rank 1 waits from m*10 ms and
    gets it ``delays_ms[m]`` after the post ended."""
    r0, r1 = [], []
    for m, d in enumerate(delays_ms):
        t = m * 0.010
        r0.append([f"0SEND_F0.{m}", "SEND_F", 0, 0, m, 0, t, t + 1e-4])
        r1.append([f"1RECV_F0.{m}", "RECV_F", 1, 0, m, 0, t, t + 1e-4 + d / 1e3])
    return {"0": r0, "1": r1}


def test_stalls_counts_receives_that_waited_past_the_threshold() -> None:
    s = stalls(_rows([0.1, 0.2, 2.5, 0.1, 4.5]), (0.0, 0.05), iteration_s=0.025, stall_s=1e-3)
    assert s["receives"] == 5 and s["blocked"] == 5 and s["stalled"] == 2
    assert s["stall_rate"] == pytest.approx(0.4)
    assert s["mean_stall_ms"] == pytest.approx(3.5)
    assert s["stall_ms_per_iteration"] == pytest.approx(7.0 / 2)  # two iterations in the window
    assert s["median_delay_ms"] == pytest.approx(0.2)


def test_summarize_gives_median_and_range_per_condition() -> None:
    rows = [{"schedule": "1f1b", "condition": c, "iteration_time_ms": t, "stall_rate": r,
             "stall_ms_per_iteration": 1.0, "mean_stall_ms": 2.0, "other_wait_ms_per_receive": 0.1,
             "main_wait_ms_per_receive": 0.2}
            for c, t, r in (("base", 10.0, 0.1), ("base", 12.0, 0.3), ("base", 11.0, 0.2), ("spin", 9.0, 0.0))]
    table = summarize(rows)
    assert table[2] == ("| 1f1b | base | 11.0 (10.0-12.0) | 20.0% (10.0%-30.0%) | 1.00 (1.00-1.00) | "
                        "2.00 (2.00-2.00) | 0.100 (0.100-0.100) | 0.200 (0.200-0.200) |")
    assert table[3].startswith("| 1f1b | spin | 9.0 (9.0-9.0) | 0.0%")
