"""Sweep: grid, parallel = serial, ranking, CSV."""

import csv

import pytest

from stalesim.sim.sweep import grid, sweep, table, write_csv
from stalesim.workloads.profile import uniform_profile


@pytest.fixture(scope="module")
def prof():
    return uniform_profile(8, 1e-3, 2e-3, 128, param_bytes=1_000_000, output_bytes=100_000)


def test_grid_varies_micro_only_where_it_matters_and_workers_everywhere():
    # workers = the data-parallel degree: dp's workers, replicas of a pipeline schedule
    pts = grid(["gpipe", "stale", "dp"], [2, 4], microbatches=[1, 4], workers=[2, 4],
               ppv_candidates=[[3]])
    g = [p for p in pts if p.schedule == "gpipe"]
    s = [p for p in pts if p.schedule == "stale"]
    d = [p for p in pts if p.schedule == "dp"]
    assert len(g) == 3 * 2 * 2 and len(s) == 3 * 2 and len(d) == 3 * 2
    assert {p.ppv for p in s} == {None, (3,)}
    assert {p.workers for p in s} == {2, 4}


def test_parallel_equals_serial_and_ranked(prof):
    pts = grid(["gpipe", "1f1b", "pipedream", "stale", "2bw"], [2, 4], microbatches=[1, 4],
               links=[None, "10gbe"])
    serial = sweep(prof, pts, jobs=1)
    par = sweep(prof, pts, jobs=2)
    def key(r):
        return (r["schedule"], r["stages"], r["microbatches"], r["link"] or "")
    assert sorted(map(key, serial)) == sorted(map(key, par))
    by = {key(r): r for r in serial}
    for r in par:
        assert r["iteration_time_s"] == by[key(r)]["iteration_time_s"]
    ok = [r for r in serial if not r["error"]]
    tp = [r["throughput_samples_per_s"] for r in ok]
    assert tp == sorted(tp, reverse=True) and [r["rank"] for r in ok] == list(range(1, len(ok) + 1))
    bad = [r for r in serial if r["error"]]
    assert bad and all("2bw" in r["error"] for r in bad)  # 2bw with M=1 at S=4
    text = table(serial, limit=5)
    assert "rank" in text and "skipped 2bw" in text


def test_event_method_and_csv(prof, tmp_path):
    pts = grid(["pipedream", "gpipe"], [2, 4], microbatches=[4])
    rows = sweep(prof, pts, method="event")
    fast = {(r["schedule"], r["stages"]): r for r in sweep(prof, pts, method="fast")}
    for r in rows:
        f = fast[(r["schedule"], r["stages"])]
        assert r["iteration_time_s"] == pytest.approx(f["iteration_time_s"], rel=1e-9)
    path = write_csv(tmp_path / "out.csv", rows)
    with open(path) as fh:
        back = list(csv.DictReader(fh))
    assert len(back) == 4 and back[0]["rank"] == "1"
    assert {"iteration_time_s", "max_peak_memory_bytes", "max_staleness"} <= set(back[0])


def test_sweep_replicas_on_a_cluster(prof):
    pts = grid(["1f1b", "dp"], [2], microbatches=[2], workers=[1, 4], devices=["h100-sxm"], links=["nvlink4"])
    # the node's device (not a --targets request): the synthetic profile's times are used as given
    rows = sweep(prof, pts, batch_size=128, cluster={"node": "dgx-h100", "bucket_bytes": 1 << 20},
                 force_retime=False)
    by = {(r["schedule"], r["workers"]): r for r in rows}
    assert not any(r["error"] for r in rows)
    assert by[("1f1b", 4)]["devices"] == 8 and by[("dp", 4)]["devices"] == 4 and by[("1f1b", 1)]["devices"] == 2
    assert by[("1f1b", 4)]["max_allreduce_exposed_s"] > 0 == by[("1f1b", 1)]["max_allreduce_exposed_s"]
    full = sweep(prof, pts, batch_size=128, cluster={"node": "dgx-h100", "bucket_bytes": 1 << 20,
                                                     "symmetry": False}, force_retime=False)
    assert {k: r["iteration_time_s"] for k, r in by.items()} == \
        {(r["schedule"], r["workers"]): r["iteration_time_s"] for r in full}
    with pytest.raises(Exception, match="cluster.nodes: unknown"):
        sweep(prof, pts, cluster={"nodes": 3})
