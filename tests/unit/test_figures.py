"""`stalesim figures`: registry, CLI, simulator figures from the committed shape profiles, study reader."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stalesim.cli import main
from stalesim.errors import StalesimError
from stalesim.figures import FIGURES, make_figures
from stalesim.figures.common import SHAPE_PROFILES
from stalesim.figures.paper import STALE_2GPU, implied_pipelined_fraction
from stalesim.figures.study_figs import collect, lenet5_accuracy_vs_depth


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _with_profiles(tmp_path: Path) -> Path:
    """An empty output folder: the figures read the stored shape profiles, never re-measure."""
    return tmp_path / "fig"


def test_figures_read_stored_profiles_and_write_only_outputs(tmp_path):
    """Inputs stay out of the output folder: a figure run reads the package's shape profiles and
    leaves nothing but its own CSV/PNG in --out (no profiles/ cache there)."""
    out = _with_profiles(tmp_path)
    before = {p.name: p.read_bytes() for p in SHAPE_PROFILES.glob("*.json")}
    assert "resnet56_b8_shape.json" in before
    done = make_figures(out, ["predicted_speedup_schedules"], log=lambda m: None)
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(p).name for d in done for p in d["paths"])
    assert all(p.suffix in (".csv", ".png") for p in out.iterdir())
    assert {p.name: p.read_bytes() for p in SHAPE_PROFILES.glob("*.json")} == before


def test_list_and_unknown(capsys, tmp_path):
    assert main(["figures", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in FIGURES)
    with pytest.raises(StalesimError, match="unknown figure"):
        make_figures(tmp_path, ["nope"])


def test_implied_fraction_inverts_the_hybrid_speedup():
    # hybrid = 1 / (f/p + 1 - f) for a run pipelined (speed-up p) for a fraction f of it
    for p in (1.5, 1.65, 1.82, 3.0):
        for f in (0.1, 0.5, 0.9):
            hybrid = 1.0 / (f / p + 1.0 - f)
            assert implied_pipelined_fraction(p, hybrid) == pytest.approx(f, rel=1e-12)
    assert implied_pipelined_fraction(1.65, 1.65) == pytest.approx(1.0)  # hybrid as fast: all pipelined
    assert implied_pipelined_fraction(1.65, 1.0) == pytest.approx(0.0)   # no gain: never pipelined


def test_simulated_hybrid_at_half_gives_fraction_about_half(tmp_path):
    # the simulator's hybrid with the switch at N/2 (what the 2-GPU figure runs) implies f of
    # 0.49-0.56 when fed back through the paper's formula (not exactly 0.5: the unpipelined half
    # still runs on 2 devices and pays the activation transfer, and the switch drains the pipe);
    # the paper's own pair gives 0.49-0.50
    out = _with_profiles(tmp_path)
    make_figures(out, ["predicted_speedup_resnet_2gpu"], log=lambda m: None)
    for r in _read(out / "predicted_speedup_resnet_2gpu.csv"):
        if r["link"].startswith("nvlink"):  # transfers cheap: the two phases are the whole story
            f = implied_pipelined_fraction(float(r["pred_speedup_stale"]), float(r["pred_speedup_hybrid"]))
            assert 0.45 < f < 0.6, (r["model"], r["device"], f)
    paper_f = [implied_pipelined_fraction(r["speedup_pipelined"], r["speedup_hybrid"]) for r in STALE_2GPU]
    assert [round(f, 2) for f in paper_f] == [0.49, 0.49, 0.49, 0.50]


def test_staleness_and_memory_figures(tmp_path):
    out = _with_profiles(tmp_path)
    done = make_figures(out, ["staleness_table", "memory_stale_vs_stash"], log=lambda m: None)
    assert all(Path(p).exists() for d in done for p in d["paths"])
    rows = list(_read(out / "staleness_table.csv"))
    stale = [int(r["staleness"]) for r in rows if r["schedule"] == "stale"]
    assert stale == [6, 4, 2, 0]  # 2(S-1-s) at S = 4, derived from the IR
    # hybrid: both phases, the stale one and the sequential one after the switch
    hybrid = {r["phase"]: [int(q["staleness"]) for q in rows if q["row"] == r["row"]]
              for r in rows if r["schedule"] == "hybrid"}
    assert len(hybrid) == 2
    before, after = (v for k, v in sorted(hybrid.items(), key=lambda kv: not kv[0].startswith("before")))
    assert before == [6, 4, 2, 0] and after == [0, 0, 0, 0]
    mem = {r["model"]: r for r in _read(out / "memory_stale_vs_stash.csv")}
    assert set(mem) == {"lenet5", "alexnet", "vgg16", "resnet20"}
    # AlexNet's weights match the paper's Table 9 (88.87 "MB") to 0.2 % read as MiB; as 10^6-byte
    # MB they would be 4.7 % off, so the paper's MB are MiB
    assert abs(float(mem["alexnet"]["weights_mib"]) / 88.87 - 1) < 0.002
    assert mem["lenet5"]["stale_in_flight"] == "3 1" and mem["lenet5"]["pipedream_versions_kept"] == "2 1"


def test_pipe_sgd_fast_matches_event(tmp_path):
    out = _with_profiles(tmp_path)
    make_figures(out, ["pipe_sgd_timing"], log=lambda m: None)
    rows = list(_read(out / "pipe_sgd_timing.csv"))
    checked = [r for r in rows if r.get("pipe_iteration_ms_event")]
    assert checked
    for r in checked:
        assert float(r["pipe_iteration_ms"]) == pytest.approx(float(r["pipe_iteration_ms_event"]), rel=0.02)
        assert float(r["sync_iteration_ms"]) == pytest.approx(float(r["sync_iteration_ms_event"]), rel=0.02)
        assert float(r["pipe_over_sync"]) <= 2.0 + 1e-9  # width-2 pipelining hides at most half


def _write_study(d: Path, seq_acc: float, stale_acc: float, seeds: int = 3, lr: float = 0.01) -> None:
    """A stand-in for `stalesim study --out d`: its base config and its table (two rows)."""
    d.mkdir(parents=True)
    (d / "study.json").write_text(json.dumps({"base": {"model": "lenet5", "dataset": "mnist", "epochs": 2,
                                                       "batch_size": 128, "lr": lr}}))
    cols = ["schedule", "ppv", "stages", "mitigation", "staleness", "depth", "seeds", "diverged",
            "test_acc_mean", "test_acc_std", "final_loss_mean", "final_loss_std", "wall_time_s_mean"]
    with open(d / "table.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerow(["sequential", "[]", 1, "none", "[0]", 0, seeds, 0, seq_acc, 0.001, 0.05, 0.01, 1.0])
        w.writerow(["stale", "[2]", 2, "none", "[2, 0]", 2, seeds, 0, stale_acc, 0.002, 0.06, 0.01, 1.0])


def test_study_reader(tmp_path):
    _write_study(tmp_path / "results" / "mystudy", 0.98, 0.97)
    rows = collect("lenet5", "mnist", roots=(tmp_path / "results",))
    assert {r["schedule"] for r in rows} == {"sequential", "stale"}
    paths = lenet5_accuracy_vs_depth(tmp_path, roots=(tmp_path / "results",))
    got = {r["schedule"]: r for r in _read(paths[0])}
    assert float(got["stale"]["drop_vs_sequential_pts"]) == pytest.approx(1.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert lenet5_accuracy_vs_depth(empty, roots=(tmp_path / "none",)) == []


def test_accuracy_figure_ignores_user_runs(tmp_path, monkeypatch):
    """The committed accuracy figure reads docs/results only: a user's own study under runs/ (the
    README's `study ... --out runs/study`) must not change a byte of it, nor its baseline."""
    monkeypatch.chdir(tmp_path)
    _write_study(Path("docs/results/stored"), 0.98, 0.97)
    out = tmp_path / "figs"
    out.mkdir()
    first = {p.name: p.read_bytes() for p in lenet5_accuracy_vs_depth(out)}
    assert set(first) == {"lenet5_accuracy_vs_depth.csv", "lenet5_accuracy_vs_depth.png"}
    # another learning rate, more seeds: were runs/ searched, its rows would join the figure
    _write_study(Path("runs/study"), 0.50, 0.40, seeds=5, lr=0.05)
    again = {p.name: p.read_bytes() for p in lenet5_accuracy_vs_depth(out)}
    assert again == first
    assert "runs" not in first["lenet5_accuracy_vs_depth.csv"].decode()


def test_merge_coincident_names_hidden_lines():
    from stalesim.figures.common import merge_coincident

    got = merge_coincident([("a", [1, 2], [1.0, 2.0]), ("b", [1, 2], [1.0, 2.0]), ("c", [1, 2], [1.0, 2.005]),
                            ("d", [1, 2], [3.0, 4.0])])
    assert got == [("a ≈ b ≈ c", [1, 2], [1.0, 2.0]), ("d", [1, 2], [3.0, 4.0])]
    # exact only: c is 0.25 % off, so it stays its own line
    assert [lab for lab, *_ in merge_coincident([("a", [1], [2.0]), ("c", [1], [2.005])], rtol=1e-6)] == ["a", "c"]


def test_schedules_figure_names_its_ppv_and_merges(tmp_path):
    out = _with_profiles(tmp_path)
    make_figures(out, ["predicted_speedup_schedules"], log=lambda m: None)
    rows = _read(out / "predicted_speedup_resnet56_h100-sxm.csv")
    s2 = {r["schedule"]: r for r in rows if r["stages"] == "2"}
    assert s2["stale"]["ppv"] == "27"  # the balanced split, which the title states
    assert s2["stale"]["speedup"] == s2["pipedream"]["speedup"]  # drawn as one line "pipedream = stale"
@pytest.mark.parametrize("only,needle", [("", "expected comma-separated figure names"),
                                         (",", "expected comma-separated figure names"),
                                         ("staleness_table,nosuch", "unknown figure 'nosuch'")])
def test_only_must_name_figures(tmp_path: Path, capsys, only: str, needle: str) -> None:
    """Bad-input probe: `figures --only ''` regenerated every figure (exit 0)."""
    assert main(["figures", "--only", only, "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (tmp_path / "f").exists()  # refused before the output folder is made
    with pytest.raises(StalesimError, match="no figure named"):
        make_figures(tmp_path / "g", [])
