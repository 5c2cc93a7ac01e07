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
    n = 1_102_336_000  # parameters per GPU of stage 0 (tests/unit/test_sim_parallel.py has the arithmetic)
    assert d["memory_breakdown"] == {"weights": 2 * n, "gradients": 4 * n, "master_weights": 4 * n,
                                     "optimizer": 8 * n, "weight_versions": 0, "activations": 375_521_280 * 80,
                                     "recompute": 0, "backward": 88_080_384, "gathered": 0, "loss": 0}
    assert d["fits"] and d["plan"]["gpus"] == 1024 and d["plan"]["microbatches"] == 64
    assert 0 < d["iteration_s"] < 60 and d["device_memory_bytes"] == 80e9
    assert main(["simulate", *LLAMA]) == 0
    out = capsys.readouterr().out
    assert "memory per GPU (device 0): 50.0 GB (49.9 to 62.9) of 80 GB, fits" in out


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


# a shape no preset has: 94 layers of GQA + SwiGLU, 5120 wide, a 96k vocabulary, 16k sequence
SPEC = {"name": "my-40b", "layers": 94, "hidden": 5120, "heads": 40, "kv_heads": 8, "ffn": 13824,
        "ffn_type": "swiglu", "vocab": 96000, "seq": 16384, "norm": "rmsnorm", "bias": False,
        "tied_embeddings": False, "learned_positions": False, "dropout": False, "attention": "flash"}


def test_model_spec_with_uneven_stages_and_context_parallelism(tmp_path, capsys):
    """The issue's command: a spec file, tp 8 x cp 2 x pp 16 x dp 64 on H100 nodes, one layer fewer
    on the first and last stage, in under a second, with the memory by term and the range."""
    path = tmp_path / "my.json"
    path.write_text(json.dumps(SPEC))
    argv = ["simulate", "--model-spec", str(path), "--tp", "8", "--pp", "16", "--dp", "64", "--cp", "2",
            "--node", "dgx-h100", "--schedule", "interleaved-1f1b", "--stage-layers", "first-last", "--sp",
            "-B", "2048"]
    assert main([*argv, "--json"]) == 0  # (imports)
    d = json.loads(capsys.readouterr().out)
    t0 = time.perf_counter()
    assert main(argv) == 0
    assert time.perf_counter() - t0 < 1.0
    out = capsys.readouterr().out
    assert d["workload"] == "my-40b" and d["plan"]["gpus"] == 8 * 2 * 16 * 64 and d["plan"]["cp"] == 2
    # V = 2: 32 stages of (94 + 2) / 32 = 3 layers, the first and last 2
    assert d["plan"]["stage_layers"] == [2] + [3] * 30 + [2]
    assert set(d["memory_breakdown"]) >= {"weights", "activations"}
    for term in d["memory_breakdown"]:
        assert f"{term} " in out  # every term named in the text
    r = d["range"]
    assert r["open"] == ["chunks", "micro_batch", "recompute", "overlap"] and r["evaluated"] > 0
    assert r["fastest"]["iteration_s"] <= d["iteration_s"] <= r["slowest"]["iteration_s"]
    assert r["point"] == {"chunks": 2, "micro_batch": 1, "recompute": "none", "overlap": "framework"}
    assert "range over open choices (chunks 2,3,4,6,8; micro-batch 1,2,4,8,16" in out
    assert "context parallel 2 (GPUs = tp x cp x pp x dp = 16384); layers per stage: 2,3,3," in out
    assert "fastest that fits" in out or "no combination fits" in out
    # choices given are not opened
    assert main([*argv, "--micro-batch", "1", "--recompute", "full", "-V", "2", "--tp-overlap", "no",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["range"]["open"] == []


def test_shape_flags_override_a_preset(capsys):
    argv = ["simulate", "--workload", "llama3.1-405b", "--layers", "64", "--seq", "4096", "--tp", "8", "--pp", "8",
            "--dp", "4", "--node", "dgx-h100", "--schedule", "1f1b", "-B", "64", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["workload"] == "llama3.1-405b" and d["plan"]["stage_layers"] is None
    # 8 layers per stage of the 405B's width (weights per GPU of a middle stage: the memory's device 1+)
    assert main([*argv[:-1], "--stage-layers", "9,8,8,8,8,8,8,7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["stage_layers"] == [9, 8, 8, 8, 8, 8, 8, 7]


def test_sweep_takes_a_model_spec_and_cp(tmp_path, capsys):
    path = tmp_path / "my.toml"
    path.write_text("\n".join(f"{k} = {json.dumps(v).lower() if isinstance(v, bool) else json.dumps(v)}"
                              for k, v in SPEC.items()))
    assert main(["sweep", "--model-spec", str(path), "--tp", "4,8", "--pp", "16", "--cp", "2", "--gpus", "512",
                 "--node", "dgx-h100", "--schedules", "1f1b", "-B", "256", "--stage-layers", "first-last",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 and all(r["error"] is None for r in rows)
    assert {r["dp"] for r in rows} == {512 // (4 * 2 * 16), 512 // (8 * 2 * 16)}


@pytest.mark.parametrize("argv,needle", [
    (["simulate", "--workload", "llama3-8b", "--model-spec", "x.json", "--schedule", "1f1b", "--node", "dgx-h100"],
     "--model-spec: give one of --workload NAME and --model-spec FILE"),
    (["simulate", "--model-spec", "/no/such.json", "--schedule", "1f1b", "--node", "dgx-h100"],
     "model_spec: cannot read such.json"),
    (["simulate", "--profile", "p.json", "--schedule", "1f1b", "--cp", "2"], "--cp: needs --workload NAME or"),
    (["simulate", *LLAMA, "--kv-heads", "3"], "kv_heads: 3 must be >= 1 and divide heads 64"),
    (["simulate", *LLAMA, "--ffn-type", "relu"], "ffn_type: expected one of gelu, swiglu"),
    (["simulate", *LLAMA, "--cp", "3"], "cp: sequence 4096 does not split into 2 x cp = 6"),
    (["simulate", *LLAMA, "--stage-layers", "10,10"], "stage_layers: 2 entries for pp x chunks = 8 stages"),
    (["simulate", *LLAMA, "--stage-layers", "11,10,10,10,10,10,10,10"], "= 81 layers, the model has 80"),
    (["simulate", *LLAMA, "--stage-layers", "x"], "--stage-layers: expected first-last or comma-separated"),
    (["simulate", *LLAMA, "--pp", "6", "--stage-layers", "first-last"], "first-last needs layers + 2 = 82"),
    (["simulate", *LLAMA, "--framework", "jax"], "framework: expected one of megatron"),
    (["simulate", *LLAMA, "--dp-overlap", "maybe"], "--dp-overlap: expected yes or no"),
    (["plan", "--workload", "llama2-70b", "--devices", "64", "--tp", "8", "--node", "dgx-h100", "--cp", "3"],
     "devices: 64 GPUs are not a multiple of tp x cp x pp = 24"),
    (["plan", "--workload", "llama2-70b", "--devices", "64", "--tp", "8", "--node", "dgx-h100", "--framework", "jax"],
     "framework: expected one of megatron"),
])
def test_bad_shape_and_split_flags_are_one_line_errors(capsys, argv, needle):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own type errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


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


def test_p2p_overlap_flag_sets_the_pipeline_exchanges(capsys):
    """Megatron's plain 1F1B waits for every send and receive (the framework's default): ``no`` is
    the default's answer, ``yes`` hides the exchanges and is faster; plan --workload takes it too."""
    def iteration(*flags: str) -> float:
        assert main(["simulate", *LLAMA, *flags, "--json"]) == 0
        return float(json.loads(capsys.readouterr().out)["iteration_s"])

    default, blocking, overlapped = iteration(), iteration("--p2p-overlap", "no"), iteration("--p2p-overlap", "yes")
    assert default == blocking and overlapped < blocking
    with pytest.raises(SystemExit) as e:
        main(["simulate", *LLAMA, "--p2p-overlap", "maybe"])
    assert e.value.code == 2 and "--p2p-overlap" in capsys.readouterr().err
    assert main(["plan", "--workload", "llama2-7b", "--node", "dgx-h100", "--devices", "8",
                 "--schedules", "1f1b", "--p2p-overlap", "yes"]) == 0
