"""Checkpoints are exact: a resumed run's losses equal the uninterrupted run's.

The crash test kills a rank after a checkpoint, resumes, and compares with the
emulator (itself equal to an uninterrupted executor run, see the equivalence
test). The multi-schedule test resumes from the newest checkpoint of completed
runs, all jobs in one process group to keep CI time down.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from stalesim.emulator.replay import Emulator
from stalesim.executor import make_job, run_local
from stalesim.executor.launch import ExecutorError
from stalesim.runtime.config import TrainConfig


def _cfg(name: str, **over) -> TrainConfig:
    kw = dict(  # noqa: C408
        model="lenet5", dataset="synthetic", schedule=name, stages=2, iterations=9,
              batch_size=16, synthetic_size=128, lr=0.05)
    if name in ("gpipe", "1f1b", "2bw"):
        kw["microbatches"] = 2
    if name in ("dp", "pipe-sgd"):
        kw.update(workers=2, stages=1)
    kw.update(over)
    return TrainConfig(**kw).check()


def _emulated_losses(cfg: TrainConfig) -> list[float]:
    import torch

    torch.set_num_threads(1)
    return Emulator(cfg).run()["losses"]


@pytest.mark.slow
def test_resume_after_a_crash_reproduces_the_losses(tmp_path):
    cfg = _cfg("stale", model="resnet8", batch_size=8, synthetic_size=64, iterations=10)
    out = str(tmp_path / "run")
    with pytest.raises(ExecutorError, match="rank 1 was killed"):
        run_local(make_job(cfg, out=out, checkpoint_every=4, evaluate=False), "cpu:2", timeout_s=20,
                  env={"STALESIM_EXECUTOR_FAULT": "1:1F9:crash"})
    assert (tmp_path / "run" / "checkpoints" / "k0000008" / "rank0.pt").exists()
    res = run_local(make_job(cfg, out=out, checkpoint_every=4, resume=out, keep_rows=True),
                    "cpu:2", timeout_s=20)
    assert res["losses"] == _emulated_losses(cfg)
    assert res["versions_match_ir"]
    # the resumed part alone was timed: batches before the checkpoint have no rows
    ran = {row[3] for rows in res["rows"].values() for row in rows}
    assert min(ran) >= 4


@pytest.mark.slow
def test_resume_is_exact_for_every_kind_of_schedule(tmp_path):
    names = ["1f1b", "pipedream", "2bw", "local", "pipe-sgd"]
    cfgs = [_cfg(n) for n in names]
    outs = [str(tmp_path / n) for n in names]
    full = run_local([make_job(c, out=o, checkpoint_every=4, evaluate=False) for c, o in zip(cfgs, outs)],
                     "cpu:2", timeout_s=30)
    resumed = run_local([make_job(c, out=o, checkpoint_every=4, resume=o, evaluate=False)
                         for c, o in zip(cfgs, outs)], "cpu:2", timeout_s=30)
    for name, a, b in zip(names, full, resumed):
        assert b["losses"] == a["losses"], name
