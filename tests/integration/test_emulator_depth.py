"""Depth scaling (`stalesim.plan.depth`, `stalesim study --depths --target-loss`): the axis,
iterations to target and the slowdown against S = 1, the table and the plot, one-line errors."""

from __future__ import annotations

import json

import pytest
from _cli import run_cli

from stalesim.errors import StalesimError
from stalesim.plan.convergence import Target
from stalesim.plan.depth import depth_placements, depth_rows, parse_depths, plot_slowdown


def test_parse_depths_and_placements():
    assert parse_depths("1, 2,4,32") == [1, 2, 4, 32]
    assert depth_placements([1, 2, 8]) == [[], 2, 8]
    for bad, needle in [("1,x", "cannot read"), ("0,2", "outside"), ("2,2", "twice"), ("", "cannot read")]:
        with pytest.raises(StalesimError, match=needle):
            parse_depths(bad)


def _res(stages: int, seed: int, losses: list[float], opt: str = "adamw", sched: str = "pipedream",
         mit: str = "none") -> dict:
    return {"schedule": sched, "stages": stages, "mitigation": mit, "seed": seed, "losses": losses,
            "config": {"optimizer": opt}}


def test_iterations_to_target_and_slowdown():
    # S = 1 reaches 1.0 (trailing mean of 2) after 3 and 5 iterations: mean 4;
    # S = 4 after 8 and 8: mean 8, slowdown 2; S = 8 never in one seed: no slowdown
    fall = lambda n: [3.0] * (n - 2) + [1.0, 1.0] + [1.0] * (10 - n)  # noqa: E731
    res = [_res(1, 0, fall(3)), _res(1, 1, fall(5)), _res(4, 0, fall(8)), _res(4, 1, fall(8)),
           _res(8, 0, fall(9)), _res(8, 1, [3.0] * 10)]
    rows = {r["stages"]: r for r in depth_rows(res, Target("loss", 1.0, 2))}
    assert rows[1]["iterations_mean"] == 4.0 and rows[1]["slowdown"] == 1.0
    assert rows[1]["per_seed"] == [3, 5] and (rows[1]["iterations_lo"], rows[1]["iterations_hi"]) == (3.0, 5.0)
    assert rows[4]["iterations_mean"] == 8.0 and rows[4]["slowdown"] == 2.0
    assert rows[8]["reached"] == 1 and rows[8]["iterations_mean"] is None and rows[8]["slowdown"] is None
    # the seed that missed counts as horizon + 1 = 11: (9 + 11) / 2 / 4
    assert rows[8]["slowdown_at_least"] == 2.5 and rows[4]["slowdown_at_least"] is None
    assert rows[4]["baseline"] == "pipedream S=1 none"


def test_slowdown_falls_back_to_the_placement_free_baseline_per_optimizer():
    res = [_res(1, 0, [2.0, 0.5], sched="sequential"), _res(2, 0, [2.0, 2.0, 0.5], sched="stale"),
           _res(1, 0, [0.5], opt="muon", sched="sequential"), _res(2, 0, [2.0, 2.0, 2.0, 0.5], opt="muon",
                                                                     sched="stale")]
    rows = {(r["optimizer"], r["schedule"]): r for r in depth_rows(res, Target("loss", 1.0, 1))}
    assert rows["adamw", "stale"]["slowdown"] == 1.5
    assert rows["muon", "stale"]["slowdown"] == 4.0
    with pytest.raises(StalesimError, match="training-loss"):
        depth_rows(res, Target("accuracy", 0.9))


def test_plot_file(tmp_path):
    res = [_res(s, 0, [2.0] * s + [0.5]) for s in (1, 2, 4)]
    rows = depth_rows(res, Target("loss", 1.0, 1))
    assert [r["slowdown"] for r in rows] == [1.0, 1.5, 2.5]
    p = plot_slowdown(rows, tmp_path / "slow.png", title="t")
    assert p.is_file() and p.read_bytes()[:4] == b"\x89PNG"


TINY = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"
SYN = ["study", "--model", TINY, "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "8",
       "--eval-windows", "8", "--iterations", "12", "--quiet", "--seeds", "0", "--jobs", "1",
       "--optimizer", "adamw", "--lr", "3e-3", "--schedules", "stale"]


def test_cli_depth_study_on_a_tiny_model(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, SYN + ["--depths", "1,2,4", "--target-loss", "4.6", "--target-smooth", "2",
                                     "--batched", "--out", str(tmp_path)])
    assert rc == 0 and "slowdown vs S = 1" in out
    csv = (tmp_path / "depth.csv").read_text().splitlines()
    assert csv[0].startswith("optimizer,schedule,stages,mitigation") and len(csv) == 4
    # the metric is the plan's rule applied to each stored run's losses
    from stalesim.plan.convergence import iterations_to_loss

    runs = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["stages"] for r in runs} == {1, 2, 4}
    s1 = next(r for r in runs if r["stages"] == 1)
    n1 = iterations_to_loss(s1["losses"], 4.6, 2)
    assert n1 is not None and f"| adamw | stale | 1 | none | 1/1 | {n1:.1f}" in out
    assert (tmp_path / "slowdown_vs_stages.png").is_file()
    assert json.loads((tmp_path / "study.json").read_text())["depths"] == "1,2,4"


@pytest.mark.parametrize("argv,needle", [
    (["--depths", "1,2", "--placements", "S2"], "not both"),
    (["--depths", "1,0"], "outside"),
    (["--depths", "1,9"], "stages"),  # the tiny model has 4 blocks
    (["--depths", "1,2", "--target-loss", "-1"], "target-loss"),
])
def test_cli_bad_depths_are_one_line_exit_2(capsys, tmp_path, argv, needle):
    rc, _, err = run_cli(capsys, SYN + ["--out", str(tmp_path)] + argv)
    assert rc == 2 and needle in err
    assert len(err.strip().splitlines()) == 1 or err.lstrip().startswith("usage:")


def test_stored_tables_roundtrip_into_one_plot(tmp_path):
    from stalesim.plan.depth import main, read_depth_csv, write_depth_table

    target = Target("loss", 1.0, 1)
    for opt in ("adamw", "muon"):
        d = tmp_path / opt
        d.mkdir()
        rows = depth_rows([_res(s, 0, [2.0] * s + [0.5], opt=opt) for s in (1, 2)] + [_res(4, 0, [2.0] * 5, opt=opt)],
                          target)
        write_depth_table(rows, target, d)
        (d / "study.json").write_text(json.dumps({"base": {"model": "m"}, "target_loss": 1.0, "target_smooth": 1}))
        back = read_depth_csv(d / "depth.csv")
        assert back == rows and back[2]["slowdown_at_least"] == 3.0  # (5 + 1) / 2
    assert main([str(tmp_path / "both.png"), str(tmp_path / "adamw"), str(tmp_path / "muon")]) == 0
    assert (tmp_path / "both.png").is_file()
    with pytest.raises(StalesimError, match="usage"):
        main([str(tmp_path / "x.png")])
