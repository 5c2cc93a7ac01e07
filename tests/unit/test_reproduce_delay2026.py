"""The 2026 claims table: gaps paired by seed, the verdict rules, flatness, a missing study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.reproduce import delay2026 as d
from stalesim.errors import StalesimError


def _run(schedule: str, seed: int, loss: float, mitigation: str = "none") -> dict:
    # a falling curve that ends flat: the sequential runs' flatness is read from it
    losses = [4.0 - 0.01 * i for i in range(100)] + [3.0] * 100
    return {"schedule": schedule, "seed": seed, "mitigation": mitigation, "final_val_loss": loss,
            "diverged": False, "losses": losses}


def _study(folder: Path, seq: list[float], dly: list[float], cor: list[float]) -> None:
    folder.mkdir(parents=True)
    rows = [_run("sequential", s, x) for s, x in enumerate(seq)]
    rows += [_run("2bw", s, x) for s, x in enumerate(dly)]
    rows += [_run("2bw", s, x, "error-feedback") for s, x in enumerate(cor)]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _depth_run(stages: int, mitigation: str, seed: int, reach_at: int | None) -> dict:
    # a training curve that crosses both targets (2.9, 3.3) at reach_at, or stays above them
    losses = [4.0] * 200 if reach_at is None else [4.0] * reach_at + [2.0] * (200 - reach_at)
    return {"schedule": "pipedream", "stages": stages, "mitigation": mitigation, "seed": seed,
            "losses": losses, "config": {"optimizer": "adamw"}}


def _depth(folder: Path, reach: dict[tuple[str, int], int | None]) -> None:
    from stalesim.plan.convergence import Target
    from stalesim.plan.depth import depth_rows, write_depth_table

    runs = [_depth_run(s, m, seed, at) for (m, s), at in reach.items() for seed in (0, 1)]
    for fname, target in d.DEPTH_TARGETS:
        out = folder / "tmp"
        out.mkdir(parents=True, exist_ok=True)
        tgt = Target("loss", target, 1)
        write_depth_table(depth_rows(runs, tgt), tgt, out)
        (out / "depth.csv").rename(folder / fname)


def _root(tmp: Path, adamw: tuple, muon: tuple,
          reach: dict[tuple[str, int], int | None] | None = None) -> Path:
    _study(tmp / d.DELAY / "adamw", *adamw)
    _study(tmp / d.DELAY / "muon", *muon)
    _depth(tmp / d.DEPTH32 / "adamw", reach or {("none", 1): 20, ("none", 32): None,
                                                 ("basis-rotation", 1): 30, ("basis-rotation", 32): 50})
    return tmp


def test_gaps_pair_by_seed_and_the_verdicts_follow_the_rules(tmp_path: Path) -> None:
    # AdamW: gap 0.30, 0.32, 0.31; Muon: gap 0.02, 0.03, 0.01; EF recovers half of AdamW's
    root = _root(tmp_path, ([2.0, 2.1, 2.2], [2.30, 2.42, 2.51], [2.15, 2.26, 2.355]),
                 ([1.9, 2.0, 2.1], [1.92, 2.03, 2.11], [1.91, 2.02, 2.10]))
    a = d.delay_effect(root / d.DELAY / "adamw", "adamw")
    m = d.delay_effect(root / d.DELAY / "muon", "muon")
    assert a.gap.mean == pytest.approx(0.31)
    assert a.gap.diffs == pytest.approx((0.30, 0.32, 0.31))
    assert a.recovered == pytest.approx(0.155 / 0.31, rel=1e-6)
    assert m.gap.mean == pytest.approx(0.02)
    assert d.adamw_verdict(a, m) == "reproduced"
    assert d.muon_verdict(a, m) == "reproduced"
    assert a.flat == pytest.approx(0.0)  # the last two tenths of the curve are flat
    text = d.table(root)
    assert "AdamW gap +0.310" in text and "not tested" in text
    assert text.count("| reproduced |") == 2
    # depth: AdamW never reaches the target at S = 32 in 200 steps (> 201/21 = 9.57x, iterations
    # count from 1); basis rotation does
    assert "**> 9.57x**" in text and "| partly (direction; a far smaller model and run) |" in text
    assert "to 2.9: 51 vs AdamW not reached in 200 (0/2 seeds)" in text
    seeds = d.seed_table(root)
    assert "| AdamW | 0, 1, 2 | 2.000, 2.100, 2.200 | 2.300, 2.420, 2.510 | 2.150, 2.260, 2.355 |" in seeds


def test_a_delay_that_hurts_nobody_is_not_reproduced(tmp_path: Path) -> None:
    root = _root(tmp_path, ([2.0, 2.1, 2.2], [2.05, 2.09, 2.2], [2.0, 2.1, 2.2]),
                 ([1.9, 2.0, 2.1], [1.92, 2.0, 2.09], [1.9, 2.0, 2.1]))
    a = d.delay_effect(root / d.DELAY / "adamw", "adamw")
    m = d.delay_effect(root / d.DELAY / "muon", "muon")
    assert d.adamw_verdict(a, m) == d.NOT_SHOWN  # mean +0.013 with a wide interval: too few seeds


def test_a_delay_that_helps_is_not_reproduced(tmp_path: Path) -> None:
    root = _root(tmp_path, ([2.0, 2.1, 2.2], [1.9, 2.0, 2.1], [2.0, 2.1, 2.2]),
                 ([1.9, 2.0, 2.1], [1.92, 2.0, 2.09], [1.9, 2.0, 2.1]))
    a = d.delay_effect(root / d.DELAY / "adamw", "adamw")
    m = d.delay_effect(root / d.DELAY / "muon", "muon")
    assert d.adamw_verdict(a, m) == "not reproduced"
    assert d.muon_verdict(a, m) == "not reproduced"


def test_depth_claims_fail_when_the_direction_fails(tmp_path: Path) -> None:
    root = _root(tmp_path, ([2.0, 2.1, 2.2], [2.3, 2.4, 2.5], [2.3, 2.4, 2.5]),
                 ([2.0, 2.1, 2.2], [2.31, 2.42, 2.5], [2.3, 2.4, 2.5]),
                 {("none", 1): 20, ("none", 32): 20, ("basis-rotation", 1): 30, ("basis-rotation", 32): 40})
    rows = d.depth_claim_rows(root)
    assert rows[0][-1] == "not reproduced"  # no slowdown: 1.00x
    assert rows[1][-1] == "not reproduced"  # rotation slower than AdamW at S = 32


def test_muon_as_bad_as_adamw_is_not_robust(tmp_path: Path) -> None:
    root = _root(tmp_path, ([2.0, 2.1, 2.2], [2.3, 2.4, 2.5], [2.3, 2.4, 2.5]),
                 ([2.0, 2.1, 2.2], [2.31, 2.42, 2.5], [2.3, 2.4, 2.5]))
    a = d.delay_effect(root / d.DELAY / "adamw", "adamw")
    m = d.delay_effect(root / d.DELAY / "muon", "muon")
    assert d.muon_verdict(a, m) == "not reproduced"
    assert d.adamw_verdict(a, m) == "partly"


def test_flatness_measures_the_fall_at_the_end() -> None:
    assert d.flatness([10.0] * 10 + [9.0] * 10, frac=0.5) == pytest.approx(0.1)
    with pytest.raises(StalesimError, match="too few"):
        d.flatness([1.0], frac=0.5)


def test_a_missing_study_names_its_commands(tmp_path: Path) -> None:
    with pytest.raises(StalesimError, match="commands.txt"):
        d.load_runs(tmp_path / "nothing")
