"""``plan`` reproducible to the digit: the same command in fresh folders gives the same
iterations per seed (and the same losses), and a ``--batched`` plan's crossings are the
single emulations' (the ones the executor reproduces), confirmed by
:mod:`stalesim.plan.confirm`."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from stalesim.cli import main
from stalesim.emulator.replay import Emulator
from stalesim.plan.confirm import confirm, confirm_margin
from stalesim.plan.convergence import Convergence, EmulationStore, Target, iterations_to_loss, run_id
from stalesim.runtime.build import model_of
from stalesim.runtime.config import TrainConfig
from stalesim.workloads.profile import uniform_profile

# LeNet-5 on synthetic data: its loss falls slowly and noisily, so a target of 2.26 (mean of 4)
# is crossed mid-run (iterations 20 and 27 for seeds 0 and 1 at the time of writing)
FLAGS = ["--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "128", "--batch-size", "16",
         "--lr", "0.05", "--devices", "2", "--schedules", "stale,pipedream", "--mitigations", "none",
         "--warmups", "0", "--seeds", "0,1", "--target-loss", "2.26", "--smooth", "4", "--iterations", "40",
         "--max-horizon", "40", "--jobs", "2", "--json", "--quiet"]


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> str:
    blocks = len(model_of("lenet5", "synthetic", seed=0).block_names)
    prof = uniform_profile(blocks, 1e-3, 2e-3, 8, 1e-4, param_bytes=2**16, output_bytes=2**10,
                           saved_bytes=2**12, model="lenet5", device="cpu")
    path = tmp_path_factory.mktemp("prof") / "prof.json"
    prof.to_json(path)
    return str(path)


def _plan(profile: str, out: Path, *extra: str) -> dict:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(["plan", *FLAGS, "--profile", profile, "--out", str(out), *extra])
    assert rc == 0, stderr.getvalue()
    return json.loads(stdout.getvalue())


def _per_seed(doc: dict) -> dict[str, list[int | None]]:
    return {label: conv["per_seed"] for label, conv in doc["convergence"].items()}


@pytest.fixture(scope="module")
def batched_out(profile: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("batched")
    return _plan(profile, out, "--batched"), out


@pytest.fixture(scope="module")
def batched(batched_out: tuple[dict, Path]) -> dict[str, list[int | None]]:
    return _per_seed(batched_out[0])


def test_same_plan_twice_gives_the_same_iterations_per_seed(profile, batched, tmp_path):
    again = _per_seed(_plan(profile, tmp_path / "again", "--batched"))
    assert again == batched
    assert set(batched) == {"sequential S=1 (1 device) sgd", "stale S=2 sgd", "pipedream S=2 sgd"}
    assert all(n is not None for seeds in batched.values() for n in seeds)  # the target is crossed


def test_batched_crossings_equal_single_emulations(profile, batched, batched_out):
    batched_doc, out = batched_out
    # the same plan without --batched in the same folder: it never reads the batched runs
    # (stored apart; 40 iterations, as it asks), only the shorter single confirmations
    # (which do not answer for 40), so it runs all 6 and agrees with the confirmed crossings
    single_doc = _plan(profile, out)
    assert _per_seed(single_doc) == batched
    assert single_doc["emulations_run"] == 6 and single_doc["emulations_reused"] == 0
    # every seed of the 3 reached candidates was confirmed by a single run; unbatched, none is
    assert batched_doc["single_confirmations_run"] == 6 and single_doc["single_confirmations_run"] == 0
    # and equal a single emulation run here directly (the run the executor equals bit for bit)
    base = TrainConfig(model="lenet5", dataset="synthetic", synthetic_size=128, batch_size=16, lr=0.05,
                       schedule="stale", stages=2, iterations=40).check()
    direct = [iterations_to_loss(Emulator(replace(base, seed=s).check(), progress=False).run()["losses"],
                                 2.26, 4) for s in (0, 1)]
    assert direct == batched["stale S=2 sgd"]
    # the same plan with --batched again: every batched run and confirmation is reused
    again = _plan(profile, out, "--batched")
    assert again["emulations_run"] == again["single_confirmations_run"] == 0 and _per_seed(again) == batched


def _cfg(seed: int, iterations: int) -> TrainConfig:
    return TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=2, seed=seed,
                       iterations=iterations).check()


def test_confirm_replaces_batched_crossings_and_runs_only_past_them(tmp_path):
    # single runs: seed 0 crosses at 30 (the batched run said 24), seed 1 at 90 (batched: 40,
    # past 40 + margin, so it is run again at the full horizon of 100)
    cross = {0: 30, 1: 90}
    ran: list[tuple[int, int]] = []

    def run(todo: list[tuple[str, TrainConfig]]) -> list[dict]:
        out = []
        for rid, cfg in todo:
            n = int(cfg.iterations or 0)
            ran.append((cfg.seed, n))
            losses = [2.0 if t + 1 < cross[cfg.seed] else 0.5 for t in range(n)]
            out.append({"run_id": rid, "losses": losses, "iterations": n})
        return out

    conv = Convergence([24, 40], 100, "reached", None, "", 1.0, ["b0", "b1"])
    target = Target("loss", 1.0, smooth=1)
    got = confirm({"c": conv}, lambda c, h: [_cfg(0, h), _cfg(1, h)], EmulationStore(tmp_path), run, target)
    assert got["c"].per_seed == [30, 90] and got["c"].status == "reached"
    assert got["c"].interval is not None and got["c"].interval.mean == 60.0
    assert ran == [(0, 24 + confirm_margin(24, 1)), (1, 40 + confirm_margin(40, 1)), (1, 100)]
    assert "batched: 24, 40" in got["c"].note and run_id(_cfg(1, 100)) in got["c"].runs
    # a seed whose single run never crosses: the candidate is not reached
    cross[1] = 10**6
    got = confirm({"c": conv}, lambda c, h: [_cfg(0, h), _cfg(1, h)], EmulationStore(tmp_path / "b"), run, target)
    assert got["c"].per_seed == [30, None] and got["c"].status == "not reached" and got["c"].interval is None
    # candidates not reached are left as they are
    miss = Convergence([None, None], 100, "out of reach", None, "x")
    assert confirm({"m": miss}, lambda c, h: [], EmulationStore(tmp_path / "c"), run, target)["m"] is miss
