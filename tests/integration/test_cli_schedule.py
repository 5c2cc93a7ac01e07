import json
import subprocess
import sys

import pytest

from stalesim.cli import main


def test_json_output(capsys):
    assert main(["schedule", "stale", "--stages", "4", "--batches", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"] == "stale" and out["stages"] == 4
    assert out["staleness"] == [6, 4, 2, 0]
    assert set(out["actions"]) == {"0", "1", "2", "3"}
    assert out["actions"]["3"][:4] == ["3RECV_F0", "3F0v0", "3LOSS0", "3B0v0"]
    assert {"stage", "batch", "v_f", "v_b", "u"} <= set(out["versions"][0])
    assert len(out["versions"]) == 4 * 16


def test_text_output_has_grid_and_table(capsys):
    assert main(["schedule", "1f1b", "-S", "2", "-M", "3", "-N", "1"]) == 0
    out = capsys.readouterr().out
    assert "dev0" in out and "dev1" in out and "0F0.0" in out
    assert "staleness  0" in out


def test_bad_input_exit_2_one_line():
    for args, needle in [
        (["schedule", "nope"], "schedule: unknown 'nope'"),
        (["schedule", "gpipe", "--stages", "0"], "--stages"),
        (["schedule", "gpipe", "-M", "x"], "--microbatches"),
        (["schedule", "2bw", "-S", "6", "-M", "2"], "2bw needs microbatches"),
    ]:
        proc = subprocess.run([sys.executable, "-m", "stalesim", *args], capture_output=True, text=True)
        assert proc.returncode == 2, args
        assert needle in proc.stderr
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_closed_pipe_is_quiet():
    """`stalesim ... --json | head -1` must not print a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "stalesim", "schedule", "stale", "-S", "8", "-N", "64",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err


def _fails_fast(capsys, argv, needle):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.startswith("stalesim: error: "), (argv, err)
    assert len(err.strip().splitlines()) == 1


def test_huge_schedules_refused_up_front(capsys):
    """Bad-input probe: -S/-N/-M/-P of a million hung; now one line at once."""
    _fails_fast(capsys, ["schedule", "gpipe", "-N", "1000000"], "more than this command prints")
    _fails_fast(capsys, ["schedule", "stale", "-S", "1000000"], "actions")
    _fails_fast(capsys, ["schedule", "gpipe", "-M", "1000000"], "actions")
    _fails_fast(capsys, ["schedule", "dp", "-P", "1000000"], "actions")
    _fails_fast(capsys, ["schedule", "stale", "-S", str(10**30)], "larger than this tool handles")


def test_argparse_errors_name_the_command_with_the_stalesim_prefix(capsys):
    _fails_fast(capsys, ["schedule", "gpipe", "--stages", "nan"], "stalesim: error: schedule: argument --stages")


def test_workers_for_a_pipeline_only_schedule_are_refused(capsys):
    """Bad-input probe: `schedule gpipe -P 2` dropped -P silently (exit 0); emulate refused it."""
    _fails_fast(capsys, ["schedule", "gpipe", "-S", "2", "-P", "2"], "workers: schedule 'gpipe' is not data-parallel")
    _fails_fast(capsys, ["schedule", "stale", "-S", "2", "--workers", "3"], "is not data-parallel")
    assert main(["schedule", "dp", "-P", "2"]) == 0


def test_every_new_schedule_prints_json_and_grid(capsys):
    for name, extra in [("interleaved-1f1b", ["-V", "2"]), ("looped-bfs", []), ("zb-h1", []),
                        ("zb-h2", []), ("zb-v", []), ("dualpipev", ["-M", "8"]),
                        ("interleaved-pipedream", []), ("interleaved-2bw", ["-M", "8"])]:
        args = ["schedule", name, "-S", "8", "-M", "4", "-N", "3", *extra]
        assert main([*args, "--json"]) == 0, name
        d = json.loads(capsys.readouterr().out)
        assert d["devices"] in (4, 8) and d["stages_per_device"] * d["devices"] == 8
        assert main(args) == 0
        assert "dev0" in capsys.readouterr().out


def test_from_torch_and_to_torch_csv(capsys, tmp_path):
    assert main(["schedule", "--from-torch", "ZBVZeroBubble", "--ranks", "2", "-M", "4"]) == 0
    out = capsys.readouterr().out
    assert "identical to stalesim's 'zb-v'" in out and "3I0.0" in out
    path = tmp_path / "i.csv"
    assert main(["schedule", "interleaved-1f1b", "-S", "8", "-M", "8", "--to-torch-csv", str(path)]) == 0
    capsys.readouterr()
    rows = path.read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("0F0,0F1,0F2,0F3,4F0")
    assert main(["schedule", "--from-torch-csv", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stages"] == 8 and d["devices"] == 4 and d["placement"] == [[0, 1, 2, 3, 0, 1, 2, 3]]


def test_torch_interop_errors_exit_2_one_line(tmp_path):
    for args, needle in [
        (["schedule", "--from-torch", "1F1B", "--ranks", "4", "-M", "8"], "reports 3F8 on rank 3"),
        (["schedule", "--from-torch", "Nope", "--ranks", "2"], "unknown torch schedule"),
        (["schedule", "--from-torch", "GPipe"], "--ranks"),
        (["schedule", "--from-torch", "GPipe", "--ranks", "2", "-S", "4"], "--stages: not with"),
        (["schedule", "pipedream", "-S", "3", "--to-torch-csv", str(tmp_path / "x.csv")],
         "asynchronous"),
        (["schedule", "zb-v", "-S", "5"], "stages_per_device: 2 does not divide stages=5"),
        (["schedule", "dualpipev", "-S", "8", "-M", "4"], "dualpipev needs microbatches >= stages"),
        (["schedule", "gpipe", "-S", "4", "-V", "2"], "places one stage per device"),
        (["schedule", "gpipe", "--ranks", "2"], "--ranks/--stages-per-rank: only with --from-torch"),
    ]:
        proc = subprocess.run([sys.executable, "-m", "stalesim", *args], capture_output=True, text=True)
        assert proc.returncode == 2, args
        assert needle in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_torch_interop_bad_or_huge_input_is_one_line_at_once(capsys, tmp_path):
    """Fuzz findings after the interop landed: a million ranks or micro-batches, a huge stage
    index in a CSV, a FIFO or binary CSV hung or raised UnicodeDecodeError; now one line."""
    import os

    big = tmp_path / "big.csv"
    big.write_text("0F0,0B0,999999999F0\n")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"0F0,\xd0\xff\n")
    ok = tmp_path / "ok.csv"
    ok.write_text("0F0,0B0\n")
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for argv, needle in [
        (["--from-torch", "GPipe", "--ranks", "1000000", "-M", "4"], "more than this command prints"),
        (["--from-torch", "Interleaved1F1B", "--ranks", "4", "-M", "8", "--stages-per-rank", "1000000"],
         "more than this command prints"),
        (["--from-torch", "GPipe", "--ranks", "2", "-M", "2", "-N", "1000000"], "more than this command prints"),
        (["--from-torch-csv", str(big)], "stage 1 appears on no rank"),
        (["--from-torch-csv", str(binary)], "not UTF-8 text"),
        (["--from-torch-csv", str(fifo)], "not a regular file"),
        (["--from-torch-csv", str(tmp_path)], "a folder"),
        (["--from-torch-csv", str(ok), "-N", "1000000"], "more than this command prints"),
    ]:
        _fails_fast(capsys, ["schedule", *argv], needle)


def test_torch_import_bounds_in_the_library():
    from stalesim.errors import ScheduleError
    from stalesim.schedule.actions import Kind
    from stalesim.schedule.torch_interop import schedule_from_orders, torch_orders

    with pytest.raises(ScheduleError, match="actions per step, more than this tool imports"):
        torch_orders("ZBVZeroBubble", 64, 256)
    with pytest.raises(ScheduleError, match="micro-batch 1 appears in no action"):
        schedule_from_orders({0: [(Kind.F, 0, 0), (Kind.B, 0, 0), (Kind.F, 0, 10**12)]})
    with pytest.raises(ScheduleError, match="more than this tool builds"):
        schedule_from_orders({0: [(Kind.F, 0, 0), (Kind.B, 0, 0)]}, batches=10**7)
