"""The fidelity campaign's scope: iterations per run and the duration estimate (pure arithmetic)."""

from benchmarks.fidelity_scope import RUN_OVERHEAD_S, TWO_RANK_FACTOR, VALIDATE_FIXED_S, ValidatePlan, iterations_for


def test_iterations_give_the_target_window_within_bounds():
    # 0.1 s per 1-rank step -> 0.075 s per 2-rank iteration -> 3 s needs 40
    assert iterations_for(0.1, target_s=3.0) == 40
    assert iterations_for(1.0, target_s=3.0) == 12  # ResNet-20 B=128: the floor
    assert iterations_for(0.001, target_s=3.0) == 200  # LeNet-5: the ceiling
    assert iterations_for(0.0) == 200


def test_estimate_counts_runs_repeats_profile_and_fixed_costs():
    p = ValidatePlan("x", step_s=0.5, micro_step_s=0.1, schedules=10, iterations=12, repeats=5,
                     profile_repeats=5, calibrates=False)
    runs = 5 * (10 * (12 * 0.5 * TWO_RANK_FACTOR + RUN_OVERHEAD_S) + 12 * 0.5 + RUN_OVERHEAD_S)
    emulate = 11 * 2 * 0.5
    assert abs(p.estimate_s() - (runs + emulate + VALIDATE_FIXED_S)) < 1e-9
    q = ValidatePlan("x", 0.5, 0.1, 10, 12, 5, 5, calibrates=True)
    assert q.estimate_s() > p.estimate_s()
