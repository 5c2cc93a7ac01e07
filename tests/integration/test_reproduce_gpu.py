"""`make reproduce-gpu`: the plan, the time estimate, and the whole pipeline on the CPU (smoke)."""

from __future__ import annotations

import json
from pathlib import Path

from lab.reproduce.gpu import PAPER, SMOKE, estimate, plan, reproduce
from stalesim.figures.common import SHAPE_PROFILES

ROOT = Path(__file__).resolve().parents[2]
PROFILES = SHAPE_PROFILES


def test_paper_plan():
    jobs = plan(PAPER, two_gpus=True, data_dir="/data")
    one = [j for j in jobs if j.kind == "study"]
    two = [j for j in jobs if j.kind == "run"]
    assert [j.name for j in one] == [f"{m}_cifar10_{k}" for m in ("alexnet", "vgg16", "resnet20")
                                     for k in ("stale", "hybrid")]
    stale = {j.model: j for j in one if j.name.endswith("_stale")}
    for model, ppv in (("alexnet", "3"), ("vgg16", "2"), ("resnet20", "7")):
        argv = stale[model].argv
        assert argv[argv.index("--placements") + 1] == f"{ppv};S3;S4"
        assert argv[argv.index("--seeds") + 1] == "0,1,2"
        assert argv[argv.index("--epochs") + 1] == "160" and argv[argv.index("--lr-schedule") + 1] == "step"
        assert stale[model].runs == 3 * 4 and stale[model].iterations == 160 * 390
    hyb = next(j for j in one if j.name == "resnet20_cifar10_hybrid")
    assert hyb.argv[hyb.argv.index("--switch-epoch") + 1] == "80" and hyb.runs == 9
    assert len(two) == 4 * 3
    r362 = next(j for j in two if j.name == "resnet362_2gpu_stale_seed0")
    assert r362.argv[r362.argv.index("--ppv") + 1] == "121"
    assert r362.argv[r362.argv.index("--devices") + 1] == "cuda:0,1"
    assert not [j for j in plan(PAPER, two_gpus=False) if j.kind == "run"]


def test_estimate_scales_with_work_and_device():
    jobs = plan(PAPER, two_gpus=False)
    h100 = {r["job"]: r["roofline_s"] for r in estimate(jobs, "h100-sxm", PROFILES, PAPER)}
    v100 = {r["job"]: r["roofline_s"] for r in estimate(jobs, "v100-sxm2", PROFILES, PAPER)}
    assert all(v100[k] > h100[k] > 0 for k in h100)       # a slower GPU takes longer
    assert h100["vgg16_cifar10_stale"] > h100["resnet20_cifar10_stale"]  # VGG-16: ~7x the FLOPs
    # hybrid runs 3 placements x 3 seeds, stale 3 x 3 + 3 sequential: same per-run cost
    assert h100["resnet20_cifar10_stale"] / h100["resnet20_cifar10_hybrid"] == 12 / 9


def test_smoke_pipeline_end_to_end_and_resumes(tmp_path):
    md = tmp_path / "RESULTS.md"
    md.write_text("# R\n\n<!-- table:gpu-cifar10 -->\nold\n<!-- /table:gpu-cifar10 -->\n\n"
                  "<!-- table:gpu-2gpu -->\nold\n<!-- /table:gpu-2gpu -->\n")
    out, res = tmp_path / "out", tmp_path / "docs" / "results" / "gpu_cifar10"
    lines: list[str] = []
    jobs = reproduce(out, res, scale=SMOKE, two_gpus=True, results_md=md, root=tmp_path, profiles=PROFILES,
                     log=lines.append)
    assert "total left" in lines[0] and "roofline" in lines[0]
    assert all((out / j.name / "done.json").exists() for j in jobs)
    # artifacts: per-seed summaries of every emulation, the 2-rank executor runs
    recs = [json.loads(x) for x in (res / "resnet20_cifar10_stale" / "results_per_seed.jsonl").read_text().splitlines()]
    assert sorted((r["schedule"], len(r["ppv"])) for r in recs) == [("sequential", 0), ("stale", 1), ("stale", 2),
                                                                     ("stale", 3)]
    assert all("losses" not in r and r["steps_done"] == 2 for r in recs)
    two = [json.loads(x) for x in (res / "two_gpu_runs.jsonl").read_text().splitlines()]
    assert {r["schedule"] for r in two} == {"sequential", "stale", "hybrid"}
    text = md.read_text()
    assert "old" not in text and "| resnet20 | (7) | stale |" in text and "| resnet56, (19) |" in text
    # resumable: a second call finds every job done and runs nothing
    stamps = {j.name: (out / j.name / "done.json").stat().st_mtime_ns for j in jobs}
    lines.clear()
    reproduce(out, res, scale=SMOKE, two_gpus=True, results_md=md, root=tmp_path, profiles=PROFILES,
              log=lines.append)
    assert stamps == {j.name: (out / j.name / "done.json").stat().st_mtime_ns for j in jobs}
    job_lines = lines[0].splitlines()[1:-1]
    assert len(job_lines) == len(jobs) and all(" 0/" in x for x in job_lines)  # no runs left


def test_default_jobs_by_free_memory_and_cores():
    from lab.reproduce.gpu import JOB_GPU_BYTES, default_jobs

    assert default_jobs(141e9, 16) == 16  # an H200 is limited by the cores, not the memory
    assert default_jobs(141e9, 64) == int(141e9 // JOB_GPU_BYTES)
    assert default_jobs(12e9, 16) == 1 and default_jobs(0, 16) == 1 and default_jobs(80e9, None) == 1


def test_plan_runs_each_study_jobs_at_a_time():
    jobs = plan(PAPER, two_gpus=True, jobs=10)
    studies = {j.name: j for j in jobs if j.kind == "study"}
    stale, hybrid = studies["vgg16_cifar10_stale"], studies["vgg16_cifar10_hybrid"]
    assert stale.argv[stale.argv.index("--jobs") + 1] == "10"
    assert hybrid.argv[hybrid.argv.index("--jobs") + 1] == "9"  # never more than its runs
    assert all("--jobs" not in j.argv for j in jobs if j.kind == "run")


def test_estimate_runs_in_parallel_but_shares_the_gpu():
    from lab.reproduce.gpu import job_parallelism

    one = {r["job"]: r for r in estimate(plan(PAPER, jobs=1), "h100-sxm", PROFILES, PAPER)}
    many = {r["job"]: r for r in estimate(plan(PAPER, jobs=12), "h100-sxm", PROFILES, PAPER)}
    for name, r in many.items():
        assert r["roofline_s"] == one[name]["roofline_s"]
        assert r["wall_s"] == max(r["roofline_s"] / r["parallel"], r["device_s"])
        assert 0 < r["device_s"] <= r["roofline_s"] and r["wall_s"] < one[name]["wall_s"]
    assert job_parallelism(plan(PAPER, jobs=12)[0]) == 12


def test_plan_without_a_gpu_for_a_named_class(monkeypatch, tmp_path):
    import lab.reproduce.gpu as gpu

    monkeypatch.setattr(gpu, "detect_gpu", lambda: (None, None))
    lines: list[str] = []
    jobs = reproduce(tmp_path / "out", tmp_path / "res", device_class="H100 PCIe", dry_run=True,
                     profiles=PROFILES, jobs=3, log=lines.append)
    assert "time on h100-pcie" in lines[0] and "total left" in lines[0]
    assert len([j for j in jobs if j.kind == "run"]) == 12  # both parts planned
    assert any("no GPU visible" in x for x in lines)
    assert not (tmp_path / "out").exists()  # a plan runs nothing


def test_plan_without_a_gpu_needs_a_class_and_running_needs_a_gpu(monkeypatch, tmp_path, capsys):
    import pytest

    import lab.reproduce.gpu as gpu
    from lab.reproduce.__main__ import main
    from stalesim.errors import StalesimError

    monkeypatch.setattr(gpu, "detect_gpu", lambda: (None, None))
    with pytest.raises(StalesimError, match="--gpu: no CUDA device visible"):
        reproduce(tmp_path, tmp_path, dry_run=True, profiles=PROFILES, log=lambda _m: None)
    with pytest.raises(StalesimError, match="no CUDA device visible"):
        reproduce(tmp_path, tmp_path, device_class="h100-sxm", profiles=PROFILES, log=lambda _m: None)
    assert main(["gpu", "--dry-run", "--gpu", "tpu9", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stalesim: error: --gpu: ")
