"""What you simulate is what you emulate is what you run: for every schedule and every
flag that applies to it (synchronous warm-up, hybrid switch, folding, data-parallel
workers, micro-batches) the simulator, the emulator and the executor obtain the same
:class:`Schedule` from the same config (equal fingerprints of the action lists), and the
executor's losses equal the emulator's, folded stages included."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _equivalence import micro_for

from stalesim.emulator.replay import Emulator
from stalesim.executor import make_job, run_local
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import build_schedule, get_spec, schedule_names
from stalesim.sim import SimOptions, simulate
from stalesim.workloads.profile import uniform_profile

N = 6


def _configs() -> list[TrainConfig]:
    """Every schedule on 2 ranks, with each flag combination that applies to it."""
    out = []
    for name in schedule_names():
        spec = get_spec(name)
        base = dict(model="lenet5", dataset="synthetic", schedule=name, iterations=N, batch_size=24,
                    synthetic_size=96, lr=0.05)
        if spec.data_parallel:
            shapes = [dict(stages=1, workers=2), dict(stages=2, workers=2)]
        else:
            # S = 2V on 2 ranks, and S = 3V (3 devices) folded onto 2 ranks
            V = spec.stages_per_device
            shapes = [dict(stages=2 * V, microbatches=micro_for(name, 2 * V, 2)),
                      dict(stages=3 * V, microbatches=micro_for(name, 3 * V, 2), fold=2)]
            if 3 * V > 5:  # more stages than LeNet-5's blocks: an 8-block ResNet
                shapes[1].update(model="resnet14", batch_size=12, synthetic_size=48)
                shapes[1]["microbatches"] = micro_for(name, 3 * V, 2, batch_size=12)
        for shape in shapes:
            out.append(TrainConfig(**{**base, **shape}))
        extra = dict(base, **shapes[0])
        out.append(TrainConfig(**dict(extra, warmup=2)))
        if spec.switches:
            out.append(TrainConfig(**dict(extra, switch=4)))
            out.append(TrainConfig(**dict(extra, switch=4, warmup=1)))
    return [c.check() for c in out]


CONFIGS = _configs()


def _what(c: TrainConfig) -> str:
    return (f"{c.schedule} S={c.num_stages} M={c.microbatches} P={c.workers} fold={c.fold} "
            f"warmup={c.warmup} switch={c.switch}")


@pytest.fixture(scope="module")
def executed() -> list[dict]:
    jobs = [make_job(c, deterministic=True, label=_what(c), evaluate=False) for c in CONFIGS]
    return run_local(jobs, "cpu:2", timeout_s=60)


def test_every_flag_combination_is_covered() -> None:
    seen = {(c.schedule, c.fold is not None, c.warmup > 0, c.switch is not None) for c in CONFIGS}
    for name in schedule_names():
        spec = get_spec(name)
        assert (name, False, True, False) in seen  # warm-up
        assert (name, not spec.data_parallel, False, False) in seen  # folded (pipelines)
        if spec.switches:
            assert (name, False, True, True) in seen


def test_simulated_emulated_and_executed_schedules_are_identical(executed) -> None:
    prof = uniform_profile(8, 1e-3, 2e-3, 24, output_bytes=4096, param_bytes=4096)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for cfg, res in zip(CONFIGS, executed):
        what = _what(cfg)
        want = build_schedule(cfg.schedule_config(N))
        sim = simulate(prof, cfg.schedule_config(N), options=SimOptions(keep_timeline=False))
        emu = Emulator(cfg, progress=False)
        summary = emu.run()
        assert sim.schedule_fingerprint == want.fingerprint(), what
        assert summary["schedule_fingerprint"] == want.fingerprint(), what
        assert res["schedule_fingerprint"] == want.fingerprint(), what
        assert res["devices"] == want.num_devices == 2, what
        assert res["versions_match_ir"] and summary["versions_match_ir"], what
        for t, (a, b) in enumerate(zip(res["losses"], summary["losses"], strict=True)):
            assert abs(a - b) <= 1e-6 * abs(b), f"{what}: step {t}: executor {a!r} emulator {b!r}"
