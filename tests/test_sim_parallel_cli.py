"""``simulate``/``sweep --workload``: LLM-scale answers from the command line, fast, with memory by component."""

import json
import time

import pytest

from stalesim.cli import main

LLAMA = ["--workload", "llama2-70b", "--tp", "8", "--pp", "8", "--dp", "16", "--node", "dgx-h100",
         "--schedule", "1f1b", "-B", "1024"]


def test_simulate_workload_answers_in_under_a_second_with_memory_by_component(capsys):
    assert main(["simulate", *LLAMA, "--json"]) == 0  # (imports the simulator's modules)
    d = json.loads(capsys.readouterr().out)
    t0 = time.perf_counter()
    assert main(["simulate", *LLAMA, "--json"]) == 0
    assert time.perf_counter() - t0 < 1.0  # generous: the closed form takes about a millisecond
    assert json.loads(capsys.readouterr().out) == d
    n = 1_102_336_000  # parameters per GPU of stage 0 (tests/test_sim_parallel.py has the arithmetic)
    assert d["memory_breakdown"] == {"weights": 2 * n, "gradients": 2 * n, "optimizer": 12 * n,
                                     "activations": 375_521_280 * 80, "weight_versions": 0}
    assert d["fits"] and d["plan"]["gpus"] == 1024 and d["plan"]["microbatches"] == 64
    assert 0 < d["iteration_s"] < 60 and d["device_memory_bytes"] == 80e9
    assert main(["simulate", *LLAMA]) == 0
    out = capsys.readouterr().out
    assert "memory per GPU (device 0): 47.7 GB of 80 GB, fits" in out


def test_the_new_users_case_now_answers(capsys):
    # one GPU per replica: 16 bytes x 69 B parameters cannot fit; tensor + pipeline parallelism can
    assert main(["simulate", "--workload", "llama2-70b", "--dp", "1024", "--node", "dgx-h100",
                 "--schedule", "1f1b", "-B", "1024"]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_sweep_workload_ranks_what_fits(capsys):
    t0 = time.perf_counter()
    assert main(["sweep", "--workload", "llama2-70b", "--tp", "1,2,4,8", "--pp", "1,2,4,8", "--gpus", "1024",
                 "--node", "dgx-h100", "--schedules", "1f1b,2bw", "-B", "1024", "--recompute", "none,full",
                 "--zero", "0,1", "--json"]) == 0
    assert time.perf_counter() - t0 < 5.0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 * 4 * 4 * 2 * 2 and rows[0]["rank"] == 1 and rows[0]["fits"]
    ok = [r for r in rows if r["error"] is None]
    fitting = [r for r in ok if r["fits"]]
    assert fitting and all(a["tokens_per_s"] >= b["tokens_per_s"] for a, b in zip(fitting, fitting[1:]))
    assert all(r["tp"] * r["pp"] * r["dp"] == 1024 for r in ok)
    assert {"weights_gb", "optimizer_gb", "activations_gb", "weight_versions_gb"} <= set(fitting[0])


@pytest.mark.parametrize("argv,needle", [
    (["simulate", "--profile", "p.json", "--schedule", "1f1b", "--tp", "2"], "--tp: needs --workload"),
    (["simulate", "--workload", "llama2-70b", "--schedule", "1f1b"], "--workload: needs the hardware"),
    (["simulate", "--workload", "gpt-9", "--schedule", "1f1b", "--node", "dgx-h100"], "workload: unknown 'gpt-9'"),
    (["simulate", *LLAMA, "--ppv", "3"], "--ppv: does not apply to --workload"),
    (["simulate", *LLAMA, "--profile", "p.json"], "--workload: give either --profile or --workload"),
    (["simulate", *LLAMA, "--stages", "4"], "--stages: 4 contradicts --pp 8"),
    (["simulate", *LLAMA, "--zero", "2"], "zero: stage 2 shards gradients"),
    (["simulate", *LLAMA, "-M", "3"], "--batch-size: 1024 sequences contradict -M 3"),
    (["simulate", "--schedule", "1f1b"], "--profile: give a profile"),
    (["simulate", *LLAMA, "--bucket-mb", "25"], "--bucket-mb: does not apply to --workload"),
    (["simulate", *LLAMA, "-N", "40"], "--batches: does not apply to --workload"),
    (["sweep", "--workload", "llama2-70b", "--schedules", "1f1b", "--targets", "h100-sxm,h200"],
     "--targets: --workload sweeps one target"),
])
def test_bad_workload_flags_are_one_line_errors(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
