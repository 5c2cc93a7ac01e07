"""``stalesim sweep`` through the CLI."""

import json

import pytest

from stalesim.cli import main
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def prof_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("p") / "u8.json"
    uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=10_000).to_json(p)
    return str(p)


def test_sweep_table_and_csv(capsys, prof_path, tmp_path):
    out_csv = tmp_path / "s.csv"
    assert main(["sweep", "--profile", prof_path, "--schedules", "gpipe,stale,pipedream",
                 "--stages", "2,4", "-M", "1,8", "--links", "ideal,10gbe", "--jobs", "2",
                 "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    assert "ranked by throughput" in out and "rank" in out
    lines = out_csv.read_text().splitlines()
    assert len(lines) == 1 + (2 * 2 + 2 + 2) * 2


def test_sweep_json_ppv_candidates(capsys, prof_path):
    assert main(["sweep", "--profile", prof_path, "--schedules", "pipedream",
                 "--ppv-candidates", "1,2,3", "2,4,6", "--json", "--method", "event"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["ppv"] for r in rows] == ["2,4,6", "1,2,3"]
    assert rows[0]["speedup"] == pytest.approx(4.0)


def test_sweep_bad_device_exit_2(capsys, prof_path):
    assert main(["sweep", "--profile", prof_path, "--schedules", "gpipe", "-S", "2",
                 "--targets", "nope"]) == 2
    assert "device" in capsys.readouterr().err


def test_sweep_rows_carry_cost_source_and_plot(capsys, prof_path, tmp_path):
    out_csv, png = tmp_path / "s.csv", tmp_path / "s.png"
    assert main(["sweep", "--profile", prof_path, "--schedules", "gpipe,dp", "-S", "2", "-M", "1,8",
                 "-P", "1,2", "--csv", str(out_csv), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "profile: measured at batch 128; outside that: conservative extrapolation" in out
    assert "marks: * costs extrapolated" in out
    import csv

    rows = {(r["schedule"], r["microbatches"], r["workers"]): r for r in csv.DictReader(out_csv.open())}
    g1, g8, dp = rows[("gpipe", "1", "1")], rows[("gpipe", "8", "1")], rows[("dp", "1", "2")]
    # -P is the data-parallel degree for every schedule: 2 replicas of gpipe run batch 64 each
    g12 = rows[("gpipe", "1", "2")]
    assert (g12["devices"], g12["action_batch"], g12["action_batch_source"]) == ("4", "64", "extrapolated")
    assert (g1["cost_source"], g1["action_batch"], g1["action_batch_source"]) == ("measured", "128", "measured")
    assert (g8["cost_source"], g8["action_batch"], g8["action_batch_source"]) == ("extrapolated", "16",
                                                                                   "extrapolated")
    assert dp["action_batch"] == "64" and dp["devices"] == "2" and dp["warnings"] == ""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sweep", "--profile", prof_path, "--schedules", "gpipe", "-S", "2",
                 "--plot", str(tmp_path / "x.txt")]) == 2


def test_sweep_warnings_are_printed(capsys, tmp_path):
    """A profile measured at 16 and 32 whose trend makes batch 64 dear: dp over 2 looks
    super-linear with --extrapolate trend; the table marks it and prints the cause."""
    from stalesim.workloads.profile import profile_from_dict

    def layer(ms, b):
        return {"name": "l0", "forward_s": ms * 1e-3, "backward_s": 2 * ms * 1e-3, "update_s": 0.0,
                "param_bytes": 1000, "output_bytes": 10 * b, "saved_bytes": 10 * b, "flops": 0,
                "weight_layers": 1}

    p = tmp_path / "two.json"
    profile_from_dict({"schema_version": 1, "model": "m", "device": "cpu", "dtype": "float32",
                       "batch_size": 32, "layers": [layer(40.0, 32)],
                       "by_batch_size": [{"batch_size": 16, "layers": [layer(16.0, 16)]},
                                         {"batch_size": 32, "layers": [layer(40.0, 32)]}]}).to_json(p)
    args = ["sweep", "--profile", str(p), "--schedules", "dp", "-S", "1", "-P", "2", "-B", "64"]
    assert main(args + ["--extrapolate", "trend"]) == 0
    out = capsys.readouterr().out
    assert "*!" in out and "WARNING rank 1 dp S=1 M=1 P=2: speed-up" in out
    assert "trend: line through batches 16 and 32" in out
    assert main(args + ["--json"]) == 0  # conservative: no warning
    cap = capsys.readouterr()
    assert json.loads(cap.out)[0]["warnings"] == "" and "warning" not in cap.err
    assert main(args + ["--json", "--extrapolate", "trend"]) == 0
    assert "stalesim: warning: dp S=1 M=1 P=2: speed-up" in capsys.readouterr().err
def test_sweep_replicas_on_a_node(capsys, prof_path):
    assert main(["sweep", "--profile", prof_path, "--schedules", "1f1b,stale", "-S", "2,4", "-M", "4",
                 "--replicas", "1,8", "--node", "dgx-h100", "--placement", "data", "-B", "512", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 8 and not any(r["error"] for r in rows)
    assert {r["devices"] for r in rows} == {2, 4, 16, 32}
    assert {r["device"] for r in rows} == {"h100-sxm"} and {r["link"] for r in rows} == {"nvlink4"}
    assert main(["sweep", "--profile", prof_path, "--schedules", "1f1b", "-S", "2", "-P", "2",
                 "--node-size", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stalesim: error: inter_link: a cluster needs both") and "\n" not in err


def _err(capsys, argv):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("stalesim: error: ") and len(err.strip().splitlines()) == 1, err
    return err


def test_empty_invalid_or_huge_grids_are_errors(capsys, prof_path):
    """Bad-input probe: an empty or entirely invalid grid exited 0 with nothing."""
    base = ["sweep", "--profile", prof_path]
    assert "an empty item" in _err(capsys, [*base, "--schedules", "", "--stages", "2"])
    assert "an empty item" in _err(capsys, [*base, "--schedules", "stale,,dp", "--stages", "2"])
    err = _err(capsys, [*base, "--schedules", "2bw", "--stages", "8", "-M", "1"])
    assert "no configuration of the grid can be simulated (1 tried)" in err and "2bw needs microbatches" in err
    many = ",".join(str(i) for i in range(1, 101))
    assert "combinations are more than one sweep simulates" in _err(
        capsys, [*base, "--schedules", "stale,dp", "--stages", many, "-M", many])
    assert "argument --jobs" in _err(capsys, [*base, "--schedules", "stale", "--stages", "2", "--jobs", "100000"])


def test_tiny_gradient_buckets_are_refused(capsys, tmp_path):
    """Found by the fuzz test: --bucket-mb 1e-300 made 1-byte buckets (an event each: a hang)."""
    p = tmp_path / "p.json"
    uniform_profile(8, 1e-3, 2e-3, 128, param_bytes=1_000_000).to_json(p)
    err = _err(capsys, ["sweep", "--profile", str(p), "--schedules", "stale", "--stages", "2", "-P", "2",
                        "--bucket-mb", "1e-300", "--method", "event"])
    assert "no configuration" in err and "buckets (at most 1,024)" in err
