"""plan --workload (stalesim.plan.llm): schedules x error feedback for an analytic transformer,
ranked by predicted iteration time among those that fit, memory per GPU by component."""

import contextlib
import io
import json
import time
from dataclasses import replace

import pytest

from stalesim.errors import StalesimError
from stalesim.plan.llm import llm_rows, llm_table
from stalesim.sim.parallel import ParallelPlan, event_pipeline, llm_costs, predict_llm
from stalesim.workloads.hardware import hardware_from_node
from stalesim.workloads.transformer import PRESETS, TransformerSpec

TINY = TransformerSpec("tiny", layers=8, hidden=1024, heads=16, seq=512, vocab=8000)
# Llama-2-70B, tp 8 x pp 8: stage 0's parameters per GPU (tests/unit/test_sim_parallel.py derives it)
N_STAGE0 = 1_102_336_000


def _cli(argv):
    from stalesim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_llama2_70b_on_1024_h100s_ranked_with_error_feedback():
    hw = hardware_from_node("dgx-h100")
    base = ParallelPlan(tp=8, pp=8, dp=16, global_batch=1024)
    t0 = time.perf_counter()
    rows = llm_rows(PRESETS["llama2-70b"], hw, base, ["1f1b", "zb-v", "2bw"], ["none", "error-feedback"],
                    iterations=1000)
    assert time.perf_counter() - t0 < 30
    by = {r["label"]: r for r in rows}
    assert [r["rank"] for r in rows] == list(range(1, 7))
    ok = [r for r in rows if r["error"] is None]
    assert [r["label"] for r in ok] == sorted((r["label"] for r in ok), key=lambda k: by[k]["iteration_s"])
    assert {r["label"] for r in ok} == {"1f1b", "zb-v", "2bw", "2bw +error-feedback"}
    assert all(r["fits"] for r in ok)
    # error feedback applies to stale weights only: one-line reasons, ranked last
    for lab in ("1f1b +error-feedback", "zb-v +error-feedback"):
        assert by[lab]["rank"] > 4 and by[lab]["error"].startswith("error_feedback: corrects stale weights")
    # zero bubble: ZB-V's iteration is shorter than 1F1B's, its bubble a fraction of 1F1B's
    assert by["zb-v"]["iteration_s"] < by["1f1b"]["iteration_s"]
    assert by["zb-v"]["bubble"] < by["1f1b"]["bubble"] / 3
    # error feedback keeps one more fp32 buffer per parameter: 4 bytes x stage 0's parameters
    extra = by["2bw +error-feedback"]["optimizer_gb"] - by["2bw"]["optimizer_gb"]
    assert extra == pytest.approx(4 * N_STAGE0 / 1e9, rel=1e-6)
    # 2BW's second weight version in bf16
    assert by["2bw"]["weight_versions_gb"] == pytest.approx(2 * N_STAGE0 / 1e9, rel=1e-6)
    assert by["1f1b"]["time_s"] == pytest.approx(1000 * by["1f1b"]["iteration_s"])
    text = llm_table(rows, "header", iterations=1000)
    assert "cannot apply: error_feedback" in text and "zb-v" in text


def test_event_path_agrees_with_the_closed_form_on_1f1b():
    """The zero-bubble schedules are event-simulated; the same path on 1F1B gives the closed form's
    pipeline time and activations."""
    hw = hardware_from_node("dgx-h100")
    plan = ParallelPlan(tp=2, pp=4, dp=2, global_batch=16, recompute="selective", sp=True)
    costs, sim, _ = llm_costs(TINY, plan, hw)
    pipe, devices, acts = event_pipeline(costs, sim, plan)
    p = predict_llm(TINY, plan, hw)
    assert devices == [[0], [1], [2], [3]]
    assert pipe == pytest.approx(p.pipeline_s + costs.u_ns[0] / 1e9, rel=0.03)
    assert acts[0] == pytest.approx(p.memory_breakdown["activations"], abs=2)


def test_zb_v_places_two_stages_per_device_and_keeps_deferred_weight_gradients():
    hw = hardware_from_node("dgx-h100")
    plan = ParallelPlan(tp=2, pp=4, dp=2, global_batch=16, schedule="zb-v", chunks=2)
    costs, sim, _ = llm_costs(TINY, plan, hw)
    _pipe, devices, _acts = event_pipeline(costs, sim, plan)
    assert devices == [[0, 7], [1, 6], [2, 5], [3, 4]]  # the V
    # I + W == B, and W is the weight-gradient GEMMs only (less than half of B)
    bi, bw = costs.split_ns()
    assert all(i + w == b for i, w, b in zip(bi, bw, costs.b_ns))
    assert all(0 < w < b / 2 for w, b in zip(bw, costs.b_ns))
    with pytest.raises(StalesimError, match="chunks: zb-v runs 2 stage"):
        predict_llm(TINY, ParallelPlan(tp=2, pp=4, global_batch=8, schedule="zb-v"), hw)


def test_unknown_mitigations_and_schedules_are_one_line_errors():
    hw = hardware_from_node("dgx-h100")
    base = ParallelPlan(tp=2, pp=4, dp=1, global_batch=8)
    with pytest.raises(StalesimError, match="mitigations: 'pipemare' does not change"):
        llm_rows(TINY, hw, base, ["1f1b"], ["pipemare"])
    with pytest.raises(StalesimError, match="schedules: 'dp' has no LLM estimate"):
        llm_rows(TINY, hw, base, ["dp"], ["none"])


def test_cli_plan_workload(tmp_path):
    out = tmp_path / "p"
    code, stdout, err = _cli(["plan", "--workload", "llama2-70b", "--node", "dgx-h100", "--devices", "1024",
                              "--tp", "8", "--pp", "8", "--batch-size", "1024", "--schedules", "1f1b,2bw",
                              "--mitigations", "all", "--out", str(out), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["plan"]["dp"] == 16 and doc["plan"]["global_batch"] == 1024
    assert [r["label"] for r in doc["rows"]][:2] == ["2bw", "2bw +error-feedback"]
    assert json.loads((out / "plan.json").read_text())["rows"] == doc["rows"]
    assert (out / "plan.csv").read_text().startswith("rank,label,schedule")


@pytest.mark.parametrize("argv,needle", [
    (["--workload", "llama2-70b", "--node", "dgx-h100", "--devices", "1024", "--tp", "8", "--pp", "8",
      "--target-loss", "2.0"], "--target-loss: does not apply to --workload"),
    (["--workload", "llama2-70b", "--node", "dgx-h100", "--devices", "100", "--tp", "8", "--pp", "8"],
     "devices: 100 GPUs are not a multiple of tp x cp x pp = 64"),
    (["--devices", "2", "--tp", "2", "--target-loss", "1.0", "--out", "x"], "--tp: needs --workload"),
    (["--devices", "2", "--target-loss", "1.0"], "out: give --out"),
])
def test_cli_plan_workload_errors(argv, needle, capsys):
    code, _stdout, err = _cli(["plan", *argv])
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("stalesim: error:") and needle in line


def test_rows_carry_the_range_over_open_choices_and_rank_by_the_point():
    """With choices left open, each row shows the fastest and slowest iteration over them; the
    rank is still the point's (the plan as given), so the order is the one without a range."""
    hw = hardware_from_node("dgx-h100")
    base = ParallelPlan(tp=8, pp=4, dp=8, global_batch=256)
    spec = PRESETS["llama2-70b"]
    plain = llm_rows(spec, hw, base, ["1f1b", "interleaved-1f1b", "gpipe"], ["none"])
    ranged = llm_rows(spec, hw, base, ["1f1b", "interleaved-1f1b", "gpipe"], ["none"],
                      open_choices=("chunks", "micro_batch", "recompute"))
    assert [r["label"] for r in ranged] == [r["label"] for r in plain]
    for r in ranged:
        assert r["range_fastest_s"] <= r["iteration_s"] <= r["range_slowest_s"]
        assert r["range_slowest_s"] > r["range_fastest_s"]  # recomputation alone moves it
    one = next(r for r in ranged if r["schedule"] == "1f1b")
    alone = predict_llm(spec, replace(base, recompute="full"), hw)
    assert one["range_slowest_s"] >= alone.iteration_s
    text = llm_table(ranged, "header")
    assert "range s" in text and f"{one['range_fastest_s']:.3f}..{one['range_slowest_s']:.3f}" in text
    assert "range s" not in llm_table(plain, "header")


def test_cli_plan_takes_a_model_spec(tmp_path):
    spec = tmp_path / "m.json"
    spec.write_text(json.dumps({"base": "llama2-70b", "layers": 40}))
    code, out, err = _cli(["plan", "--model-spec", str(spec), "--devices", "64", "--tp", "8", "--pp", "4",
                           "--node", "dgx-h100", "--schedules", "1f1b", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"] == "llama2-70b-custom" and doc["rows"][0]["iteration_s"] > 0


def test_first_last_is_placed_over_each_schedules_own_stages():
    hw = hardware_from_node("dgx-h100")
    spec = PRESETS["llama3.1-8b"].with_(layers=30)
    base = ParallelPlan(tp=8, pp=2, dp=1, global_batch=8)
    rows = llm_rows(spec, hw, base, ["1f1b", "interleaved-1f1b", "zb-v"], ["none"], first_last=True)
    assert all(r["error"] is None for r in rows)
    with pytest.raises(StalesimError, match="pp: 30 layers do not split into pp x chunks = 4"):
        predict_llm(spec, replace(base, schedule="zb-v", chunks=2), hw)  # what first-last makes possible


def test_cli_plan_workload_takes_the_plan_flags():
    """plan --workload reads --cp, --framework, the overlap switches and --stage-layers into every
    candidate's plan (the same fields simulate reads), and shows the range over the open choices."""
    argv = ["plan", "--workload", "llama2-70b", "--devices", "128", "--tp", "8", "--pp", "4", "--cp", "2",
            "--node", "dgx-h100", "--batch-size", "64", "--framework", "megatron-distopt", "--dp-overlap", "no",
            "--stage-layers", "20,20,20,20", "--schedules", "1f1b", "--json"]
    code, stdout, _err = _cli(argv)
    assert code == 0
    doc = json.loads(stdout)
    plan = doc["plan"]
    assert (plan["tp"], plan["cp"], plan["pp"], plan["dp"]) == (8, 2, 4, 2)
    assert plan["framework"] == "megatron-distopt" and plan["dp_overlap"] is False
    assert plan["stage_layers"] == [20, 20, 20, 20]
    row = doc["rows"][0]
    assert row["schedule"] == "1f1b" and row["error"] is None and row["iteration_s"] > 0
