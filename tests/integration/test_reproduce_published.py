"""Published LLM runs (docs/results/published_runs/runs.json) beside the analytic estimate.

The data file loads, every row names a source with a citation, the stored predicted.csv
equals a fresh prediction, and the fits / out-of-memory verdicts that must hold do. The
error sizes the issue sets as goals (time median <= 3 %, max <= 8 %, memory within 10 %,
ZeRO-3 throughput falling with the data-parallel size) are asserted as they stand; those
the model does not meet yet are strict expected failures whose reason carries today's
numbers, so the day they pass the suite says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.reproduce import published
from lab.reproduce.published import (
    METRICS,
    PREDICTED,
    RUNS,
    comparisons,
    error_summary,
    load,
    metric_of,
    predict_rows,
    read_predicted,
    to_csv,
)
from stalesim.errors import StalesimError

ROOT = Path(__file__).resolve().parents[2]
REGEN = "regenerate: python -m lab.reproduce.published --write && python -m lab.reproduce tables --write"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    return predict_rows(ROOT)


def _by_id(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["id"]): r for r in rows}


def test_every_row_names_a_cited_source_and_publishes_something():
    data = load(ROOT)
    assert len(data.runs) >= 50
    assert {"sc21-t1", "sc21-t2", "korthikanti-t5", "korthikanti-t4", "torchtitan-2404", "torchtitan-2408",
            "torchtitan-2412", "zero-f1", "zb-t4"} <= set(data.sources)
    assert sum(r.outcome == "oom" for r in data.runs) >= 3
    for r in data.runs:
        src = data.sources[r.source]
        assert src["cite"] and src["metric"], r.id
        assert metric_of(r.published) in METRICS or r.outcome in ("trained", "oom"), r.id
    # the Table 1 rows carry the launch script's micro-batch sizes (not the old assumption of 1)
    t1 = {r.model: r.plan for r in data.runs if r.source == "sc21-t1"}
    assert t1["megatron-1.7b"]["micro_batch"] == 16 and t1["megatron-529.6b"]["chunks"] == 3
    assert t1["megatron-1t"].get("chunks", 1) == 1


def test_the_stored_predictions_equal_the_code(rows):
    assert to_csv(rows) == (ROOT / PREDICTED).read_text(encoding="utf-8"), REGEN


def test_the_table_reads_the_stored_file():
    stored = read_predicted(ROOT)
    assert [r["id"] for r in stored] == [r.id for r in load(ROOT).runs]


def test_a_row_that_cannot_be_expressed_is_listed_with_why(rows):
    blocked = [r for r in rows if str(r["status"]).startswith("not expressible: ")]
    assert blocked, "the Float8 / torch.compile rows are listed, not dropped"
    assert all(len(str(r["status"])) > len("not expressible: ") and r["predicted"] == "" for r in blocked)


def test_the_megatron_runs_that_trained_are_predicted_to_fit(rows):
    """Megatron-LM's own runs (SC21, Korthikanti et al.) trained: none may be predicted not to fit."""
    for r in rows:
        if r["status"] == "predicted" and r["outcome"] == "trained" and str(r["source"]).startswith(("sc21", "kort")):
            assert r["fits"] == "yes" and r["verdict"] == "right", r["id"]


def test_no_run_that_trained_is_predicted_not_to_fit(rows):
    wrong = [r["id"] for r in rows if r["outcome"] == "trained" and r["fits"] == "no"]
    assert not wrong, wrong


@pytest.mark.xfail(strict=True, reason="SC21's 530B ZeRO-3 at micro-batch 4 on 560 GPUs (out of memory in the "
                   "paper) is predicted at 77.3 GiB per GPU + 0.9 GiB outside the allocator, under the 79.25 GiB "
                   "an A100 80GB reports: fits (the 640-GPU run that trained: 75.6 + 0.9 GiB)")
def test_no_run_that_ran_out_of_memory_is_predicted_to_fit(rows):
    wrong = [r["id"] for r in rows if r["outcome"] == "oom" and r["fits"] == "yes"]
    assert not wrong, wrong


# the time goal per source (median <= 3 %, max <= 8 %); today's numbers where not met
TIME_NOW = {
    "sc21-t1": "median 3.9 %, max 8.1 % (76.1B interleaved with V = 3 +8.1 %; the others -0.6 to +5.9 %)",
    "sc21-t2": "median 6.8 %, max 31.8 % (ZeRO-3 rows +9 % to +32 %, most at 2,240 GPUs: the published rows "
               "imply about 9-15 s (175B) and 40-50 s (530B) a step more than is charged, at every data-parallel "
               "size; PTD-P 0.0-4.2 %)",
    "korthikanti-t5": "median 4.0 %, max 8.7 % (22B present work -8.7 %, 1T full recompute +7.4 %)",
    "torchtitan-2404": "median 3.9 %, max 17.2 % (FSDP on 64 A100: Llama 2 70B with op-level selective "
                       "checkpointing at local batch 1 +17.2 %, 13B +8.5 %; the other six -4.5 to +6.5 %)",
    "torchtitan-2412": "median 62.0 %, max 64.6 % (Llama 3.1 8B FSDP with op-level selective checkpointing: "
                       "+59 % and +65 %; the page's own MFU, 33 to 39 %, against about 55 % for the same code "
                       "on A100s in torchtitan-2404, shows its 500 W H100s, which are not modelled)",
    "torchtitan-2408": "median and max 45.6 % (405B FSDP 16 x TP 8: the per-block all-gathers hide under the "
                       "compute, which is predicted 1.46x the page's throughput; the page's 500 W H100s are not "
                       "modelled)",
}
TIME_NOW["zb-t4"] = ("median 5.9 %, max 15.7 % (the zero-bubble paper's 1F1B-I rows +5 to +16 %, ZB-1p +3 to "
                     "+9 %, 1F1B +0.6 to +7.1 % with its blocking exchanges charged, ZB-2p +0.4 to +5.4 %: every "
                     "row predicted faster than measured)")
# sources whose predicted rows meet it today
TIME_MET = ("korthikanti-t4",)


@pytest.mark.parametrize("source", [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=f"today: {why}"))
                                    for s, why in TIME_NOW.items()] + list(TIME_MET))
def test_time_error_goal_per_source(rows, source):
    e = error_summary([r for r in rows if r["source"] == source])
    assert e.time_median is not None and e.time_max is not None
    assert e.time_median <= 3.0 and e.time_max <= 8.0, e


def test_zero3_throughput_falls_with_the_data_parallel_size_as_published(rows):
    """Direction and at least half the size of the published drop (the issue's goal)."""
    by = _by_id(rows)
    for first, last in (("sc21-t2-zero3-175b-384", "sc21-t2-zero3-175b-1536"),
                        ("sc21-t2-zero3-530b-640", "sc21-t2-zero3-530b-2240")):
        a, b = by[first], by[last]
        pub_drop = 1 - float(b["published"]) / float(a["published"])
        pred_drop = 1 - float(b["predicted"]) / float(a["predicted"])
        assert pred_drop >= 0.5 * pub_drop, (first, pub_drop, pred_drop)


@pytest.mark.xfail(strict=True, reason="torchtitan-2412's two measured rows (Llama 3.1 8B FSDP) are predicted "
                   "-11.3 % and -11.9 %: torchtitan logs the caching allocator's reserved peak, the point "
                   "estimate is the allocated peak (the range below holds both); the zero-bubble paper's 48 "
                   "rows are within 7.6 % (its 1.5B 1F1B -7.5 %)")
def test_memory_within_ten_percent_where_measured(rows):
    e = error_summary(rows)
    assert e.memory_max is not None, "no predicted row has a published memory"
    assert e.memory_max <= 10.0, e


def test_the_memory_range_holds_every_published_memory(rows):
    measured = [r for r in rows if r["memory_published_gib"] and r["status"] == "predicted"]
    assert len(measured) >= 2
    for r in measured:
        assert f"holds the published {float(r['memory_published_gib']):g}" in r["detail"], r


def test_zero_model_state_memory_is_the_papers_count(rows):
    """The ZeRO paper's Figure 1 (7.5B parameters, 64 ranks): 120 / 31.4 / 16.6 / 1.9 GB by stage,
    within the figure's rounding and the preset's 7.47B parameters."""
    got = [r for r in rows if r["source"] == "zero-f1"]
    assert len(got) == 4
    for r in got:
        assert abs(float(r["error_pct"])) <= 2.0, r


def test_ptdp_throughput_falls_with_the_data_parallel_size(rows):
    """SC21 Table 2's PTD-P rows lose throughput as the pipeline gets fewer micro-batches; so does the model."""
    by = _by_id(rows)
    for ids in (("sc21-t2-ptdp-175b-384", "sc21-t2-ptdp-175b-768", "sc21-t2-ptdp-175b-1536"),
                ("sc21-t2-ptdp-530b-560", "sc21-t2-ptdp-530b-1120", "sc21-t2-ptdp-530b-2240")):
        pred = [float(by[i]["predicted"]) for i in ids]
        assert pred[0] > pred[1] > pred[2], (ids, pred)


def test_bad_rows_are_one_line_errors_naming_the_field(tmp_path):
    raw = json.loads((ROOT / RUNS).read_text(encoding="utf-8"))
    cases = [("source", "nowhere", "runs[0].source"), ("plan", {"tq": 8}, "runs[0].plan.tq"),
             ("published", {"speed": 1}, "runs[0].published"), ("extra", 1, "runs[0].extra")]
    for key, value, named in cases:
        bad = json.loads(json.dumps(raw))
        bad["runs"][0][key] = value
        (tmp_path / RUNS).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / RUNS).write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(StalesimError, match=named.replace("[", r"\[").replace("]", r"\]")):
            load(tmp_path)


def test_a_model_name_is_either_a_preset_or_a_file_shape(tmp_path):
    raw = json.loads((ROOT / RUNS).read_text(encoding="utf-8"))
    raw["models"]["megatron-1t"] = {"layers": 2, "hidden": 64, "heads": 4}
    (tmp_path / RUNS).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / RUNS).write_text(json.dumps(raw), encoding="utf-8")
    data = load(tmp_path)
    with pytest.raises(StalesimError, match="models.megatron-1t"):
        published.spec_for(data, "megatron-1t")


def test_check_exits_zero_on_the_stored_file(rows, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    # the module's predictions (the event-simulated zero-bubble rows take minutes to recompute)
    monkeypatch.setattr(published, "predict_rows", lambda root: rows)
    assert published.main(["--check"]) == 0
    assert "equals the code" in capsys.readouterr().out


# the zero-bubble paper's Table 4: one comparison per model and micro-batch count
ZB_SETUPS = {f"zb-t4-{m}-m{n}" for m, ns in (("1.5b", (24, 32, 64)), ("6.2b", (24, 32, 64)),
                                            ("14.6b", (48, 64, 128)), ("28.3b", (96, 128, 256))) for n in ns}


def test_plan_workload_ranks_the_measured_fastest_schedule_first(rows):
    """The issue's check: in every published multi-schedule comparison, the schedule ranked first
    among those predicted to fit (plan --workload's order) is the one measured fastest."""
    found = comparisons(load(ROOT), rows)
    assert {c.name for c in found} >= ZB_SETUPS
    for c in found:
        assert len(c.measured_order) >= 2, c
        assert c.agrees, (c.name, "measured", c.measured_order, "predicted", c.predicted_order)
    # the stored table says it per row
    by = _by_id(rows)
    assert "zb-t4-1.5b-m24: predicted rank 1, measured rank 1 of 4" in str(by["zb-t4-1.5b-m24-zb-2p"]["detail"])


def test_the_measured_ranking_is_the_published_order(rows):
    """Table 4's 1.5B at 24 micro-batches: ZB-2p 14.5, 1F1B-I 13.1, ZB-1p 12.9, 1F1B 11.8 samples/s per GPU."""
    c = next(c for c in comparisons(load(ROOT), rows) if c.name == "zb-t4-1.5b-m24")
    assert c.measured_order == tuple(f"zb-t4-1.5b-m24-{s}" for s in ("zb-2p", "1f1b-i", "zb-1p", "1f1b"))


def test_zero_bubble_memory_within_five_percent_of_the_published(rows):
    """The issue's goal: the zero-bubble schedules' memory per GPU within 5 % of the paper's Table 4
    (ZB-1p and ZB-2p at their pending-W limits p and 2p)."""
    zb = [r for r in rows if r["source"] == "zb-t4" and str(r["id"]).endswith(("-zb-1p", "-zb-2p"))]
    assert len(zb) == 24
    for r in zb:
        assert abs(float(r["memory_error_pct"])) <= 5.0, (r["id"], r["memory_error_pct"])
