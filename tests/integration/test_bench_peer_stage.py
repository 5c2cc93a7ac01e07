"""experiments/bench_peer_stage.py: the per-block ratios, refusing bad input, and a real
two-rank run that times every condition on both stages."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")

TINY_GPT = "gpt-char:n_layer=2,n_embd=16,n_head=2,block_size=16"


def test_ratios_are_per_stage_and_kind_over_blocks() -> None:
    from experiments.bench_peer_stage import CONDITIONS, RANKS, ratios

    def block(scale: float) -> dict[str, list[dict[str, float]]]:
        per = {c: [{"F": 1.0, "B": 2.0} for _ in range(RANKS)] for c in CONDITIONS}
        per["peer"] = [{"F": scale, "B": 2.0 * scale}, {"F": 1.0, "B": 2.0}]  # stage 0 slower
        return per

    r = ratios([block(1.1), block(1.3), block(1.2)])
    assert r["peer/solo"]["F:0"] == {"median": pytest.approx(1.2), "min": pytest.approx(1.1),
                                     "max": pytest.approx(1.3)}
    assert r["peer/solo"]["B:1"]["median"] == pytest.approx(1.0)
    assert r["peer+msgs/peer"]["F:0"]["median"] == pytest.approx(1 / 1.2)


@pytest.mark.parametrize(("args", "field"), [(["--schedule", "dp"], "--schedule"),
                                             (["--ppv", "0"], "--ppv"), (["--ppv", "1", "2"], "--ppv")])
def test_bad_input_is_one_error_line(capsys, args: list[str], field: str) -> None:
    from experiments.bench_peer_stage import main

    assert main(["--model", TINY_GPT, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_peer_stage: error: ") and field in err[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_real_run_times_every_condition_on_both_stages(tmp_path) -> None:
    from experiments.bench_peer_stage import CONDITIONS, RANKS, WARMUP, main

    out = tmp_path / "peer.json"
    assert main(["--model", TINY_GPT, "--batch-size", "8", "--microbatches", "2", "--blocks", "2",
                 "--rounds", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["config"]["ppv"] == [2] and len(res["blocks"]) == 2
    for b in res["blocks"]:
        for c in CONDITIONS:
            assert len(b[c]) == RANKS and all(s["F"] > 0 and s["B"] > 0 for s in b[c]), c
        for c, per_rank in b["rounds_s"].items():  # the warm-up rounds are kept, left out of the means
            assert all(len(r["F"]) == WARMUP + 2 for r in per_rank), c
    assert all(v["min"] <= v["median"] <= v["max"] for d in res["ratios"].values() for v in d.values())
