"""The job spec: the config is checked once where the run starts, the job carries the
schedule's fingerprint, and a rank refuses a job whose config builds another schedule."""

from __future__ import annotations

import copy
import json

import pytest

from stalesim.errors import StalesimError
from stalesim.executor.spec import job_schedule, make_job, plan, verify_schedule
from stalesim.runtime.config import TrainConfig


def _cfg(**over) -> TrainConfig:
    base = dict(model="lenet5", dataset="synthetic", synthetic_size=96, batch_size=24, schedule="gpipe",
                stages=2, microbatches=2, iterations=3, seed=1)
    base.update(over)
    return TrainConfig(**base)


def test_job_carries_the_fingerprint_of_the_runs_schedule():
    cfg = _cfg()
    job = make_job(cfg)
    N, sched = plan(cfg)
    assert N == 3 and sched.batches == 3
    assert job["schedule_fingerprint"] == sched.fingerprint() == cfg.build_schedule(3).fingerprint()
    assert job["train"] == cfg.to_dict()
    json.dumps(job)  # JSON-able: it travels to the ranks as a file
    # a caller that built the schedule passes it: the same job, no second build or check
    assert make_job(cfg, schedule=job_schedule(cfg)) == job
    # a dict config gives the same job as the dataclass
    assert make_job(cfg.to_dict()) == job


def test_epoch_runs_have_no_fingerprint_until_the_data_is_read():
    cfg = _cfg(iterations=None, epochs=1)
    assert job_schedule(cfg) is None
    assert make_job(cfg)["schedule_fingerprint"] is None


def test_make_job_checks_the_config_once_where_the_run_starts():
    with pytest.raises(StalesimError, match="^workers: schedule 'gpipe' is not data-parallel"):
        make_job(_cfg(workers=2))
    with pytest.raises(StalesimError, match="^lr: "):
        make_job(_cfg(lr=-1.0).to_dict())


@pytest.mark.parametrize("tamper", [
    lambda job: job["train"].update(microbatches=4),    # the config edited after the job was made
    lambda job: job.update(schedule_fingerprint="0" * 64),  # the fingerprint edited
])
def test_a_tampered_job_is_refused_in_one_line(tamper):
    job = make_job(_cfg())
    bad = copy.deepcopy(job)
    tamper(bad)
    _, sched = plan(TrainConfig.from_dict(bad["train"]))
    verify_schedule(job, plan(_cfg())[1])  # the untouched job passes
    with pytest.raises(StalesimError) as exc:
        verify_schedule(bad, sched)
    msg = str(exc.value)
    assert msg.startswith("schedule_fingerprint: the job was made for schedule ") and "\n" not in msg
    assert f"builds {sched.fingerprint()[:12]} here (gpipe)" in msg


def test_the_ranks_refuse_a_tampered_job():
    """End to end: the ranks build the schedule from the (edited) config, see another
    fingerprint and stop before training; the launcher reports it in one line."""
    from stalesim.executor.launch import ExecutorError, run_local

    job = make_job(_cfg(), evaluate=False)
    job["train"]["microbatches"] = 4  # 24 samples still split evenly: only the fingerprint tells
    with pytest.raises(ExecutorError) as exc:
        run_local(job, "cpu:2", timeout_s=30)
    msg = str(exc.value)
    assert "\n" not in msg and "rank 0: schedule_fingerprint: the job was made for schedule" in msg, msg
