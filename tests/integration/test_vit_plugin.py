"""A ViT written the usual torch way (examples/vit_plugin.py) as a ``--model`` plug-in through
profile, validate and plan; and a plug-in whose blocks have an unused parameter and a
sub-module returning a tuple, profiled, emulated and run (2 gloo ranks) with the split
backward of a zero-bubble schedule, the executor's losses equal to the emulator's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from _fixed_hardware import fixed_hardware

from stalesim.workloads.own import as_layered
from stalesim.workloads.profiler import BlockSumWarning, profile_model

ROOT = Path(__file__).resolve().parents[2]
VIT = ("--model", "vit_plugin:vit")

ODD_FILE = textwrap.dedent('''
    """Blocks a module-level split backward could not take (nothing of stalesim imported)."""
    import torch
    from torch import nn


    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            h = self.lin(x)
            return h, torch.tanh(h)


    class Odd(nn.Module):
        """A tuple-returning sub-module, a gate read directly and a parameter never read."""

        def __init__(self):
            super().__init__()
            self.pair = Pair()
            self.gate = nn.Parameter(torch.ones(16))
            self.unused = nn.Parameter(torch.zeros(4))

        def forward(self, x):
            h, t = self.pair(x)
            return h * self.gate + t


    def net():
        seq = nn.Sequential(Odd(), Odd(), nn.Linear(16, 10))
        seq.input_shape = (16,)
        return seq
''')


def stalesim(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``stalesim ARGS`` started in ``cwd`` (where the plug-in file is), as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STALESIM_NO_DOWNLOAD": "1"}
    return subprocess.run([sys.executable, "-P", "-m", "stalesim", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def ok(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    p = stalesim(cwd, *args)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture
def vit_dir(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "examples" / "vit_plugin.py", tmp_path / "vit_plugin.py")
    return tmp_path


def test_vit_profiles_every_block_with_i_and_w(vit_dir: Path) -> None:
    ok(vit_dir, "profile", *VIT, "--batch-size", "8", "--repeats", "1", "--warmup", "0", "-o", "p.json", "-q")
    prof = json.loads((vit_dir / "p.json").read_text())
    layers = prof["layers"]
    assert prof["model"] == "vit_plugin:vit" and len(layers) == 6  # patch embedding, 4 encoders, head
    for lp in layers:
        assert lp["forward_s"] > 0 and lp["backward_s"] > 0 and lp["param_bytes"] > 0
        assert lp["backward_input_s"] > 0 and lp["backward_weight_s"] > 0
    # the patch embedding's own parameters (class token, positions) are counted with its conv
    dim, tokens = 32, (32 // 8) ** 2 + 1
    conv = 3 * 8 * 8 * dim + dim
    assert layers[0]["param_bytes"] == 4 * (conv + dim + tokens * dim)


@pytest.mark.slow
def test_vit_validates_a_zero_bubble_schedule_on_two_cpu_ranks(vit_dir: Path) -> None:
    p = ok(vit_dir, "validate", *VIT, "--devices", "cpu:2", "--schedules", "zb-h1", "--iterations", "4",
           "--batch-size", "8", "--microbatches", "2", "--repeats", "1", "--profile-repeats", "1",
           "--emulate-iterations", "2", "--no-contention", "--hardware", str(fixed_hardware(vit_dir)),
           "--out", "val", "--json", "--quiet")
    s = json.loads(p.stdout)
    (row,) = s["rows"]
    assert row["schedule"] == "zb-h1" and row["error"] is None
    assert row["predicted_iteration_time_s"] > 0 and row["measured_iteration_time_s"] > 0
    assert row["max_loss_rel_diff"] == 0.0 and row["versions_match_ir"]  # executor == emulator
    prof = json.loads((vit_dir / "val" / "profile.json").read_text())
    assert all(lp["backward_weight_s"] > 0 for lp in prof["layers"])


@pytest.mark.slow
def test_vit_plan_prints_a_ranked_table(vit_dir: Path) -> None:
    p = ok(vit_dir, "plan", *VIT, "--devices", "2", "--target-loss", "100", "--smooth", "2", "--iterations", "4",
           "--max-horizon", "4", "--warmups", "0", "--schedules", "stale,zb-h1", "--seeds", "0", "--batch-size", "8",
           "--out", "pl", "--quiet")
    assert "# candidate" in p.stdout and "zb-h1 S=2" in p.stdout and "stale S=2" in p.stdout
    rows = json.loads((vit_dir / "pl" / "plan.json").read_text())["rows"]
    ranked = [r for r in rows if r["rank"] is not None]
    assert {r["schedule"] for r in ranked} >= {"stale", "zb-h1"}
    times = [r["time_to_target_s"] for r in sorted(ranked, key=lambda r: r["rank"])]
    assert all(t > 0 for t in times) and times == sorted(times)


@pytest.fixture
def odd_dir(tmp_path: Path) -> Path:
    (tmp_path / "oddblocks.py").write_text(ODD_FILE)
    return tmp_path


def test_odd_blocks_profile_in_process(odd_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(odd_dir))
    import oddblocks  # type: ignore[import-not-found]

    torch.manual_seed(0)
    model = as_layered(oddblocks.net(), "oddblocks:net")
    # one unwarmed repeat of tiny blocks: the block-sum check may warn on its timing, which is not
    # what this test is about (the split backward of odd blocks is)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BlockSumWarning)
        prof = profile_model(model, 8, repeats=1, warmup=0, threads=1)
    assert len(prof.layers) == 3
    for lp in prof.layers:
        assert lp.measured_split and lp.backward_input_s > 0 and lp.backward_weight_s > 0


def test_odd_blocks_train_alike_in_emulator_and_executor(odd_dir: Path) -> None:
    args = ("--model", "oddblocks:net", "--dataset", "synthetic", "--batch-size", "16", "--seed", "1",
            "--stages", "2", "--microbatches", "2", "--iterations", "4", "--json")
    zb = json.loads(ok(odd_dir, "emulate", *args, "--schedule", "zb-h1", "--quiet").stdout)
    run = json.loads(ok(odd_dir, "run", *args, "--schedule", "zb-h1", "--devices", "cpu:2",
                        "--out", "run").stdout)
    ref = json.loads(ok(odd_dir, "emulate", *args, "--schedule", "1f1b", "--quiet").stdout)
    assert len(zb["losses"]) == 4 and run["losses"] == zb["losses"]  # bit for bit
    assert run["versions_match_ir"]
    # I + W is the unsplit backward: the synchronous schedules train the same model
    assert zb["losses"] == pytest.approx(ref["losses"], rel=1e-5)
