"""A study placed by each launcher: submitit's local executor (real subprocesses, pickled
jobs) and a local Ray instance give the local launcher's losses; a failed job is reported
with its run id and log while the others are kept, and the study run again redoes only it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stalesim.emulator.study import expand, run_study
from stalesim.errors import StalesimError
from stalesim.launch import Job, LaunchSpec, make_launcher
from stalesim.runtime.config import TrainConfig

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def _points() -> list[tuple[str, TrainConfig]]:
    base = TrainConfig(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8, eval_windows=8,
                       iterations=3).check()
    return expand(base, ["stale"], [2], ["none"], [0, 1])


@pytest.fixture(scope="module")
def local_losses(tmp_path_factory) -> dict[str, list[float]]:
    res = run_study(_points(), tmp_path_factory.mktemp("local"), jobs=1, progress=False)
    return {r["run_id"]: r["losses"] for r in res}


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance of 2 CPUs for the module (each start costs seconds); the
    launcher uses an instance it finds running and leaves it running."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _spec(name: str, request: pytest.FixtureRequest | None = None) -> LaunchSpec:
    if name == "slurm":
        pytest.importorskip("submitit")
        return LaunchSpec(launcher="slurm", local=True)
    assert request is not None
    request.getfixturevalue("ray_instance")
    return LaunchSpec(launcher="ray")


@pytest.mark.parametrize("name", ["slurm", "ray"])
def test_launcher_gives_the_local_losses_and_resumes_a_failed_job(tmp_path, local_losses, name, request):
    spec = _spec(name, request)
    points = _points()
    failing, kept = points[1][0], points[0][0]
    # the second run's folder is a file: that job fails inside its worker, the first goes on
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / failing).write_text("not a folder")
    with pytest.raises(StalesimError) as err:
        run_study(points, tmp_path, jobs=2, progress=False, launcher=spec)
    msg = str(err.value)
    assert "1 job(s) failed" in msg and failing in msg and str(tmp_path / "logs" / f"{failing}.log") in msg
    assert "\n" not in msg
    assert "Traceback" in (tmp_path / "logs" / f"{failing}.log").read_text()
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["run_id"] for r in lines] == [kept]
    finished = tmp_path / "runs" / kept / "summary.json"
    stamp = os.stat(finished).st_mtime_ns
    # run again: only the failed run runs, the finished one is not redone
    (tmp_path / "runs" / failing).unlink()
    res = run_study(points, tmp_path, jobs=2, progress=False, launcher=spec)
    assert os.stat(finished).st_mtime_ns == stamp
    assert {r["run_id"]: r["losses"] for r in res} == local_losses
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2


def test_slurm_local_batched_equals_local(tmp_path, local_losses):
    res = run_study(_points(), tmp_path, jobs=1, progress=False, batched=True, launcher=_spec("slurm"))
    assert [r["run_id"] for r in res] == list(local_losses)
    for r in res:  # the batched emulator's float32 sums may differ from one run's in the last bit
        assert r["losses"] == pytest.approx(local_losses[r["run_id"]], rel=1e-6)
    assert len(list((tmp_path / "logs" / "submitit").glob("*_result.pkl"))) == 1  # one job: the batch


@pytest.mark.parametrize("name", ["local", "slurm", "ray"])
def test_a_job_whose_process_dies_fails_alone(tmp_path, name, request):
    """A job killed outside Python (here it exits at once, as the OOM killer would end it)
    is reported with its run id and log, after one retry (from its checkpoint, had it one);
    the jobs beside it finish."""
    spec = LaunchSpec() if name == "local" else _spec(name, request)
    jobs = [Job("a", json.loads, ("1",), tmp_path / "a.log"), Job("dies", os._exit, (3,), tmp_path / "dies.log"),
            Job("c", json.loads, ("3",), tmp_path / "c.log")]
    launcher = make_launcher(spec, jobs=2, threads=1, folder=tmp_path)
    assert {job.run_id: res for job, res in launcher.run(jobs)} == {"a": 1, "c": 3}
    assert [f.run_id for f in launcher.failures] == ["dies"]
    assert launcher.failures[0].log == tmp_path / "dies.log"


def _workers(name: str) -> list[int]:
    """The live processes running the job: this process's pool workers (local: spawned by it, or
    forked by its fork server), or the Ray workers whose title names the task (ray), from /proc."""
    procs = []
    for d in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{d}/stat").read_text() if d.isdigit() else ""
            cmd = Path(f"/proc/{d}/cmdline").read_bytes() if stat else b""
        except OSError:
            continue
        if stat:
            procs.append((int(d), int(stat.rsplit(")", 1)[1].split()[1]), cmd))
    if name == "ray":
        return [p for p, _, cmd in procs if cmd.startswith(b"ray::call_logged")]
    me = os.getpid()
    servers = {p for p, pp, cmd in procs if pp == me and b"multiprocessing.forkserver" in cmd}
    return [p for p, pp, cmd in procs if (pp == me and b"spawn_main" in cmd) or pp in servers]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["local", "ray"])
def test_job_killed_mid_run_continues_from_its_checkpoint(tmp_path, name, request):
    """SIGKILL the job's process once the run's first checkpoint is written: the launcher runs
    the job again from that checkpoint (local: in a process of its own; Ray: a retried task)
    and the study ends with the losses of an uninterrupted run."""
    spec = LaunchSpec() if name == "local" else _spec(name, request)
    base = replace(_points()[0][1], iterations=300)
    points = [("stale_S2_none_seed0", base)]
    whole = run_study(points, tmp_path / "whole", jobs=1, progress=False)[0]
    out = tmp_path / "killed"
    got: list = []
    study = threading.Thread(target=lambda: got.extend(run_study(points, out, jobs=1, progress=False,
                                                                 checkpoint_every=20, launcher=spec)))
    study.start()
    ckpt = out / "runs" / points[0][0] / "checkpoint.pt"
    end = time.monotonic() + 120
    while not ckpt.is_file() and study.is_alive() and time.monotonic() < end:
        time.sleep(0.02)
    [worker] = _workers(name)
    os.kill(worker, signal.SIGKILL)
    assert not (out / "runs" / points[0][0] / "summary.json").exists()  # it was killed mid-run
    study.join(180)
    assert not study.is_alive() and got, "the study did not finish after its worker was killed"
    assert got[0]["losses"] == whole["losses"]
    assert "BrokenProcessPool" not in (out / "logs" / f"{points[0][0]}.log").read_text()
