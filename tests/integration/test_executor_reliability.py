"""``run`` under faults that are not crashes: divergence is recorded like ``emulate`` does,
and a local job listens on no interface but loopback.

One process group runs every job (``run_local`` with a list) in a thread while the test
reads the listening TCP sockets of the ranks from /proc.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _sockets import children, listening  # noqa: E402

from stalesim.emulator.replay import Emulator  # noqa: E402
from stalesim.executor import make_job, run_local  # noqa: E402
from stalesim.runtime.config import TrainConfig  # noqa: E402


def _cfg(schedule: str, **kw) -> TrainConfig:
    base = dict(model="lenet5", dataset="synthetic", schedule=schedule, stages=2, iterations=8,
                batch_size=16, synthetic_size=128, lr=1e4, momentum=0.0)
    if schedule == "dp":
        base.update(stages=1, workers=2)
    base.update(kw)
    return TrainConfig(**base).check()


def _emulate(cfg: TrainConfig) -> dict:
    torch.set_num_threads(1)
    return Emulator(cfg, progress=False).run()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_divergence_is_recorded_and_only_loopback_listens(tmp_path):
    cases = [_cfg("stale"), _cfg("gpipe", microbatches=2), _cfg("dp")]
    jobs = [make_job(c, out=str(tmp_path / c.schedule), label=c.schedule) for c in cases]
    jobs.append(make_job(_cfg("stale", lr=0.01, iterations=150), evaluate=False, label="long"))
    box: dict = {}

    def go() -> None:
        try:
            box["out"] = run_local(jobs, "cpu:2", timeout_s=60)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            box["err"] = exc

    th = threading.Thread(target=go)
    th.start()
    seen: set[tuple[str, int]] = set()
    ranks_seen = 0
    while th.is_alive():
        pids = [p for p in children(os.getpid())]
        ranks_seen = max(ranks_seen, len(pids))
        seen |= {(addr, port) for _, addr, port in listening(pids)}
        time.sleep(0.1)
    th.join()
    assert "err" not in box, box.get("err")
    assert ranks_seen >= 2
    assert seen, "expected gloo's loopback listeners to be visible"
    bad = [(a, p) for a, p in seen if not ipaddress.ip_address(a).is_loopback]
    assert not bad, f"listening beyond loopback: {bad}"

    for cfg, s in zip(cases, box["out"][:3]):
        emu = _emulate(cfg)
        assert emu["diverged"] and s["diverged"], cfg.schedule
        assert s["diverged_at"] == emu["diverged_at"], cfg.schedule
        assert [v is None for v in s["losses"]] == [v is None for v in emu["losses"]], cfg.schedule
        assert [v for v in s["losses"] if v is not None] == pytest.approx(
            [v for v in emu["losses"] if v is not None], rel=1e-5), cfg.schedule
        assert s["losses"][-1] is None and s["final_loss"] is None and s["final_test_accuracy"] is None
        folder = tmp_path / cfg.schedule
        on_disk = json.loads((folder / "summary.json").read_text())  # strict JSON (no NaN)
        assert on_disk["diverged_at"] == s["diverged_at"]
        steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert len(steps) == cfg.iterations and steps[s["diverged_at"]]["loss"] is None
    assert box["out"][3]["diverged"] is False and box["out"][3]["diverged_at"] is None


def test_closing_the_group_joins_gloos_threads_even_after_a_dispatch_mode(tmp_path):
    """Regression test of the shutdown SIGABRT: the partitioner's FlopCounterMode (run after
    the rendezvous) used to keep the process group alive past destroy_process_group, so
    gloo's threads were only torn down during interpreter shutdown."""
    import subprocess

    script = f"""
import os
from stalesim.executor.faults import Beacon
from stalesim.executor.rank import RankContext
from stalesim.runtime.build import build_stage_modules
from stalesim.runtime.config import TrainConfig
from stalesim.schedule import build_schedule
ctx = RankContext.create(rank=0, world=1, local_rank=0, devices={{"kind": "cpu"}}, timeout_s=30,
                         beacon=Beacon(None), rendezvous={{"kind": "file", "path": {str(tmp_path / "store")!r}}})
cfg = TrainConfig(model="lenet5", dataset="synthetic", schedule="stale", stages=2, iterations=2).check()
build_stage_modules(cfg, build_schedule(cfg.schedule_config(2)))  # the FLOP probe runs here
ctx.close()
names = [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(sorted(n for n in names if "gloo" in n))
"""
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"
