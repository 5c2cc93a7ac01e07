"""``stalesim simulate`` through the CLI, including bad input (exit 2, one line)."""

import json
import subprocess
import sys

import pytest

from stalesim.cli import main
from stalesim.figures.common import SHAPE_PROFILES
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def prof_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("p") / "u8.json"
    uniform_profile(8, 1e-3, 2e-3, 128).to_json(p)
    return str(p)


def sim_json(capsys, *args):
    assert main(["simulate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_done_when_flush(capsys, prof_path, name):
    d = sim_json(capsys, "--profile", prof_path, "--schedule", name, "--stages", "4", "-M", "8",
                 "--link", "ideal")
    assert d["iteration_time_s"] == pytest.approx(8.25e-3, rel=1e-12)


@pytest.mark.parametrize("name", ["pipedream", "stale"])
def test_done_when_async(capsys, prof_path, name):
    d = sim_json(capsys, "--profile", prof_path, "--schedule", name, "--stages", "4",
                 "--link", "ideal")
    assert d["iteration_time_s"] == pytest.approx(6e-3, rel=1e-12)
    assert d["speedup"] == pytest.approx(4.0, rel=1e-12)


def _with_flops(path, flops):
    """The uniform profile with FLOPs per layer (what --target re-times from)."""
    from stalesim.workloads.profile import profile_from_dict

    d = uniform_profile(8, 1e-3, 2e-3, 128).to_dict()
    for layer in d["layers"]:
        layer["flops"] = flops
    profile_from_dict(d).to_json(path)
    return str(path)


def test_trace_plot_and_text(capsys, tmp_path):
    t, g = tmp_path / "t.json", tmp_path / "g.png"
    prof_path = _with_flops(tmp_path / "f.json", 10**9)
    assert main(["simulate", "--profile", prof_path, "--schedule", "stale", "-S", "4",
                 "--target", "h100-sxm", "--link", "nvlink4", "--trace", str(t),
                 "--plot", str(g)]) == 0
    out = capsys.readouterr().out
    assert "iteration time" in out and "roofline" in out and "speed-up" in out
    from stalesim.trace import check_chrome_trace

    assert check_chrome_trace(json.loads(t.read_text())) == [] and g.stat().st_size > 0


def test_default_hardware_is_stated(capsys, prof_path):
    assert main(["simulate", "--profile", prof_path, "--schedule", "pipedream", "-S", "2"]) == 0
    assert "profile's own device with an ideal link" in capsys.readouterr().out


def test_hardware_json_and_fast_method(capsys, prof_path, tmp_path):
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"schema_version": 1, "device": "cpu-core",
                              "link": {"name": "loop", "latency_s": 1e-5, "bandwidth_Bps": 1e9},
                              "comm_overlaps_compute": False, "cpu_comm_occupancy": 0.5}))
    d = sim_json(capsys, "--profile", prof_path, "--schedule", "dp", "-S", "2", "-P", "2",
                 "--hardware", str(hw), "--method", "fast")
    assert d["method"] == "fast" and d["hardware"]["cpu_comm_occupancy"] == 0.5


def test_bad_input_subprocess_exit_2(prof_path):
    proc = subprocess.run([sys.executable, "-m", "stalesim", "simulate", "--profile", prof_path,
                           "--schedule", "stale", "-S", "9"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("stalesim: error: stages")


def test_bad_input_exit_2_one_line(prof_path, tmp_path, capsys):
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"schema_version": 1, "device": "cpu-core",
                                "link": {"name": "x", "latency_s": 0, "bandwidth_Bps": 0}}))
    cases = [
        (["--hardware", str(zero)], "bandwidth_Bps"),
        (["--schedule", "2bw", "-S", "4", "-M", "2"], "microbatches"),
        (["--target", "tpu-v9"], "device"),
        (["--ppv", "9"], "ppv[0]"),
        (["-S", "9"], "stages"),
        (["-M", "3", "--schedule", "gpipe", "-S", "2"], "batch_size"),
    ]
    for extra, needle in cases:
        args = ["--profile", prof_path, "--schedule", "stale", "-S", "2"]
        # later flags win in argparse
        rc = main(["simulate", *args, *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2, (extra, err)
        assert err.startswith("stalesim: error:") and needle in err and "\n" not in err, (extra, err)


def test_json_and_text_say_where_costs_came_from(capsys, prof_path):
    d = sim_json(capsys, "--profile", prof_path, "--schedule", "gpipe", "--stages", "2", "-M", "8",
                 "--batch-size", "128")
    assert d["cost_source"] == "extrapolated" and d["warnings"] == []  # micro-batch 16 < 128
    assert d["cost_detail"]["action_batch"]["source"] == "extrapolated"
    assert d["cost_detail"]["batch_size"]["source"] == "measured"
    assert d["cost_detail"]["measured_range"] == [128, 128]
    assert main(["simulate", "--profile", prof_path, "--schedule", "gpipe", "--stages", "2",
                 "-M", "8", "--extrapolate", "trend"]) == 0
    out = capsys.readouterr().out
    assert "costs            extrapolated (profiled at batch 128), extrapolation rule trend" in out
    assert "note: costs EXTRAPOLATED outside the profiled batch sizes (action batch 16: below" in out


def test_bad_extrapolate_exit_2(capsys, prof_path):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--profile", prof_path, "--schedule", "gpipe", "--extrapolate", "linear"])
    assert exc.value.code == 2
    assert "--extrapolate" in capsys.readouterr().err


def test_roofline_batch_scaling_matches_figure_code(capsys):
    """Regression: the CLI (roofline at the profile's batch 8, simulated at 128) and the figure
    code (profile scaled to 128, then roofline) give the same sequential time."""
    from stalesim.schedule import ScheduleConfig
    from stalesim.sim import SimOptions, simulate
    from stalesim.workloads.hardware import hardware_from_catalog, roofline_profile
    from stalesim.workloads.profile import load_profile

    path = SHAPE_PROFILES / "resnet56_b8_shape.json"
    d = sim_json(capsys, "--profile", str(path), "--schedule", "stale", "--stages", "2", "--ppv", "19",
                 "--batch-size", "128", "--target", "h100-sxm")
    fig = simulate(roofline_profile(load_profile(path).at_batch_size(128), "h100-sxm"),
                   ScheduleConfig("stale", stages=2), hardware_from_catalog("h100-sxm", "ideal"),
                   SimOptions(ppv=(19,)))
    assert d["sequential_time_s"] == pytest.approx(fig.sequential_time_s, rel=1e-9)
    assert d["iteration_time_s"] == pytest.approx(fig.iteration_time_s, rel=1e-9)
    assert d["sequential_time_s"] == pytest.approx(1.895e-3, rel=2e-3)  # was 6.245 ms
    assert d["cost_source"] == "roofline"
def test_replicas_and_cluster_flags(capsys, prof_path, tmp_path):
    # -P is the data-parallel degree: replicas of a pipeline schedule (alias --replicas)
    base = ["--profile", prof_path, "--schedule", "1f1b", "-S", "4", "-M", "4", "-B", "512", "-N", "40"]
    d = sim_json(capsys, *base, "-P", "8", "--node", "dgx-h100", "--bucket-mb", "25")
    assert d["devices"] == 32 and d["workers"] == 8 and d["method"] == "symmetric"
    assert len(d["utilization"]) == 4 and [r["devices"] for r in d["device_roles"]] == [8] * 4
    assert len(d["allreduce_s"]) == len(d["allreduce_exposed_s"]) == 4
    assert d["cluster"]["nodes"] == 4 and d["cluster"]["placement"] == "pipeline"
    assert d["hardware"]["cluster"]["node_size"] == 8 and d["hardware"]["device"] == "h100-sxm"
    assert d["symmetry"]["extrapolated"] and d["symmetry"]["representatives_simulated"] == 1
    e = sim_json(capsys, *base, "--replicas", "8", "--link", "nvlink4",
                 "--node-size", "8", "--inter-link", "ib-ndr", "--bucket-mb", "25", "--no-symmetry")
    assert e["method"] == "event" and e["iteration_time_s"] == d["iteration_time_s"]
    assert e["utilization"] == d["utilization"] and e["allreduce_exposed_s"] == d["allreduce_exposed_s"]
    hw = tmp_path / "cluster.json"
    hw.write_text(json.dumps({"cluster": "dgx-h100"}))
    f = sim_json(capsys, *base, "-P", "8", "--hardware", str(hw), "--placement", "data")
    assert f["cluster"]["placement"] == "data" and f["hardware"]["cluster"]["inter_link"] == "ib-ndr"
    # --node and a hardware JSON naming the node are the same cluster: the same answer
    h = sim_json(capsys, *base, "-P", "8", "--hardware", str(hw))
    assert h["iteration_time_s"] == d["iteration_time_s"] and h["hardware"] == d["hardware"]
    assert main(["simulate", *base, "-P", "8", "--node", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert "32 devices on 4 node(s) of 8" in out and "all-reduce       " in out and "x8" in out
    # dp: -P stays its workers, now on nodes
    g = sim_json(capsys, "--profile", prof_path, "--schedule", "dp", "-S", "2", "-P", "16", "--node", "dgx-a100")
    assert g["devices"] == 16 and g["cluster"]["nodes"] == 2 and len(g["device_roles"]) == 1


def test_cluster_flag_errors_exit_2_one_line(prof_path, capsys):
    base = ["simulate", "--profile", prof_path, "--schedule", "1f1b", "-S", "2", "-M", "2"]
    cases = [
        (["--node-size", "8"], "inter_link: a cluster needs both"),
        (["--inter-link", "ib-ndr"], "node_size: a cluster needs both"),
        (["--node", "dgx-q"], "node: unknown 'dgx-q'"),
        (["--node-size", "8", "--inter-link", "tin-can"], "link: unknown 'tin-can'"),
        (["--intra-link", "nvlink4", "--link", "pcie4-x16"], "--intra-link: 'nvlink4' contradicts --link"),
        (["--inter-algorithm", "tree"], "inter_algorithm: needs a cluster"),
        (["-P", "3"], "batch_size: 128 is not divisible by replicas x microbatches"),
        (["-P", "2", "--topology", "bus"], "topology: bus"),
    ]
    for extra, needle in cases:
        rc = main([*base, *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.startswith("stalesim: error:") and needle in err and "\n" not in err, (extra, err)
    with pytest.raises(SystemExit):
        main([*base, "--bucket-mb", "0"])


def _one_line(capsys, argv, needle):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("stalesim: error: ") and needle in err and len(err.strip().splitlines()) == 1, err


def test_probe_items_bad_numbers(capsys, prof_path, tmp_path):
    """Bad-input probe: -N 1e6 hung, 1e300 s raised OverflowError, NaN loss time, a .txt plot."""
    p = str(prof_path)
    _one_line(capsys, ["simulate", "--profile", p, "--schedule", "stale", "-S", "4", "-N", "1000000"], "actions")
    _one_line(capsys, ["simulate", "--profile", p, "--schedule", "stale", "-S", "2", "--loss-time", "nan"],
              "simulate: argument --loss-time")
    _one_line(capsys, ["simulate", "--profile", p, "--schedule", "stale", "-S", "2", "--loss-time", "1e300"],
              "larger than this tool handles")
    _one_line(capsys, ["simulate", "--profile", p, "--schedule", "stale", "-S", "2",
                       "--plot", str(tmp_path / "g.txt")], "unsupported figure format")
    with open(prof_path) as fh:
        d = json.load(fh)
    d["layers"][0]["forward_s"] = 1e300
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(d))
    _one_line(capsys, ["simulate", "--profile", str(huge), "--schedule", "stale", "-S", "2"],
              "layers[0].forward_s: 1e+300 is larger than this tool handles")


def test_event_simulation_is_bounded(capsys, prof_path):
    """A very long event simulation is refused with the way out (the closed form) named;
    the closed form takes the same length at once."""
    p = str(prof_path)
    _one_line(capsys, ["simulate", "--profile", p, "--schedule", "gpipe", "-N", "200000"], "method fast")
    assert main(["simulate", "--profile", p, "--schedule", "gpipe", "-N", "200000", "--method", "fast"]) == 0


def test_broken_hardware_is_an_error(capsys, prof_path, tmp_path):
    bad = tmp_path / "hw.json"
    bad.write_text('{"schema_version": 1, "device": "h100-sxm", "li')
    _one_line(capsys, ["simulate", "--profile", str(prof_path), "--schedule", "stale", "-S", "2",
                       "--hardware", str(bad)], "not valid JSON")
    bad.write_text(json.dumps({"device": "h100-sxm", "link": {"name": "l", "latency_s": 1e300,
                                                              "bandwidth_Bps": 1e9}}))
    _one_line(capsys, ["simulate", "--profile", str(prof_path), "--schedule", "stale", "-S", "2",
                       "--hardware", str(bad)], "link.latency_s")
