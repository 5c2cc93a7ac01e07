"""``run --tensorboard DIR`` and ``validate --tensorboard DIR``: scalars read back with
TensorBoard's own event reader, equal to the numbers the run or validation wrote."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
RUN = ["run", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
       "--eval-windows", "8", "--schedule", "stale", "--stages", "2", "--devices", "cpu:2", "--no-eval"]


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_run_loss_scalars_equal_the_runs_losses(capsys, tmp_path):
    """Two gloo ranks: the loss-stage rank (rank 1) writes one loss per step, equal to the
    run's recorded ``metrics.jsonl`` and ``summary.json`` losses; only it writes."""
    out, tb = tmp_path / "run", tmp_path / "tb"
    rc, _, err = run_cli(capsys, [*RUN, "--iterations", "5", "--out", str(out), "--tensorboard", str(tb)])
    assert rc == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    got = _scalars(tb)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert got["train/loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in rows]
    assert [v for _, v in got["train/loss"]] == pytest.approx(summary["losses"], rel=1e-6)
    assert [s for s, _ in got["train/step_time_s"]] == [1, 2, 3, 4]
    assert all(v > 0 for _, v in got["train/step_time_s"])
    assert len(list(tb.glob("events.out.tfevents.*"))) == 1  # one writer: the loss rank


def test_a_resumed_run_draws_each_step_once(tmp_path):
    """The loss rank killed after the checkpoint at step 4 has written steps 0-4; the
    resumed run writes 4 and 5 again, the earlier attempt's step 4 is purged, and the curve
    equals the resumed run's losses, one point per step."""
    from stalesim.executor import make_job, run_local
    from stalesim.executor.launch import ExecutorError
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model=TINY, dataset="synthetic", synthetic_size=32, batch_size=8, eval_windows=8,
                      schedule="stale", stages=2, iterations=6).check()
    out, tb = str(tmp_path / "run"), tmp_path / "tb"
    with pytest.raises(ExecutorError, match="rank 1 was killed"):
        run_local(make_job(cfg, out=out, checkpoint_every=4, evaluate=False, tensorboard=str(tb)), "cpu:2",
                  timeout_s=30, env={"STALESIM_EXECUTOR_FAULT": "1:1F5:crash"})
    assert [s for s, _ in _scalars(tb)["train/loss"]] == [0, 1, 2, 3, 4]  # flushed before the kill
    res = run_local(make_job(cfg, out=out, checkpoint_every=4, resume=out, evaluate=False, tensorboard=str(tb)),
                    "cpu:2", timeout_s=30)
    got = _scalars(tb)["train/loss"]
    assert [s for s, _ in got] == list(range(6))
    assert [v for _, v in got] == pytest.approx(res["losses"], rel=1e-6)


def test_no_tensorboard_no_writer():
    """A job without the folder gets no writer on any rank; the loss rank is worker 0's last stage."""
    from stalesim.executor.spec import make_job, plan
    from stalesim.executor.tb_live import live_loss
    from stalesim.runtime.config import TrainConfig

    cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=2, batch_size=8,
                      iterations=3).check()
    _, sched = plan(cfg)
    job = make_job(cfg)
    assert all(live_loss(job, sched, r, sched.device_actions[r], {}) is None for r in range(2))


# ---------------------------------------------------------------- validate
def _validate_rounds(tmp_path, monkeypatch, tb, fail_at_round=None, resume=False, repeats=3):
    """validate's run step on faked runs (round k's schedule ``name`` measures
    ``TIMES[name] + k`` ms an iteration) and the fake stage timer of its step tests, with
    the TensorBoard writers open for it as :func:`stalesim.validate.workflow.validate` has them."""
    from pathlib import Path

    from _validate_fakes import PassCounter

    import stalesim.executor.launch
    from stalesim.devices import parse_devices
    from stalesim.validate.checkpoint import load
    from stalesim.validate.config import ValidateConfig
    from stalesim.validate.costmodel import CostModel
    from stalesim.validate.steps import Validation, run_step
    from stalesim.validate.tbscalars import ValidationScalars
    from stalesim.workloads.profile import uniform_profile

    def fake_run_local(jobs, devs, **_kw):
        js = [jobs] if isinstance(jobs, dict) else jobs
        res = []
        for j in js:
            name = Path(j["out"]).name
            if fail_at_round is not None and name.endswith(f".r{fail_at_round}"):
                raise KeyboardInterrupt  # the validation killed in this round
            k = int(name.rsplit(".r", 1)[1]) if ".r" in name else 0
            res.append({"label": j["label"], "run_dir": j["out"],
                        "iteration_time_s": (TIMES.get(j["label"], 1.0) + k) / 1e3})
        return res[0] if isinstance(jobs, dict) else res

    monkeypatch.setattr(stalesim.executor.launch, "run_local", fake_run_local)
    monkeypatch.setattr("stalesim.validate.stagetime.LayoutTimer", PassCounter)
    monkeypatch.setattr("stalesim.validate.steps._time_pass",
                        lambda v, timer: setattr(timer, "passes", timer.passes + 1))
    cfg = ValidateConfig(model="lenet5", devices="cpu:2", iterations=8, batch_size=16, microbatches=4,
                         out=str(tmp_path), repeats=repeats)
    prof = uniform_profile(6, 1e-3, 2e-3, 16, param_bytes=1000, output_bytes=100, saved_bytes=100)
    v = Validation(cfg=cfg, devs=parse_devices("cpu:2"), schedules=["gpipe", "stale"], out=tmp_path,
                   say=lambda _m: None, prof=prof, cm=CostModel(prof, overhead_s={"F": 3e-6}),
                   tensorboard=ValidationScalars(tb))
    v.base_runs = [{"base": 0}]
    if resume:
        v.resumed = load(tmp_path, cfg)
    try:
        run_step(v)
    finally:
        v.tensorboard.close()
    return v


TIMES = {"gpipe": 10.0, "stale": 20.0}


def _uids_from(monkeypatch, n):
    """The event files this process opens from now on are numbered from ``n`` (the number
    torch's writer puts last in a file name)."""
    from tensorboard.summary.writer import event_file_writer

    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(n))


def _at_a_seconds_start():
    """Sleep to the start of the next second, so what follows (fake rounds: milliseconds)
    names its event files within one second."""
    import time

    time.sleep(1.0 - time.time() % 1.0)


def _files(folder):
    return sorted(p.name for p in folder.glob("events.out.tfevents.*"))


def test_validate_writes_each_rounds_measured_time_and_a_resume_draws_no_round_twice(tmp_path, monkeypatch):
    tb = tmp_path / "tb"
    _uids_from(monkeypatch, 8)  # the files' numbers go from one digit to two
    _at_a_seconds_start()  # and the killed and the resumed validation start in one second
    with pytest.raises(KeyboardInterrupt):
        _validate_rounds(tmp_path, monkeypatch, tb, fail_at_round=2)
    # rounds 0 and 1 were written as they finished, before the kill
    assert _scalars(tb / "gpipe")["round/measured_iteration_time_s"] == [
        (0, pytest.approx(0.010)), (1, pytest.approx(0.011))]
    killed = {name: _files(tb / name) for name in TIMES}
    _validate_rounds(tmp_path, monkeypatch, tb, resume=True)
    for name, ms in TIMES.items():
        got = _scalars(tb / name)["round/measured_iteration_time_s"]
        assert got == [(k, pytest.approx((ms + k) / 1e3)) for k in range(3)]
        files = _files(tb / name)  # one file per validation, the resumed one's read last
        assert len(killed[name]) == 1 and files[0] == killed[name][0] and len(files) == 2


def test_validate_rounds_of_one_second_are_all_read_back(tmp_path, monkeypatch):
    """Six rounds in one second while the writers' numbers cross from one digit to two: one
    writer per schedule for the whole validation, so no file's name can sort before an
    earlier round's (with a file per round, ``.10`` sorted before ``.8`` and round 0's purge
    at step 0, read last, dropped the later rounds)."""
    tb = tmp_path / "tb"
    _uids_from(monkeypatch, 8)
    _at_a_seconds_start()
    _validate_rounds(tmp_path, monkeypatch, tb, repeats=6)
    for name, ms in TIMES.items():
        got = _scalars(tb / name)["round/measured_iteration_time_s"]
        assert [s for s, _ in got] == list(range(6))
        assert [v for _, v in got] == pytest.approx([(ms + k) / 1e3 for k in range(6)])
        assert len(_files(tb / name)) == 1


def test_validate_final_scalars_equal_the_summary_rows(tmp_path):
    from stalesim.validate.tbscalars import ValidationScalars

    tb = tmp_path / "tb"
    s = ValidationScalars(tb)
    s.round(0, {"gpipe": {"iteration_time_s": 0.012}, "stale": {"error": "rank 1 died"}})
    rows = [{"schedule": "gpipe", "predicted_iteration_time_s": 0.010, "measured_iteration_time_s": 0.0125,
             "time_error": -0.2, "replay_time_error": None, "memory_error": float("nan")}]
    s.final(rows, rounds=2)
    s.close()
    got = _scalars(tb / "gpipe")
    assert got["round/measured_iteration_time_s"] == [(0, pytest.approx(0.012))]
    assert got["round/predicted_iteration_time_s"] == [(0, pytest.approx(0.010)), (1, pytest.approx(0.010))]
    assert got["final/time_error"] == [(1, pytest.approx(-0.2))]
    assert got["final/measured_iteration_time_s"] == [(1, pytest.approx(0.0125))]
    assert "final/replay_time_error" not in got and "final/memory_error" not in got  # no number: no scalar
    assert not (tb / "stale").exists() or "round/measured_iteration_time_s" not in _scalars(tb / "stale")
