"""CLI for profile / partition / calibrate: results, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stalesim.cli import main
from stalesim.workloads.profile import load_profile, uniform_profile


@pytest.fixture()
def prof_path(tmp_path: Path) -> Path:
    p = uniform_profile(6, 1e-3, 2e-3, 32, update_s=1e-4, param_bytes=1 << 20,
                        output_bytes=1 << 20, saved_bytes=1 << 22)
    path = tmp_path / "p.json"
    p.to_json(path)
    return path


def test_profile_and_partition_end_to_end(tmp_path: Path, capsys) -> None:
    out = tmp_path / "lenet.json"
    assert main(["profile", "--model", "lenet5", "--batch-size", "8", "--repeats", "1",
                 "--warmup", "0", "--threads", "1", "-o", str(out), "-q"]) == 0
    prof = load_profile(out)
    assert prof.model == "lenet5" and prof.batch_size == 8 and prof.n_layers == 5
    capsys.readouterr()
    assert main(["partition", "--profile", str(out), "--stages", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["stages"] == 2 and len(res["ppv"]) == 1 and 1 <= res["ppv"][0] <= 4
    rows = res["stage_table"]
    assert sum(r["weight_layers"] for r in rows) == 5
    assert res["bottleneck_s"] == pytest.approx(max(r["time_s"] for r in rows))


def test_partition_text_and_ppv(prof_path: Path, capsys) -> None:
    assert main(["partition", "--profile", str(prof_path), "--stages", "3"]) == 0
    out = capsys.readouterr().out
    assert "PPV (2, 4)" in out and "bottleneck" in out
    assert main(["partition", "--profile", str(prof_path), "--ppv", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["cuts"] == [1] and res["bottleneck_stage"] == 1
    assert res["stage_table"][1]["time_s"] == pytest.approx(5 * 3.1e-3)


def test_partition_of_a_profile_that_costs_nothing_says_so(tmp_path: Path, capsys) -> None:
    # a hand-written profile with zero times: no speed-up to state, and no traceback
    path = tmp_path / "zero.json"
    uniform_profile(4, 0.0, 0.0, 8).to_json(path)
    assert main(["partition", "--profile", str(path), "--stages", "2"]) == 0
    assert "ideal pipelined speed-up n/a (the stages cost 0 s)" in capsys.readouterr().out
    assert main(["partition", "--profile", str(path), "--stages", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ideal_speedup"] is None


def test_partition_comm_and_memory(prof_path: Path, capsys) -> None:
    assert main(["partition", "--profile", str(prof_path), "--stages", "2", "--include-comm",
                 "--bandwidth", "1e9", "--latency", "1e-5", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    comm = 2 * (1e-5 + (1 << 20) / 1e9)
    assert res["stage_table"][0]["comm_s"] == pytest.approx(comm)
    assert res["stage_table"][0]["time_s"] == pytest.approx(3 * 3.1e-3 + comm)
    # memory per layer = 1 MiB params + 4 MiB saved = 5 MiB; limit 16 MiB forces >= 2 stages
    assert main(["partition", "--profile", str(prof_path), "--stages", "2",
                 "--memory-limit", "16MiB", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert all(r["memory_bytes"] <= 16 * 2**20 for r in res["stage_table"])


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["partition", "--profile", "{missing}", "--stages", "2"], "cannot read"),
        (["partition", "--profile", "{p}", "--stages", "9"], "stages: 9 stages requested"),
        (["partition", "--profile", "{p}", "--ppv", "6"], r"ppv\[0\]: 6 is out of range"),
        (["partition", "--profile", "{p}", "--ppv", "3,2"], r"ppv\[1\].*strictly increasing"),
        (["partition", "--profile", "{p}", "--stages", "2", "--memory-limit", "4MiB"],
         "memory_limit: no partition"),
        (["partition", "--profile", "{p}", "--stages", "2", "--include-comm"],
         "needs --bandwidth"),
        (["partition", "--profile", "{bad}", "--stages", "2"], r"layers\[0\]\.forward_s"),
        (["profile", "--model", "resnet21", "--batch-size", "2", "-o", "{out}"], "6n\\+2"),
        (["profile", "--model", "lenet5", "--batch-size", "2", "--device", "tpu", "-o", "{out}"],
         "device"),
        (["partition", "--profile", "{p}", "--stages", "0"], "expected an integer >= 1"),
        (["profile", "--model", "lenet5", "--batch-size", "8,x", "-o", "{out}"], "batch-size"),
        (["calibrate", "--backend", "gloo", "--ranks", "1", "-o", "{out}"], "ranks"),
        (["profile", "--roofline", "h100-sxm", "-o", "{out}"], "--roofline: needs --from"),
        (["profile", "--roofline", "tpu9", "--from", "{p}", "-o", "{out}"], "device: unknown"),
        (["profile", "--model", "lenet5", "-o", "{out}"], "--batch-size: required"),
        (["profile", "--batch-size", "8", "-o", "{out}"], "--model: required"),
        # bad-input probe items
        (["partition", "--profile", "{p}", "--ppv", "1,,2"], "argument --ppv: .*an empty item"),
        (["partition", "--profile", "{p}", "--stages", "2", "--hardware", "{trunc}"],
         "--hardware: only used with --include-comm"),
        (["partition", "--profile", "{p}", "--stages", "2", "--include-comm", "--hardware", "{trunc}"],
         "not valid JSON"),
        (["partition", "--profile", "{p}", "--stages", "2", "--include-comm", "--bandwidth", "1e-308"],
         "argument --bandwidth"),
        (["partition", "--profile", "{p}", "--stages", "2", "--bandwidth", "1e9"], "only used with --include-comm"),
        (["partition", "--profile", "{huge}", "--stages", "2"], "forward_s: 1e\\+300 is larger than"),
        (["partition", "--profile", "{dtype}", "--stages", "2"], "dtype: unknown 'float8x'"),
        (["partition", "--profile", "{device}", "--stages", "2"], "device: unknown 'quantum'"),
        (["profile", "--model", "nosuch", "--batch-size", "8", "-o", "{out}"], "--model: unknown 'nosuch'"),
        (["profile", "--model", "lenet5", "--batch-size", "8", "--repeats", "100000", "-o", "{out}"],
         "larger than this tool handles"),
        (["calibrate", "--ranks", "100000", "-o", "{out}"], "larger than this tool handles"),
        (["calibrate", "--sizes", "4,1099511627776", "-o", "{out}"], "sizes: .* more than this tool sends"),
    ],
)
def test_cli_bad_input_one_line_exit_2(argv, pattern, prof_path: Path, tmp_path: Path,
                                       capsys) -> None:
    bad = tmp_path / "bad.json"
    d = json.loads(prof_path.read_text())
    d["layers"][0]["forward_s"] = -1
    bad.write_text(json.dumps(d))
    subs = {"{p}": str(prof_path), "{missing}": str(tmp_path / "nope.json"), "{bad}": str(bad),
            "{out}": str(tmp_path / "o.json")}
    for key, change in {"huge": {"forward_s": 1e300}, "dtype": {"dtype": "float8x"},
                        "device": {"device": "quantum"}}.items():
        e = json.loads(prof_path.read_text())
        if "forward_s" in change:
            e["layers"][0].update(change)
        else:
            e.update(change)
        (tmp_path / f"{key}.json").write_text(json.dumps(e))
        subs["{" + key + "}"] = str(tmp_path / f"{key}.json")
    (tmp_path / "trunc.json").write_text('{"schema_version": 1, "device": "h100-sxm", "li')
    subs["{trunc}"] = str(tmp_path / "trunc.json")
    argv = [subs.get(a, a) for a in argv]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse usage errors exit directly
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err
    import re

    assert re.search(pattern, lines[0]), lines[0]


def test_cli_subprocess_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    r = subprocess.run([sys.executable, "-m", "stalesim", "partition", "--profile", str(bad),
                        "--stages", "2"], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "layers: missing" in r.stderr
    assert "Traceback" not in r.stderr


def test_profile_roofline_what_if(prof_path: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "h100.json"
    assert main(["profile", "--roofline", "h100-sxm", "--from", str(prof_path), "--dtype",
                 "bfloat16", "--batch-size", "64", "-o", str(out)]) == 0
    assert "roofline" in capsys.readouterr().out
    r = load_profile(out)
    assert r.device == "h100-sxm (roofline)" and r.dtype == "bfloat16" and r.batch_size == 64
    assert r.n_layers == 6 and all(lp.forward_s > 0 for lp in r.layers)
    # bytes halve for bfloat16 and double for batch 64 (activations only)
    assert r.layers[0].saved_bytes == (1 << 22) and r.layers[0].param_bytes == (1 << 19)


def test_partition_of_a_huge_profile_is_refused_before_its_layers_are_read(tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:
    """Bad-input probe: a 10^6-layer profile hung the partitioner; profiles hold at most
    MAX_LAYERS blocks (checked before each layer is validated)."""
    import stalesim.workloads.profile as profile

    uniform_profile(17, 1e-3, 2e-3, 8).to_json(tmp_path / "p.json")
    monkeypatch.setattr(profile, "MAX_LAYERS", 16)
    assert main(["partition", "--profile", str(tmp_path / "p.json"), "--stages", "4"]) == 2
    assert "layers: 17 layers are more than this tool handles (at most 16)" in capsys.readouterr().err


def test_partition_of_a_long_profile_is_exact(tmp_path: Path, capsys) -> None:
    """10^4 layers into 100 stages: the bisection path, same result as a balanced split."""
    uniform_profile(10_000, 1e-3, 1e-3, 8).to_json(tmp_path / "p.json")
    assert main(["partition", "--profile", str(tmp_path / "p.json"), "--stages", "100", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["cuts"] == list(range(100, 10_000, 100)) and r["bottleneck_s"] == pytest.approx(0.2)
