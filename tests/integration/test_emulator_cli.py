"""`stalesim emulate` / `stalesim study` from the command line: outputs, errors, exit codes."""

from __future__ import annotations

import json
import math

import pytest
from _cli import run_cli

from stalesim.cli import main

SYN = ["emulate", "--model", "lenet5", "--dataset", "synthetic", "--synthetic-size", "128",
       "--batch-size", "16", "--quiet"]


def test_emulate_json_and_run_folder(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, SYN + ["--schedule", "stale", "--stages", "4", "--iterations", "10",
                                     "--out", str(tmp_path), "--json"])
    assert rc == 0
    s = json.loads(out)
    assert s["staleness_ir"] == [6, 4, 2, 0]
    assert len(s["losses"]) == 10 and all(math.isfinite(x) for x in s["losses"])
    assert s["final_test_accuracy"] is not None and s["diverged"] is False
    assert s["data_note"] == "synthetic data" and s["wall_time_s"] > 0 and s["versions_match_ir"]
    for name in ("config.json", "metrics.jsonl", "versions.jsonl", "summary.json"):
        assert (tmp_path / name).is_file()
    lines = [json.loads(x) for x in (tmp_path / "versions.jsonl").read_text().splitlines()]
    assert {"worker", "stage", "action", "version"} <= set(lines[0])
    steps = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"step", "loss", "lr", "wall_time_s"} <= set(steps[0])


@pytest.mark.parametrize("argv,needle", [
    (["--schedule", "stale", "--stages", "2", "--iterations", "3", "--lr", "-1"], "--lr"),
    (["--schedule", "bogus", "--iterations", "3"], "schedule: unknown"),
    (["--schedule", "dp", "--workers", "3", "--iterations", "3"], "batch_size"),
    (["--schedule", "stale", "--stages", "2", "--iterations", "3", "--resume"], "resume"),
    (["--schedule", "stale", "--ppv", "9", "--iterations", "3"], "ppv"),
    (["--schedule", "stale", "--stages", "2", "--epochs", "1", "--iterations", "3"], "not allowed"),
    (["--schedule", "stale", "--stages", "2", "--iterations", "3", "--compression", "fp16"], "compression"),
])
def test_bad_flags_exit_2_with_one_line(capsys, argv, needle):
    rc, _, err = run_cli(capsys, SYN + argv)  # argparse's own usage errors come back as 2 too
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_batches_is_not_a_training_flag(capsys):
    """The run length of a training command is --iterations; --batches/-N (the schedule
    commands' N) is refused there by argparse, and is not in --help."""
    for flag in ("-N", "--batches"):
        rc, out, err = run_cli(capsys, SYN + ["--schedule", "stale", "--stages", "2", flag, "3", "--json"])
        assert rc == 2 and out == ""
        assert err.strip() == f"stalesim: error: unrecognized arguments: {flag} 3"
    with pytest.raises(SystemExit):
        main(["emulate", "--help"])
    text = capsys.readouterr().out
    assert "--iterations" in text and "--batches" not in text


def test_bad_flag_via_argparse_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(SYN + ["--iterations", "0"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_missing_data_offline_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("STALESIM_NO_DOWNLOAD", "1")
    monkeypatch.setenv("STALESIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("STALESIM_DATA", raising=False)
    (tmp_path / "none").mkdir()  # a folder without the data set
    rc, _, err = run_cli(capsys, ["emulate", "--dataset", "mnist", "--data-dir", str(tmp_path / "none"),
                               "--iterations", "2", "--quiet"])
    assert rc == 2 and "looked in" in err and str(tmp_path / "none") in err
    # a --data-dir that is not a folder at all is refused before anything is loaded
    rc, _, err = run_cli(capsys, ["emulate", "--dataset", "mnist", "--data-dir", str(tmp_path / "nowhere"),
                               "--iterations", "2", "--quiet"])
    assert rc == 2 and "data_dir: " in err and "is not a folder" in err


def test_divergence_is_not_a_crash(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, SYN + ["--schedule", "stale", "--stages", "2", "--iterations", "40",
                                     "--lr", "1e9", "--momentum", "0", "--out", str(tmp_path), "--json"])
    assert rc == 0
    s = json.loads(out)
    assert s["diverged"] is True and s["diverged_at"] is not None
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"] is True


@pytest.mark.slow
def test_study_grid_writes_table_and_plot(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, ["study", "--model", "lenet5", "--dataset", "synthetic",
                               "--synthetic-size", "64", "--batch-size", "16", "--iterations", "4",
                               "--schedules", "sequential,stale", "--placements", "2",
                               "--mitigations", "spike-compensation", "--seeds", "0,1",
                               "--jobs", "2", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    for name in ("table.csv", "table.md", "accuracy_vs_staleness.png", "results.jsonl"):
        assert (tmp_path / name).is_file()
    md = (tmp_path / "table.md").read_text()
    assert "± " in md and "spike-compensation" in md
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2 + 2


def test_study_grid_expansion():
    from stalesim.emulator.study import expand, parse_placements
    from stalesim.runtime.config import TrainConfig

    base = TrainConfig(dataset="synthetic", iterations=2)
    places = parse_placements("2;1,2;S4;none")
    assert places == [[2], [1, 2], 4, []]
    pts = expand(base, ["sequential", "stale"], places, ["none", "spike-compensation"], [0, 1])
    # sequential once per seed (placement-free, no mitigation); stale 4 x 2 x 2
    assert len(pts) == 2 + 16
    ids = [rid for rid, _ in pts]
    assert "stale_ppv1-2_spike-compensation_seed1" in ids and "stale_S4_none_seed0" in ids
    cfg = dict(pts)["stale_ppv1-2_spike-compensation_seed1"]
    assert cfg.ppv == [1, 2] and cfg.spike_compensation and cfg.seed == 1


@pytest.mark.data
@pytest.mark.slow
def test_lenet5_mnist_stale_real_data(capsys, real_data_dir):
    """The issue's done-when command, shortened to 80 iterations to keep CI fast.

    Staleness 6 on stage 0 with momentum 0.9 and lr 0.05 diverges within 50 steps
    (a real effect of the stale pipeline); plain SGD at lr 0.05 learns steadily.
    """
    rc, out, _ = run_cli(capsys, ["emulate", "--model", "lenet5", "--dataset", "mnist", "--data-dir",
                               str(real_data_dir), "--schedule", "stale", "--stages", "4",
                               "--iterations", "80", "--lr", "0.05", "--momentum", "0",
                               "--json", "--quiet"])
    assert rc == 0
    s = json.loads(out)
    assert s["staleness_ir"] == [6, 4, 2, 0]
    assert s["versions_match_ir"] and not s["diverged"]
    assert math.isfinite(s["final_loss"]) and s["final_loss"] < s["losses"][0] - 0.2
    assert s["final_test_accuracy"] > 0.3  # chance is 0.1


@pytest.fixture
def no_training(monkeypatch):
    """Building the emulator (model, data, training) is an error: the input must be refused first."""
    import stalesim.emulator.replay as replay

    def boom(*a, **k):
        raise AssertionError("the emulator was built for input that should have been refused up front")

    monkeypatch.setattr(replay, "Emulator", boom)


@pytest.mark.parametrize("argv,needle", [
    (["--stages", "1000000", "--iterations", "1"], "stages: 1000000 stages requested but model 'lenet5' has only 5"),
    (["--model", "resnet6000002", "--iterations", "1"], "deeper than this tool builds"),
    (["--model", "nosuch", "--iterations", "1"], "model: unknown model 'nosuch'"),
    (["--iterations", "1", "--batch-size", "1000"], "larger than the training set"),
    (["--schedule", "stale", "-S", "4", "--iterations", "1000000"], "actions"),
    (["--epochs", "1000000", "--batch-size", "1"], "more iterations than this tool runs"),
    (["--iterations", "1", "--lr", "nan"], "argument --lr"),
    (["--iterations", "1", "--seed", str(2**40)], "larger than this tool handles"),
    (["--iterations", "1", "--synthetic-size", "10000000"], "larger than this tool handles"),
    (["--iterations", "1", "--data-dir", "/no/such/folder"], "is not a folder"),
])
def test_absurd_input_refused_before_building(capsys, no_training, argv, needle):
    """Bad-input probe: `emulate -S 1000000` hung building a schedule; every such input is now
    answered before the model, the data or the schedule is built."""
    argv = ["emulate", "--dataset", "synthetic", "--synthetic-size", "128", "--batch-size", "16", *argv]
    try:
        rc, _, err = run_cli(capsys, argv)
    except SystemExit as exc:
        rc, err = exc.code, capsys.readouterr().err
    assert rc == 2 and err.startswith("stalesim: error: ") and needle in err, err
    assert len(err.strip().splitlines()) == 1


def test_run_folder_problems_refused_before_building(capsys, no_training, tmp_path):
    """Bad-input probe: `emulate --out FILE` failed after loading data and building the model."""
    f = tmp_path / "a-file"
    f.write_text("x")
    rc, _, err = run_cli(capsys, SYN + ["--iterations", "1", "--out", str(f)])
    assert rc == 2 and "exists and is not a folder" in err
    rc, _, err = run_cli(capsys, SYN + ["--iterations", "1", "--out", str(tmp_path / "run"), "--resume"])
    assert rc == 2 and "resume: no checkpoint in" in err
