"""``stalesim plan`` end to end: outputs, resume (stored emulations are not run again),
infeasible candidates, bad input (one ``stalesim: error:`` line, exit 2), and one real
plan on LeNet-5 / MNIST."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pytest

from stalesim.cli import main
from stalesim.workloads.profile import uniform_profile

DATA = os.environ.get("STALESIM_DATA")


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture()
def profile(tmp_path: Path) -> str:
    # LeNet-5's five blocks; 1 MiB of weights and 64 KiB of saved activations per block
    prof = uniform_profile(5, 1e-3, 2e-3, 32, 1e-4, param_bytes=2**20, output_bytes=2**14, saved_bytes=2**16,
                           model="lenet5", device="cpu")
    path = tmp_path / "prof.json"
    prof.to_json(path)
    return str(path)


@pytest.fixture()
def fake_study(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """run_study stand-in: a loss that falls faster for the synchronous runs; counts runs."""
    import stalesim.emulator.study
    import stalesim.plan.continuation

    ran: list[str] = []

    def run_study(points, out, jobs=1, progress=None, **kw):
        res = []
        for rid, cfg in points:
            ran.append(rid)
            slow = 1.0 if cfg.schedule in ("sequential", "gpipe") else 1.25  # noqa: PLR6201
            n = cfg.iterations
            res.append({"run_id": rid, "iterations": n, "batches_per_epoch": 100, "diverged": False,
                        "losses": [2.5 - 2.0 * min(1.0, (i + 1) / (80 * slow)) + 0.001 * cfg.seed for i in range(n)],
                        "wall_time_s": 0.0})
        return res

    monkeypatch.setattr(stalesim.emulator.study, "run_study", run_study)
    # a longer horizon of a constant-rate loss target continues the shorter run: the same
    # losses as a run from scratch, so the same stand-in
    monkeypatch.setattr(stalesim.plan.continuation, "run_continued", run_study)
    return ran


BASE = ["plan", "--model", "lenet5", "--dataset", "synthetic", "--batch-size", "32", "--devices", "2",
        "--schedules", "gpipe,stale", "--mitigations", "none", "--warmups", "0,10", "--seeds", "0,1",
        "--target-loss", "1.0", "--smooth", "5", "--iterations", "50", "--quiet"]


def test_plan_ranks_and_resume_reuses_stored_emulations(tmp_path: Path, profile: str, fake_study: list[str]) -> None:
    out = str(tmp_path / "plan")
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", out, "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    labels = [r["label"] for r in doc["rows"]]
    assert set(labels) == {"sequential S=1 (1 device) sgd", "gpipe S=2 M=4 sgd", "stale S=2 sgd",
                           "stale S=2 warmup=10 sgd"}
    # sequential and gpipe share one emulation per seed (the same arithmetic), stale and its
    # warm-up have their own: 2 x (1 + 1 + 1) + the doubled horizon of the stale ones
    first = len(fake_study)
    assert doc["emulations_run"] == first
    rows = {r["label"]: r for r in doc["rows"]}
    g = rows["gpipe S=2 M=4 sgd"]
    # the mean of 5 losses ending at i is 2.5 - 2 (i - 1)/80 (+ 0.001 seed): <= 1.0 at i = 61 / 62
    assert g["status"] == "reached" and g["iterations_per_seed"] == [62, 63]
    assert (g["iterations_lo"], g["iterations_mean"], g["iterations_hi"]) == (62, 62.5, 63)
    assert g["time_to_target_s"] == pytest.approx(62.5 * g["iteration_s"] + g["fill_drain_s"])
    assert g["time_hi_s"] == pytest.approx((63 * g["iteration_s"] + g["fill_drain_s"]) * 1.1)
    assert [r["rank"] for r in doc["rows"] if r["rank"]] == [1, 2, 3, 4]
    for f in ("plan.json", "plan.csv", "pareto.png"):
        assert (tmp_path / "plan" / f).stat().st_size > 0
    # the same plan for other hardware: every emulation is reused, none runs
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", out, "--json", "--link", "pcie4-x16"])
    assert code == 0, err
    doc2 = json.loads(stdout)
    assert len(fake_study) == first and doc2["emulations_run"] == 0 and doc2["emulations_reused"] > 0
    assert doc2["hardware"] == "cpu + pcie4-x16"


def test_candidate_over_memory_is_infeasible_with_its_reason(tmp_path: Path, profile: str,
                                                            fake_study: list[str]) -> None:
    # 5 MiB of weights (x3: gradients, momentum): one device needs 15 MiB, the busier of
    # two about 12 MiB; the device has 13.5 MiB
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "p"), "--json",
                              "--device-memory", str(13.5 / 1024)])
    assert code == 0, err
    rows = {r["label"]: r for r in json.loads(stdout)["rows"]}
    seq = rows["sequential S=1 (1 device) sgd"]
    assert not seq["feasible"] and seq["rank"] is None
    assert seq["reason"].startswith("out of memory: device 0 needs") and "the device has 0.0132 GiB" in seq["reason"]
    assert all(r["feasible"] and r["rank"] for k, r in rows.items() if k != seq["label"])
    assert rows["gpipe S=2 M=4 sgd"]["speedup_vs_one_device"] is None  # the one-device run cannot run
    # the terminal table says the same (the emulations are reused)
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "p"),
                              "--device-memory", str(13.5 / 1024)])
    assert code == 0, err
    lines = stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if "sequential S=1 (1 device)" in ln)
    assert lines[i + 1].strip().startswith("INFEASIBLE: out of memory: device 0 needs")
    assert lines[3].split()[0] == "1" and "wrote" in lines[-1] and "pareto.png" in lines[-1]


@pytest.mark.parametrize("argv, field", [
    (["--devices", "0"], "--devices"),
    (["--target-loss", "nan"], "--target-loss"),
    (["--target-accuracy", "1.5"], "--target-accuracy"),
    (["--schedules", "nosuch"], "schedule"),
    (["--mitigations", "nosuch"], "mitigations"),
    (["--optimizers", "lion"], "optimizer"),
    (["--epochs", "2"], "epochs"),
    (["--max-horizon", "3"], "max_horizon"),
    (["--model", "nosuch"], "model"),
    (["--check", "3", "--target", "h100-sxm"], "check"),
    (["--emulate-device", "tpu"], "emulate_device"),
    (["--devices", "cuda:2"], "--devices"),
])
def test_bad_input_is_one_error_line(tmp_path: Path, profile: str, argv: list[str], field: str) -> None:
    code, _, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "o"), *argv])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("stalesim: error: ") and field in lines[0], err


def test_no_target_is_an_error(tmp_path: Path) -> None:
    code, _, err = _cli(["plan", "--devices", "2", "--out", str(tmp_path / "o")])
    assert code == 2 and err.startswith("stalesim: error: target:")


@pytest.mark.skipif(not DATA, reason="needs STALESIM_DATA (MNIST)")
def test_real_plan_lenet5_mnist(tmp_path: Path, profile: str) -> None:
    """Real emulations: LeNet-5 / MNIST, sequential and stale on 2 devices, 2 seeds, batched."""
    t0 = time.perf_counter()
    code, stdout, err = _cli(["plan", "--model", "lenet5", "--dataset", "mnist", "--batch-size", "32", "--lr", "0.05",
                              "--devices", "2", "--schedules", "stale", "--mitigations", "none", "--warmups", "0",
                              "--seeds", "0,1", "--target-loss", "1.6", "--smooth", "10", "--iterations", "60",
                              "--max-horizon", "60", "--batched", "--profile", profile, "--out", str(tmp_path / "r"),
                              "--json", "--quiet"])
    dt = time.perf_counter() - t0
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {r["label"]: r for r in doc["rows"]}
    assert set(rows) == {"sequential S=1 (1 device) sgd", "stale S=2 sgd"}
    assert doc["emulations_run"] == 4
    for r in rows.values():
        if r["status"] == "reached":
            assert 10 <= r["iterations_mean"] <= 60 and r["time_to_target_s"] > 0
    assert dt < 120, f"{dt:.0f} s"


def test_accuracy_target_counts_whole_epochs(tmp_path: Path, profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An accuracy target runs epochs and answers at the end of the first epoch that meets it."""
    import stalesim.emulator.study

    def run_study(points, out, jobs=1, progress=None, **kw):
        res = []
        for rid, cfg in points:
            bpe = 64 // 32  # synthetic 64 samples, batch 32
            acc = [0.5, 0.8, 0.95, 0.97][: cfg.epochs] if cfg.schedule == "sequential" else [0.3, 0.5][: cfg.epochs]
            res.append({"run_id": rid, "iterations": cfg.epochs * bpe, "batches_per_epoch": bpe, "diverged": False,
                        "losses": [1.0] * (cfg.epochs * bpe),
                        "epoch_metrics": [{"epoch": e, "test_accuracy": a} for e, a in enumerate(acc)]})
        return res

    monkeypatch.setattr(stalesim.emulator.study, "run_study", run_study)
    code, stdout, err = _cli(["plan", "--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "64",
                              "--batch-size", "32", "--devices", "2", "--schedules", "stale", "--warmups", "0",
                              "--seeds", "0", "--target-accuracy", "0.9", "--epochs", "1", "--max-horizon", "4",
                              "--profile", profile, "--out", str(tmp_path / "a"), "--json", "--quiet"])
    assert code == 0, err
    rows = {r["label"]: r for r in json.loads(stdout)["rows"]}
    seq = rows["sequential S=1 (1 device) sgd"]
    assert seq["status"] == "reached" and seq["iterations_per_seed"] == [3 * 2]  # third epoch, 2 batches each
    assert rows["stale S=2 sgd"]["status"] == "not reached" and rows["stale S=2 sgd"]["rank"] is None


def _routed(monkeypatch: pytest.MonkeyPatch, slow: float = 1.25) -> dict[str, list[tuple[str, int]]]:
    """Stand-ins for both runners, recording which one ran which (run id, iterations)."""
    import stalesim.emulator.study
    import stalesim.plan.continuation

    got: dict[str, list[tuple[str, int]]] = {"study": [], "continued": []}

    def runner(name: str):
        def run(points, out, jobs=1, progress=None, **kw):
            res = []
            for rid, cfg in points:
                n = int(cfg.iterations)
                got[name].append((rid, n))
                s = 1.0 if cfg.schedule in ("sequential", "gpipe") else slow  # noqa: PLR6201
                res.append({"run_id": rid, "iterations": n, "batches_per_epoch": 100, "diverged": False,
                            "losses": [2.5 - 2.0 * min(1.0, (i + 1) / (80 * s)) + 0.001 * cfg.seed for i in range(n)],
                            "wall_time_s": 0.0})
            return res
        return run

    monkeypatch.setattr(stalesim.emulator.study, "run_study", runner("study"))
    monkeypatch.setattr(stalesim.plan.continuation, "run_continued", runner("continued"))
    return got


def test_runs_continue_unless_batched(tmp_path: Path, profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    got = _routed(monkeypatch)
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "c"), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    assert got["study"] == [] and {n for _, n in got["continued"]} == {50, 100}
    # the emulated iterations count what the runs trained: here every run from scratch
    # (the stand-in reports no continuation), 50 per run at the first horizon, 100 after
    assert doc["emulated_iterations"] == sum(n for _, n in got["continued"])
    # batched search runs are grouped by the study and rerun (stalesim.plan.continuation.continuable)
    got = _routed(monkeypatch)
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "b"), "--json", "--batched"])
    assert code == 0, err
    assert got["continued"] == [] and {n for _, n in got["study"]} >= {50, 100}
    batched = json.loads(stdout)["convergence"]
    assert {k: v["per_seed"] for k, v in batched.items()} == {k: v["per_seed"] for k, v in doc["convergence"].items()}


def test_a_candidate_that_cannot_win_stops_early(tmp_path: Path, profile: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the stale runs fall 4x slower: at 100 iterations they have not crossed, and 101 of their
    # iterations (12.4 ms each, -10 %) take longer than gpipe's 63 at most (12.85 ms, +10 %)
    got = _routed(monkeypatch, slow=4.0)
    code, stdout, err = _cli([*BASE, "--profile", profile, "--out", str(tmp_path / "c"), "--json",
                              "--max-horizon", "800"])
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {r["label"]: r for r in doc["rows"]}
    g = rows["gpipe S=2 M=4 sgd"]
    assert g["status"] == "reached" and g["iterations_per_seed"] == [62, 63] and g["rank"] == 1
    bound = g["time_hi_s"]
    for label in ("stale S=2 sgd", "stale S=2 warmup=10 sgd"):
        r = rows[label]
        assert r["status"] == "cannot win" and r["rank"] is None and r["iterations_per_seed"] == [None, None]
        k, first = r["warmup"], r["first_phase_iteration_s"] or 0.0  # the synchronous warm-up's phase
        low = (r["fill_drain_s"] + min(101, k) * first + (101 - k) * r["iteration_s"]) * 0.9
        assert low > bound
        assert r["note"] == (f"stopped at 100 iterations: even at 101 iterations it would take at least {low:.4g} s, "
                             f"more than the {bound:.4g} s a reached candidate takes at most")
    assert doc["cannot_win"] == 2
    assert max(n for _, n in got["continued"]) == 100  # without the rule: 200 and 400 for the stale runs
