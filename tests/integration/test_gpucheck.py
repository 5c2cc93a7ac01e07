"""``python -m lab.gpucheck``: the plan's budgets, the CLI's errors, the step runner, and the
CPU dry mode end to end (what CI can check of the GPU campaign; docs/gpu-check.md).

The dry-mode test runs every step's tiny CPU variant in this process: 40-55 s on 2 busy cores
(torch already imported; the pytest step starts one collecting subprocess)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from lab.gpucheck.__main__ import main
from lab.gpucheck.jobs import dataset_for, multi_gpu_cases, multi_gpu_device_counts, one_gpu_cases
from lab.gpucheck.plan import (
    PART_LIMIT_S,
    PARTS,
    STEPS,
    TOTAL_LIMIT_S,
    check_plan,
    part_budget_s,
    step_named,
    steps_of,
)
from lab.gpucheck.report import Context, Outcome, read_steps, status_of
from lab.gpucheck.runner import call_step, isolated_step
from stalesim.schedule import get_spec, schedule_names

NAMES = [s.name for s in STEPS]


# ------------------------------------------------------------------ the plan
def test_parts_fit_a_ten_minute_command_and_the_campaign_25_minutes():
    info = check_plan()
    assert set(info["parts_s"]) == {str(p) for p in PARTS} and len(PARTS) >= 3
    assert all(b <= PART_LIMIT_S == 540 for b in info["parts_s"].values())
    assert info["total_s"] == sum(part_budget_s(p) for p in PARTS) <= TOTAL_LIMIT_S == 1500
    assert [s.name for p in PARTS for s in steps_of(p)] == NAMES  # every step in exactly one part
    assert {"profile", "emulator_speed", "batched", "executor_one_gpu", "executor_multi_gpu", "memory",
            "pytest_gpu", "reproduce_plan"} <= set(NAMES)


def test_configs_cover_every_schedule():
    one = one_gpu_cases("cpu")
    foldable = {n for n in schedule_names() if not get_spec(n).data_parallel}
    assert {c.schedule for c in one} == foldable
    assert all(c.fold == 1 and c.num_stages == 2 * get_spec(c.schedule).stages_per_device for c in one)
    assert multi_gpu_device_counts(1) == [] and multi_gpu_device_counts(2) == [2]
    assert multi_gpu_device_counts(3) == [2, 3] and multi_gpu_device_counts(8) == [2, 3, 8]
    assert sorted(multi_gpu_cases(8)) == [2, 3, 8]  # S = 16 for V = 2 on 8 GPUs: a ResNet deep enough
    by = multi_gpu_cases(3)
    for n, cases in by.items():
        assert {c.schedule for c in cases} == set(schedule_names())
        for c in cases:
            spec = get_spec(c.schedule)
            assert (c.workers, c.num_stages) == ((n, 1) if spec.data_parallel else (1, n * spec.stages_per_device))


def test_real_data_only_where_its_folder_is(tmp_path):
    assert dataset_for("cifar10", None) == ("synthetic", None)
    assert dataset_for("shakespeare", str(tmp_path)) == ("synthetic", None)
    (tmp_path / "CIFAR10").mkdir()
    assert dataset_for("cifar10", str(tmp_path)) == ("cifar10", str(tmp_path))


# ------------------------------------------------------------------ the CLI's errors
@pytest.mark.parametrize("argv", [
    ["--part", "9"], ["--part", "x"], ["--part", "0"], ["--steps", "nosuch"], ["--steps", ","], ["--bogus"],
    ["--dry", "--data-dir", "/no/such/folder"], ["--dry", "--part", "3", "--steps", "profile"],
])
def test_bad_flags_give_one_error_line_and_status_2(argv, capsys, tmp_path):
    try:
        code = main([*argv, "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("stalesim: error:"), err


def test_an_output_folder_that_is_a_file_is_refused_up_front(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    assert main(["--dry", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stalesim: error:") and "not a folder" in err[0]
    assert not (tmp_path / "steps").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_a_gpu_the_real_campaign_refuses_in_one_line(capsys, tmp_path):
    assert main(["--part", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device visible" in err[0] and "--dry" in err[0]


def test_list_prints_every_step_with_its_budget(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"{s.name:20s} {s.budget_s:4d} s" in out for s in STEPS)


# ------------------------------------------------------------------ the runner
def test_a_step_that_raises_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    import lab.gpucheck.suite as suite

    def broken(ctx):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(suite, "plan_step", broken)
    ctx = Context(tmp_path, dry=True)
    rec = call_step(step_named("plan"), ctx)
    assert rec["status"] == "error" and rec["error"].endswith("RuntimeError: CUDA error: an illegal memory "
                                                              "access was encountered")
    monkeypatch.undo()
    assert call_step(step_named("plan"), ctx)["status"] == "pass"
    assert [r["step"] for r in read_steps(tmp_path)] == ["plan"]  # the record was replaced


def test_a_step_needing_more_gpus_is_skipped(tmp_path):
    rec = call_step(step_named("executor_multi_gpu"), Context(tmp_path, dry=False, gpus=1))
    assert rec["status"] == "skip" and "needs 2 GPUs, 1 visible" in rec["skipped"]


def test_isolated_step_in_a_child_process_and_killed_at_its_budget(tmp_path):
    ctx = Context(tmp_path, dry=True)
    rec = isolated_step(step_named("plan"), ctx)
    assert rec["status"] == "pass" and (tmp_path / "logs" / "plan.log").is_file()
    rec = isolated_step(replace(step_named("plan"), budget_s=0), ctx)
    assert rec["status"] == "error" and rec["error"].endswith("killed at its budget of 0 s")
    assert json.loads((tmp_path / "steps" / "plan.json").read_text())["status"] == "error"


def test_status_and_strict_json():
    o = Outcome()
    o.check("soft", False, float("nan"), 1.0, enforced=False)
    assert status_of(o) == "pass" and o.checks[0].value is None
    o.check("hard", False, math.inf)
    assert status_of(o) == "fail"
    assert status_of(Outcome(skipped="no GPU")) == "skip"


# ------------------------------------------------------------------ the dry mode, end to end
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check-dry")
    code = main(["--dry", "--out", str(out)])
    return code, out, json.loads((out / "summary.json").read_text())


def test_dry_mode_runs_every_step_and_passes(dry_run):
    code, out, s = dry_run
    assert code == 0 and s["ok"] is True
    assert [r["step"] for r in s["steps"]] == NAMES
    assert all(r["status"] == "pass" and r["dry"] for r in s["steps"]), [(r["step"], r.get("error"))
                                                                        for r in s["steps"]]
    assert s["environment"]["dry"] is True and "tf32_conv" in s["environment"]["precision"]
    md = (out / "summary.md").read_text()
    assert all(f"| {n} |" in md for n in NAMES) and "mode: dry" in md


def test_dry_mode_numbers(dry_run):
    _, _, s = dry_run
    by = {r["step"]: r for r in s["steps"]}
    assert all(c["ok"] for c in by["plan"]["checks"]) and len(by["plan"]["checks"]) >= len(STEPS) - 1
    one = by["executor_one_gpu"]["numbers"]
    assert one["built"] == len(one_gpu_cases("cpu")) and one["ran"] >= 2
    assert all(row["max_rel_loss_diff"] == 0 for row in one["cases"].values())  # CPU: bitwise
    for row in by["memory"]["numbers"]["cases"].values():
        assert row["rel_error"] <= 0.05 and row["measured_bytes"] > 0
    assert any(label.endswith(":adamw") for label in by["memory"]["numbers"]["cases"])  # an optimizer's state
    b = by["batched"]["numbers"]
    assert b["K"] == 2 and b["max_rel_loss_diff"] <= 1e-3 and b["loop_steps_per_s"] > 0
    for key in ("resnet20", "gpt-char"):
        assert by["emulator_speed"]["numbers"][key]["steps_per_s"] > 0
        assert by["profile"]["numbers"][key]["wall_s"] > 0
    assert by["pytest_gpu"]["numbers"]["collected"] > 0 and by["reproduce_plan"]["numbers"]["jobs"] > 0


def test_one_part_adds_to_the_folder_and_summarize_rebuilds(dry_run, tmp_path):
    _, out, _ = dry_run
    part = tmp_path / "p"
    assert main(["--dry", "--part", "3", "--steps", "executor_multi_gpu", "--out", str(part)]) == 0
    assert [r["step"] for r in read_steps(part)] == ["executor_multi_gpu"]
    assert main(["--summarize", "--out", str(out)]) == 0
    assert [r["step"] for r in json.loads((out / "summary.json").read_text())["steps"]] == NAMES
