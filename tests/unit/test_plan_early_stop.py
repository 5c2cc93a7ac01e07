"""The early-stop rule (stalesim.plan.early_stop) on values, and converge() stopping the
candidate it names while the others go on."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stalesim.plan.convergence import CANNOT_WIN, Convergence, EmulationStore, Target, converge
from stalesim.plan.early_stop import best_upper_s, cannot_win, least_iterations
from stalesim.plan.timing import Timing
from stalesim.runtime.config import TrainConfig

E = 0.10


def _timing(steady: float, overhead: float = 0.05) -> Timing:
    return Timing(first_batches=0, first_s=0.0, steady_s=steady, overhead_s=overhead, peak_memory_bytes=(1,))


def test_least_iterations_counts_one_more_for_seeds_not_there() -> None:
    assert least_iterations(Convergence([None, None, None], 100, "not reached")) == 101
    assert least_iterations(Convergence([80, None], 100, "not reached")) == pytest.approx(90.5)
    assert least_iterations(Convergence([], 100, "no result")) == math.inf


def test_best_upper_is_the_reached_candidates_interval_top() -> None:
    r = Convergence([60, 62, 64], 100, "reached")
    convs = {"r": r, "slow": Convergence([None], 100, "not reached")}
    timings = {"r": _timing(0.01), "slow": _timing(0.01)}
    # seeds 60, 62, 64: t(0.975, 2) 2 / sqrt(3) = 4.97 each side, clipped to the seeds' 64
    assert best_upper_s(convs, timings, ["r", "slow"], E) == pytest.approx((0.05 + 64 * 0.01) * 1.1)
    # batched crossings widened by the confirmation's margin: max(2 x 20, 60 / 4) = 40
    assert best_upper_s(convs, timings, ["r"], E, smooth=20, batched=True) == pytest.approx((0.05 + 1.04) * 1.1)
    assert best_upper_s(convs, timings, ["slow"], E) == math.inf  # r infeasible: not a bound
    assert best_upper_s(convs, {"r": None}, ["r"], E) == math.inf  # not simulated: not a bound


def test_cannot_win_compares_the_best_possible_time_with_the_bound() -> None:
    best = (0.05 + 64 * 0.01) * 1.1  # 0.759 s
    stuck = Convergence([None, None, None], 100, "not reached")
    why = cannot_win(stuck, _timing(0.01), best, E)  # (0.05 + 101 x 0.01) x 0.9 = 0.954 s
    assert why == ("stopped at 100 iterations: even at 101 iterations it would take at least 0.954 s, "
                   "more than the 0.759 s a reached candidate takes at most")
    assert cannot_win(Convergence([None], 50, "not reached"), _timing(0.01), best, E) == ""  # 0.504 s
    # a faster iteration makes 101 iterations cheap enough to still win: 0.05 + 101 x 0.007 -> 0.681 s
    assert cannot_win(stuck, _timing(0.007), best, E) == ""
    assert cannot_win(stuck, None, best, E) == ""  # not simulated: the rule says nothing
    assert cannot_win(stuck, _timing(0.01), math.inf, E) == ""  # nothing reached yet


def test_converge_stops_the_candidate_that_cannot_win(tmp_path: Path) -> None:
    # "fast" crosses 1.005 at iteration 40 of its first horizon (50); "slow" falls steadily but
    # would need 255 (its trend: within the 800 allowed): the rule stops it after 50
    # instead of running 100, 200 and 400
    falls = {"fast": 40.0, "slow": 256.0}
    cfgs = {name: TrainConfig(model="lenet5", dataset="synthetic", schedule="sequential", seed=k)
            for k, name in enumerate(falls)}
    ran: list[int] = []

    def configs(c: str, h: int) -> list[TrainConfig]:
        return [TrainConfig.from_dict({**cfgs[c].to_dict(), "iterations": h})]

    def run(todo: list[tuple[str, TrainConfig]]) -> list[dict]:
        out = []
        for rid, cfg in todo:
            n = int(cfg.iterations or 0)
            ran.append(n)
            speed = falls["fast" if cfg.seed == 0 else "slow"]
            out.append({"run_id": rid, "iterations": n, "losses": [2.0 - (i + 1) / speed for i in range(n)]})
        return out

    timings = {"fast": _timing(0.01), "slow": _timing(0.01)}

    def stop(so_far: dict[str, Convergence]) -> dict[str, str]:
        best = best_upper_s(so_far, timings, list(timings), E)
        return {c: cannot_win(v, timings[c], best, E) for c, v in so_far.items()}

    target = Target("loss", 1.005, smooth=1)  # losses 1.025 at 39, 1.0 at 40 (fast)
    got = converge(list(falls), configs, EmulationStore(tmp_path), run, target, 50, 800,
                   max_iterations=lambda h: h, log=lambda _: None, stop=stop)
    assert got["fast"].status == "reached" and got["fast"].per_seed == [40]
    assert got["slow"].status == CANNOT_WIN and got["slow"].interval is None
    assert got["slow"].note.startswith("stopped at 50 iterations: even at 51 iterations")
    assert ran == [50, 50]
    # without the rule the slow candidate runs every horizon until it reaches at 255
    ran.clear()
    free = converge(list(falls), configs, EmulationStore(tmp_path / "free"), run, target, 50, 800,
                    max_iterations=lambda h: h, log=lambda _: None)
    assert free["slow"].per_seed == [255] and ran == [50, 50, 100, 200, 400]
