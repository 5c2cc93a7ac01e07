"""A user's own model, data set and schedule through every command, as a user runs them.

The model and the data set live in the user's own file (``userzoo.py`` in the folder the
commands start in, which is not on ``sys.path``: ``python -P`` as a console script would
run); the commands name them ``userzoo:net`` and ``userzoo:data``. Checked: profile,
partition, simulate, emulate, run on 2 CPU ranks (gloo) with the executor's losses equal to
the emulator's, validate, study and plan; a user schedule file (our JSON, torch's CSV)
through simulate, emulate and run; every mistake is one line with exit status 2, found
before any rank starts. The commands whose output is checked on its own (profile, partition,
simulate, emulate of a schedule file) run in this process, started in the user's folder; the
others as a user starts them, each a process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _fixed_hardware import fixed_hardware

ROOT = Path(__file__).resolve().parents[2]

USER_FILE = textwrap.dedent('''
    """A user's model and data set (nothing of stalesim imported)."""
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset


    def net():
        # each child is a block: a pipeline cut falls between children
        return nn.Sequential(
            nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 16), nn.ReLU()),
            nn.Linear(16, 3),
        )


    def data():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(320, 1, 8, 8, generator=g)
        y = (x.flatten(1) @ torch.randn(64, 3, generator=g)).argmax(1)
        return TensorDataset(x[:256], y[:256]), TensorDataset(x[256:], y[256:])


    def not_a_model():
        return 42
''')

MODEL = ("--model", "userzoo:net", "--dataset", "userzoo:data")
TRAIN = (*MODEL, "--batch-size", "32", "--seed", "3")


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "userzoo.py").write_text(USER_FILE)
    return tmp_path


def stalesim(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``stalesim ARGS`` started in ``cwd`` with only stalesim itself on the path (``-P``: the
    start folder is not put on sys.path, as with the console script)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STALESIM_NO_DOWNLOAD": "1"}
    return subprocess.run([sys.executable, "-P", "-m", "stalesim", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def ok_json(cwd: Path, *args: str) -> dict:
    p = stalesim(cwd, *args)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.fixture
def here_json(user_dir, monkeypatch, capsys):
    """``stalesim ARGS --json`` run in this process, started in the user's folder (the folder
    goes on ``sys.path`` as the command puts it there; the path and the imported ``userzoo``
    are undone after the test). For the commands whose output is what a test checks: each
    saves a process start; the ranks' and the console script's imports are the other tests'."""
    from _cli import run_cli

    monkeypatch.chdir(user_dir)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "userzoo", raising=False)

    def call(*args: str) -> dict:
        rc, out, err = run_cli(capsys, list(args))
        assert rc == 0, err[-2000:]
        return json.loads(out)

    yield call
    sys.modules.pop("userzoo", None)


def one_line_error(p: subprocess.CompletedProcess, prefix: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stalesim: error: {prefix}"), p.stderr
    return lines[0]


def test_profile_partition_simulate(user_dir, here_json, capsys):
    """In this process (the user's module imported as the console script imports it: the
    run, study, plan and validate tests)."""
    from _cli import run_cli

    prof_path = user_dir / "p.json"
    rc, _out, err = run_cli(capsys, ["profile", *MODEL, "--batch-size", "16,32", "--repeats", "1", "--warmup", "0",
                                     "-o", str(prof_path), "-q"])
    assert rc == 0, err
    prof = json.loads(prof_path.read_text())
    assert prof["model"] == "userzoo:net" and len(prof["layers"]) == 3
    assert [lp["weight_layers"] for lp in prof["layers"]] == [1, 1, 1]
    part = here_json("partition", "--profile", str(prof_path), "--stages", "2", "--json")
    assert part["model"] == "userzoo:net" and len(part["ppv"]) == 1
    sim = here_json("simulate", "--profile", str(prof_path), "--schedule", "1f1b", "-S", "2", "-M", "2", "--json")
    assert sim["stages"] == 2 and sim["iteration_time_s"] > 0
    # --model profiles here (simulate and partition take a model as well as a stored profile)
    here = here_json("simulate", *MODEL, "--schedule", "stale", "-S", "3", "-B", "32", "--json")
    assert here["staleness"] == [4, 2, 0] and here["partition"]["ppv"] == [1, 2]
    part3 = here_json("partition", *MODEL, "--stages", "3", "--batch-size", "32", "--json")
    assert part3["ppv"] == [1, 2]


def test_run_on_two_gloo_ranks_equals_the_emulation(user_dir):
    args = (*TRAIN, "--schedule", "stale", "--stages", "2", "--iterations", "12")
    emu = ok_json(user_dir, "emulate", *args, "--json", "--quiet")
    run = ok_json(user_dir, "run", *args, "--devices", "cpu:2", "--json", "--out", str(user_dir / "run"))
    assert emu["model"] == "userzoo:net" and emu["dataset"] == "userzoo:data"
    assert emu["data_note"] == "user data set userzoo:data"
    assert len(emu["losses"]) == 12 and run["losses"] == emu["losses"]  # bit for bit
    assert emu["staleness"] == run["staleness"] == [2, 0] and run["versions_match_ir"]
    assert run["test_accuracy"] == pytest.approx(emu["final_test_accuracy"])
    assert (user_dir / "run" / "summary.json").is_file()


def test_schedule_files_through_simulate_emulate_and_run(user_dir, here_json, capsys):
    """Our JSON (exported, as a user would start) and torch's CSV: each runs the order it
    holds, so it trains exactly as the registered schedule it came from. The files are
    written, simulated and emulated in this process; the runs are a user's commands."""
    from _cli import run_cli

    rc, out, err = run_cli(capsys, ["schedule", "1f1b", "-S", "2", "-M", "2", "-N", "6", "--json"])
    assert rc == 0, err
    (user_dir / "mine.json").write_text(out)  # its output as a user saves it
    rc, _out, err = run_cli(capsys, ["schedule", "gpipe", "-S", "2", "-M", "2", "--to-torch-csv", "order.csv"])
    assert rc == 0 and (user_dir / "order.csv").is_file(), err
    prof = user_dir / "p.json"
    rc, _out, err = run_cli(capsys, ["profile", *MODEL, "--batch-size", "16", "--repeats", "1", "--warmup", "0",
                                     "-o", str(prof), "-q"])
    assert rc == 0, err
    for name, same_as in (("mine.json", ("--schedule", "1f1b", "-S", "2", "-M", "2")),
                          ("order.csv", ("--schedule", "gpipe", "-S", "2", "-M", "2"))):
        sim = here_json("simulate", "--profile", str(prof), "--schedule-file", name, "--json")
        ref = here_json("simulate", "--profile", str(prof), *same_as, "-N", str(sim["batches"]), "--json")
        assert sim["schedule"].endswith(name) and sim["iteration_time_s"] == pytest.approx(ref["iteration_time_s"])
        args = (*TRAIN, "--iterations", "6")
        emu = here_json("emulate", *args, "--schedule-file", name, "--json", "--quiet")
        reg = here_json("emulate", *args, *same_as, "--json", "--quiet")
        run = ok_json(user_dir, "run", *args, "--schedule-file", name, "--devices", "cpu:2", "--json",
                      "--out", str(user_dir / f"run-{name}"))
        assert emu["schedule"].endswith(name) and emu["stages"] == 2 and emu["microbatches"] == 2
        assert emu["losses"] == reg["losses"] == run["losses"]


def test_study_with_the_users_model(user_dir):
    out = user_dir / "study"
    rows = ok_json(user_dir, "study", *TRAIN, "--schedules", "sequential,stale", "--placements", "S2",
                   "--seeds", "0", "--iterations", "4", "--jobs", "1", "--out", str(out), "--json", "--quiet")
    assert {r["schedule"] for r in rows} == {"sequential", "stale"}
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {r["model"] for r in results} == {"userzoo:net"}


@pytest.mark.slow
def test_plan_with_the_users_model(user_dir):
    out = user_dir / "plan"
    p = stalesim(user_dir, "plan", *MODEL, "--devices", "2", "--target-loss", "1.0", "--iterations", "8",
                 "--max-horizon", "8", "--schedules", "stale", "--seeds", "0", "--batch-size", "32",
                 "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr[-2000:]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["model"] == "userzoo:net" and plan["dataset"] == "userzoo:data"
    assert "stale" in {r["schedule"] for r in plan["rows"]}


@pytest.mark.slow
def test_validate_with_the_users_model(user_dir):
    out = user_dir / "val"
    # a fixed link and per-message costs: the calibrations do not touch the user's model
    s = ok_json(user_dir, "validate", *MODEL, "--devices", "cpu:2", "--schedules", "gpipe,stale",
                "--iterations", "8", "--batch-size", "32", "--microbatches", "2", "--repeats", "1",
                "--profile-repeats", "1", "--emulate-iterations", "4", "--no-contention", "--out", str(out),
                "--hardware", str(fixed_hardware(user_dir)), "--json", "--quiet")
    assert s["config"]["model"] == "userzoo:net"
    rows = {r["schedule"]: r for r in s["rows"]}
    assert set(rows) == {"gpipe", "stale"}
    for r in rows.values():  # executor and emulator train the user's model identically
        assert r["max_loss_rel_diff"] == 0.0 and r["measured_iteration_time_s"] > 0


@pytest.mark.parametrize("command, extra", [
    ("profile", ("--batch-size", "8", "-o", "p.json")),
    ("partition", ("--stages", "2")),
    ("simulate", ("--schedule", "stale", "-S", "2")),
    ("emulate", ("--iterations", "2")),
    ("study", ("--iterations", "2", "--seeds", "0", "--out", "s")),
    ("run", ("--schedule", "stale", "--stages", "2", "--iterations", "2", "--devices", "cpu:2")),
    ("validate", ("--out", "v")),
    ("plan", ("--devices", "2", "--target-loss", "1.0", "--out", "pl")),
])
def test_every_command_refuses_a_missing_module_in_one_line(user_dir, command, extra):
    line = one_line_error(stalesim(user_dir, command, "--model", "nowhere_mod:net", *extra), "--model: ")
    assert "cannot import module 'nowhere_mod'" in line


@pytest.mark.parametrize("flags, prefix, needle", [
    (("--model", "userzoo:missing", "--dataset", "userzoo:data"), "--model: ", "has no attribute 'missing'"),
    (("--model", "userzoo:not_a_model", "--dataset", "userzoo:data"), "--model: ",
     "returned a int; expected an nn.Sequential"),
    (("--model", "userzoo:net", "--dataset", "userzoo:net"), "--dataset: ", "returned Sequential"),
    (("--model", "userzoo:net"), "--model: ", "without an input shape"),  # synthetic data: no shape
    (("--model", "userzoo:net", "--dataset", "mnist"), "--model: ",
     "a forward of an input of shape (2, 1, 28, 28) failed"),
])
def test_run_refuses_bad_code_before_any_rank_starts(user_dir, flags, prefix, needle):
    p = stalesim(user_dir, "run", *flags, "--schedule", "stale", "--stages", "2", "--iterations", "2",
                 "--devices", "cpu:2", "--out", "r")
    assert needle in one_line_error(p, prefix)
    assert not (user_dir / "r").exists()  # refused before the run folder or any rank


@pytest.mark.parametrize("args, prefix", [
    (("emulate", *TRAIN, "--schedule-file", "nothere.json", "--iterations", "2"), "--schedule-file "),
    (("emulate", *TRAIN, "--schedule-file", "userzoo.py"), "--schedule-file: "),
    (("emulate", *TRAIN, "--schedule", "1f1b", "--schedule-file", "x.json"), "--schedule-file: "),
    (("simulate", "--model", "lenet5", "--schedule-file", "bad.json"), "--schedule-file: bad.json: "),
    (("run", *TRAIN, "--schedule-file", "bad.json", "--devices", "cpu:2"), "--schedule-file: bad.json: "),
])
def test_bad_schedule_files_are_one_line(user_dir, args, prefix):
    (user_dir / "bad.json").write_text('{"actions": {"0": ["0F0", "0B0", "0U0"]}}')  # no LOSS: refused
    one_line_error(stalesim(user_dir, *args), prefix)


def test_api_run_imports_the_module_from_where_it_was_found(user_dir, tmp_path_factory):
    """A script puts the user's folder on sys.path and runs from elsewhere: the ranks find the
    module through the folder carried in the job, and train as the emulator does."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(user_dir)!r})
        import stalesim
        kw = dict(model="userzoo:net", dataset="userzoo:data", schedule="stale", stages=2,
                  iterations=6, batch_size=32)
        emu = stalesim.emulate(**kw)
        run = stalesim.run(devices="cpu:2", **kw)
        print(json.dumps([emu["losses"], run["losses"]]))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-P", "-c", script], cwd=elsewhere, env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    emu, run = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(emu) == 6 and run == emu
