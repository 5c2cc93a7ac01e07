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
                 "--devices", "nope"]) == 2
    assert "device" in capsys.readouterr().err


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
