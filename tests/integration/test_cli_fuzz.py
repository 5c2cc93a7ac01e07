"""Property-based fuzz of every sub-command's arguments: bad input must end in one error
line, never a traceback or a hang.

The flags and their types are read from ``stalesim.cli.build_parser()`` itself
(every sub-parser, every action: option strings, ``type``, ``choices``, ``nargs``,
required), so a flag added tomorrow is fuzzed tomorrow. Each example runs
``stalesim.cli.main(argv)`` in this process and asserts the contract of
docs/failure.md:

* exit status 0, or 2 with exactly one ``stalesim: error: ...`` line on stderr
  (the last line; argparse's own errors use the same prefix);
* never a traceback (any exception other than ``SystemExit`` fails the test);
* never longer than ``LIMIT_S`` seconds.

What is stubbed, and why. Only the expensive work that starts *after* the
arguments are validated is replaced, at the call that starts it, so every
check a command makes before that call runs for real; a check that happens
only inside the stubbed work is a check that comes too late (after minutes of
profiling or training) and this test would let the bad input through to exit 0.

* ``stalesim.emulator.replay.Emulator`` (model build, data load, training):
  ``emulate()`` first runs ``check_request`` (config, model, data folder, run
  folder, checkpoint) for real; the stand-in returns a summary.
* ``stalesim.emulator.study.run_study`` (a pool of emulations): every grid
  point's config is built and checked for real; the stand-in returns summaries.
* ``stalesim.executor.launch.run_local`` (spawns ranks): ``run`` checks the config,
  devices, ``--master-addr``, the run folder and the checkpoints before it.
* ``stalesim.workloads.profiler.profile_model`` (timed training steps): the
  output path, model, device and batch sizes are checked before it;
  ``profile --roofline`` is not stubbed (it is arithmetic).
* ``stalesim.workloads.calibrate.calibrate`` (spawns ranks, ping-pong):
  ``check_args`` and the output path run before it.
* ``stalesim.validate.workflow.validate`` (profiles, calibrates, runs):
  ``check_config`` runs before it (files to reuse are read and checked).
* ``stalesim.cli.demo_cmd.run_demo`` (the seven steps): ``check_args`` runs first.
* every figure function in ``stalesim.figures.FIGURES`` (minutes of simulation
  and plotting): ``make_figures`` checks names and the output folder first.
* ``ProcessPoolExecutor`` in ``stalesim.sim.sweep``: a serial stand-in (the same
  points, simulated in this process; forking a pool per example is slow).

``schedule``, ``simulate``, ``partition`` and ``sweep`` run unstubbed.

Budget: a fixed number of examples per command with ``derandomize=True``, so CI
is reproducible and takes about a minute; ``STALESIM_FUZZ_EXAMPLES=N`` runs N
per command (and random seeds) for a local soak; ``STALESIM_FUZZ_LOG=FILE`` records
every command line with its exit status, time and last stderr line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalesim.cli import build_parser, main
from stalesim.cli.common import int_list
from stalesim.schedule import schedule_names
from stalesim.summary import RunSummary
from stalesim.workloads.hardware import device_names, link_names, node_names

LIMIT_S = float(os.environ.get("STALESIM_FUZZ_LIMIT_S", "8"))  # generous: CI boxes are shared
SOAK = int(os.environ.get("STALESIM_FUZZ_EXAMPLES", "0"))
EXAMPLES = SOAK or 30
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not SOAK, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------ the parser's own description
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


SUBCOMMANDS = _subparsers()


def _actions(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not isinstance(a, argparse._HelpAction)]


# ------------------------------------------------------------------ input files
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Input documents, good and bad, that path flags pick from."""
    d = tmp_path_factory.mktemp("inputs")
    layers = [{"name": f"l{i}", "forward_s": 1e-3 * (i + 1), "backward_s": 2e-3, "update_s": 1e-4,
               "param_bytes": 4096, "output_bytes": 1024, "saved_bytes": 2048, "flops": 10**6}
              for i in range(6)]
    prof = {"schema_version": 1, "model": "lenet5", "device": "cpu", "dtype": "float32",
            "batch_size": 8, "threads": 1, "layers": layers}
    hw = {"schema_version": 1, "device": "h100-sxm", "link": "nvlink4"}
    out = {}

    def put(name: str, text: str | bytes) -> None:
        p = d / f"{name}.json"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = str(p)

    put("profile", json.dumps(prof))
    put("hardware", json.dumps(hw))
    put("truncated", json.dumps(prof)[:40])
    put("empty", "")
    put("garbage", b"\x00\xff\xfe not json")
    put("nan", json.dumps({**prof, "batch_size": float("nan")}))
    put("huge", json.dumps({**prof, "layers": [{**layers[0], "forward_s": 1e300}]}))
    put("deep", "[" * 100_000 + "]" * 100_000)
    put("list", "[]")
    put("unicode", json.dumps({**prof, "model": "l\u00e9net\u2603", "device": "\u0441pu"}))
    put("existing", "an existing file an output may replace")
    (d / "order.csv").write_text("0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n")  # torch's CSV, 2 ranks
    out["csv"] = str(d / "order.csv")
    os.mkfifo(d / "fifo.json")  # opening it for reading would block forever
    out["fifo"] = str(d / "fifo.json")
    (d / "folder").mkdir()
    out["folder"] = str(d / "folder")
    out["missing"] = str(d / "no" / "such.json")
    out["devnull"] = os.devnull
    return out


# ------------------------------------------------------------------ value strategies
# Each flag has a *good* strategy (values the command should accept on their own) and a
# *bad* one (wrong type, out of range, NaN/inf, huge, empty, unicode, a file of the wrong
# kind). An example takes most flags good and a few bad, so it reaches deep into the
# command (and exit 0) as often as it probes one argument's check.
WORDS = st.sampled_from(["", " ", "x", "-1", "0", "nan", "inf", "1e999", "\u2603", "a,b", ",", "..",
                         "--stages", "\x00", "9" * 40, "1,,2", " 3 ", "\u0663", "0x10", "all", "none"])


def _ints(lo: int, hi: int) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    good = st.integers(lo, min(hi, lo + 5)).map(str)
    bad = st.one_of(st.sampled_from([lo - 1, hi + 1, -(10**9), 10**6, 10**9, 10**30]).map(str), WORDS,
                    st.sampled_from(["1.5", "1e3", "nan", "-inf", "+2", "2_0", str(hi)]))
    return good, bad


def _floats(lo: float, hi: float, lo_open: bool) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    good = st.floats(lo, min(hi, lo + 2), allow_nan=False, allow_infinity=False, exclude_min=lo_open,
                     allow_subnormal=False).map(repr)
    bad = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e300", "-1", "-0", "1e-300", str(hi),
                                     repr(hi * 10 if hi else 1.0), "5e-324", "1" + "0" * 400]), WORDS)
    return good, bad


def _lists(item: st.SearchStrategy[str], most: int = 3) -> st.SearchStrategy[str]:
    return st.lists(item, min_size=1, max_size=most).map(",".join)


SMALL = st.integers(1, 6).map(str)
BAD_INT = st.sampled_from(["0", "-1", "1000000", "10" * 20, "x", "", "nan", "1.5"])
NAMES: dict[str, tuple[list[str], list[str]]] = {
    "schedule": (schedule_names(), ["nosuch", "STALE", "dp,stale"]),
    "model": (["lenet5", "resnet8", "alexnet", "gpt-char:n_layer=1,n_embd=16,n_head=2,block_size=8"],
              ["resnet21", "resnet1000000", "resnet" + "9" * 30, "nosuch", "gpt-char:n_layer=1000000",
               "gpt-char:n_embd=7,n_head=2", "gpt-char:x=1", "gpt-char:block_size=" + "9" * 30]),
    "dataset": (["synthetic"], ["mnist", "cifar10", "imagenet"]),
    "target": (device_names(), ["tpu9"]),
    "link": (link_names(), ["smoke-signal"]),
    "node": (node_names(), ["dgx-z9"]),
    "intra_link": (link_names(), ["smoke-signal"]),
    "inter_link": (link_names(), ["smoke-signal"]),
    "devices": (["cpu:1", "cpu:2", "cpu:3"], ["cpu:0", "cpu:-1", "cpu:99999999", "cuda:0,1", "cuda:0,0",
                                               "gpu:2", "cpu", "cpu:1e3", "cpu:" + "9" * 30]),
    "master_addr": (["127.0.0.1", "localhost"], ["", "::1", " "]),
    "device": (["cpu"], ["cuda", "cuda:7", "tpu", "CPU"]),
    "dtype": (["float32", "float64"], ["int8", "bfloat17"]),
    "lr_schedule": (["constant", "step", "cosine"], ["linear"]),
    "compression": (["none"], ["fp16", "int8", "zip"]),
    "placements": (["S2", "2", "1,2", "S1;S2", "none"], ["S1000000", "2;;3", "Sx", "1,,2", "S" + "9" * 30]),
    "mitigations": (["none", "weight-prediction", "none,staleness-lr"], ["x", "none,,x"]),
    "only": (["staleness_table"], [",", "nosuch", "staleness_table,nosuch"]),
    "roofline": (device_names(), ["tpu9"]),
    "backend": (["gloo"], ["nccl", "mpi"]),
    "from_torch": (["GPipe", "Interleaved1F1B", "ZBVZeroBubble", "DualPipeV", "ScheduleLoopedBFS"],
                   ["Nope", "Schedule", "PipelineScheduleMulti"]),
}
NAME_LISTS = {"schedules": "schedule", "targets": "target", "links": "link"}
IN_FILES = {"profile": "profile", "contended_profile": "profile", "from_profile": "profile",
            "hardware": "hardware", "from_torch_csv": "csv", "schedule_file": "csv"}
OUT_PATHS = ("out", "output", "csv", "trace", "plot", "to_torch_csv")


def _value(action: argparse.Action, files: dict[str, str],
           fresh: str) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    """(good, bad) text for one flag, from what the parser says about it (type, choices, name)."""
    dest = action.dest
    bounds = getattr(action.type, "bounds", None)
    if dest in NAMES:
        good, bad = NAMES[dest]
        return st.sampled_from(good), st.one_of(st.sampled_from(bad), WORDS)
    if action.choices is not None:
        return st.sampled_from(sorted(map(str, action.choices))), WORDS
    declared = getattr(action.type, "choices", None)  # stalesim.cli.flagcheck's choice and catalog types
    if declared is not None:
        names = [str(c) for c in (declared() if callable(declared) else declared)]
        return st.sampled_from(names), st.one_of(st.sampled_from(["nosuch", names[0] + ",nosuch"]), WORDS)
    if bounds is not None:
        return _ints(*bounds[1:]) if bounds[0] == "int" else _floats(*bounds[1:])
    if dest in NAME_LISTS:
        good, bad = NAMES[NAME_LISTS[dest]]
        # two values at most: a sweep's work is the product of its lists (legitimately long)
        return _lists(st.sampled_from(good), 2), st.one_of(_lists(st.sampled_from(good + bad)), WORDS)
    if action.type is int_list or dest in ("stages", "microbatches", "workers", "seeds", "sizes",
                                           "batch_size", "ppv_candidates"):
        sizes = dest == "sizes"
        good = _lists(st.integers(4, 4096).map(str)) if sizes else _lists(SMALL, 2)
        return good, st.one_of(_lists(st.one_of(SMALL, BAD_INT)), WORDS)
    if dest in IN_FILES:
        right = files[IN_FILES[dest]]
        return st.just(right), st.sampled_from(sorted(v for k, v in files.items()
                                                      if v != right and k != "existing"))
    if dest in OUT_PATHS:
        good = st.sampled_from([fresh + ".json", fresh + ".png", fresh + "/sub/x.csv", fresh + "\u2603.svg"])
        return good, st.sampled_from([fresh + ".txt", files["existing"], files["folder"], files["devnull"],
                                      files["fifo"], "", files["existing"] + "/x"])
    if dest == "data_dir":
        return st.just("/work/shared/data"), st.sampled_from([files["folder"], files["missing"],
                                                              files["profile"], ""])
    custom = getattr(action.type, "__name__", "")
    if custom == "byte_size":
        return st.sampled_from(["16GB", "8e9", "40GiB", "1000"]), st.one_of(
            st.sampled_from(["0", "-1GB", "1e999", "16XB", "nanGB", "GB"]), WORDS)
    if custom == "batch_sizes":
        return st.sampled_from(["4", "4,8", "16"]), st.one_of(_lists(BAD_INT), st.just("4,4"), WORDS)
    if action.type is not None and action.type is not str:  # a type this test does not know yet
        return st.one_of(SMALL, _lists(SMALL)), st.one_of(_lists(BAD_INT), WORDS)
    return st.sampled_from(["x", "a-b"]), st.one_of(WORDS, st.text(max_size=12))


def _bases(command: str, files: dict[str, str], fresh: str) -> list[list[str]]:
    """A valid command line per command, which half the examples start from, so random
    flags vary working configurations (a command not listed here is fuzzed from scratch)."""
    prof = files["profile"]
    train = ["--dataset", "synthetic", "--iterations", "2", "--synthetic-size", "64", "--batch-size", "8"]
    llm = ["--workload", "llama2-7b", "--node", "dgx-h100"]  # the closed-form LLM estimate
    return {
        "schedule": [["stale", "-S", "3", "-N", "6"], ["--from-torch", "Interleaved1F1B", "--ranks", "2", "-M", "4"],
                     ["--from-torch-csv", files["csv"]], ["interleaved-1f1b", "-S", "4", "-V", "2", "-M", "2"]],
        "simulate": [["--profile", prof, "--schedule", "stale", "-S", "2"],
                     ["--profile", prof, "--schedule-file", files["csv"]], [*llm, "--schedule", "1f1b"]],
        "partition": [["--profile", prof, "--stages", "2"]],
        "sweep": [["--profile", prof, "--schedules", "stale,dp", "--stages", "2"],
                  [*llm, "--schedules", "1f1b,gpipe", "--tp", "1,2"]],
        "emulate": [train],
        "run": [train + ["--devices", "cpu:1"], train + ["--devices", "cpu:2", "--schedule", "stale", "-S", "2"]],
        "study": [train + ["--out", fresh, "--seeds", "0"]],
        "profile": [["--model", "lenet5", "--batch-size", "4", "-o", fresh + ".json"]],
        "calibrate": [["-o", fresh + ".json"]],
        "validate": [["--out", fresh, "--devices", "cpu:2", "--schedules", "stale"]],
        "figures": [["--out", fresh, "--only", "staleness_table"]],
        "plan": [["--devices", "2", "--target-loss", "1.0", "--out", fresh, "--dataset", "synthetic",
                  "--iterations", "4", "--max-horizon", "4", "--schedules", "stale", "--seeds", "0",
                  "--profile", prof], [*llm, "--devices", "8"]],
        "demo": [["--out", fresh, "--quick"]],
    }.get(command, [])


@st.composite
def argv_for(draw: Any, command: str, files: dict[str, str], fresh: str) -> list[str]:
    """One command line: some flags (required ones usually), most values good, a few bad,
    in any order; half of them appended to a working command line (later flags win)."""
    parser = SUBCOMMANDS[command]
    bases = _bases(command, files, fresh)
    base = draw(st.sampled_from(bases)) if bases and draw(st.booleans()) else []
    chosen = []
    p_flag = min(0.3, (2 if base else 4) / len(_actions(parser)))  # a few optional flags per example
    # a flag that argparse refuses next to one of the base line's (--epochs with --iterations)
    # would turn every example from that base into the same usage error: leave it out
    excluded = {id(a) for g in parser._mutually_exclusive_groups
                if any(opt in base for a in g._group_actions for opt in a.option_strings)
                for a in g._group_actions if not set(a.option_strings) & set(base)}
    imported = any(tok.startswith("--from-torch") for tok in base)  # a torch order names no schedule
    for action in _actions(parser):
        if id(action) in excluded or (imported and action.dest in ("name", "schedule")):
            continue
        if not action.option_strings:  # positional (``schedule NAME``)
            if draw(st.floats(0, 1)) < 0.8:
                chosen.append(action)
            continue
        if draw(st.floats(0, 1)) < (0.95 if action.required else p_flag):
            chosen.append(action)
    n_bad = draw(st.sampled_from([0, 0, 0, 1, 1, 2, len(chosen)]))
    bad = set(draw(st.permutations(range(len(chosen))))[:n_bad])
    argv: list[list[str]] = []
    for k, action in enumerate(chosen):
        if not action.option_strings:
            names = NAMES["schedule"]
            argv.append([draw(st.sampled_from(names[0] if k not in bad else names[1]))])
            continue
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append([flag])
            continue
        good, wrong = _value(action, files, fresh)
        n = 1 if action.nargs in (None, "?") else draw(st.integers(1, 3))
        vals = [draw(wrong if k in bad else good) for _ in range(n)]
        argv.append([flag, *vals] if not any(v.startswith("-") for v in vals)
                    else [f"{flag}={vals[0]}"])
    order = draw(st.permutations(argv))
    if base and base[0] in NAMES["schedule"][0] and any(not a.option_strings for a in chosen):
        base = base[1:]  # one positional name only
    return [command, *base] + [tok for group in order for tok in group]


# ------------------------------------------------------------------ stand-ins (see the module doc)
class _FakeEmulator:
    def __init__(self, cfg: Any, **kw: Any) -> None:
        self.cfg = cfg

    def run(self, resume: bool = False) -> dict[str, Any]:
        c = self.cfg
        return RunSummary(producer="emulate", schedule=c.schedule, model=c.model, dataset=c.dataset,
                          stages=c.num_stages, ppv=c.ppv, staleness_ir=[0] * c.num_stages,
                          staleness_measured=[0] * c.num_stages, steps_done=1, iterations=1, losses=[0.5],
                          final_loss=0.5, wall_s=0.0, wall_time_s=0.0, data_note="stand-in",
                          versions_match_ir=True).to_dict()


def _fake_run_study(points: list, out: Path, jobs: int = 2, progress: Any = None,
                    mitigation_of: dict | None = None, **_options: Any) -> list[dict]:
    return [{**RunSummary(producer="emulate", schedule=c.schedule, ppv=c.ppv, stages=c.num_stages,
                          staleness_ir=[0] * c.num_stages, staleness_measured=[0] * c.num_stages,
                          final_test_accuracy=0.5, final_loss=0.5, wall_time_s=0.0).to_dict(),
             "mitigation": (mitigation_of or {}).get(rid, "none"), "run_id": rid} for rid, c in points]


def _fake_run_local(job: Any, devs: Any, **kw: Any) -> dict[str, Any]:
    return RunSummary(producer="run", utilization={"0": 0.5}, peak_memory_bytes={"0": 1024}, final_loss=0.5,
                      losses=[0.5], schedule=job["train"]["schedule"], devices=devs.count,
                      device_kind=devs.kind, iterations=1, iteration_time_s=1e-3, throughput_samples_per_s=1.0,
                      staleness_measured=[0], staleness_ir=[0], versions_match_ir=True,
                      run_dir=job.get("out")).to_dict()


def _fake_profile_model(model: str, batch_sizes: list[int], **kw: Any) -> Any:
    from stalesim.workloads.profile import uniform_profile

    sizes = [batch_sizes] if isinstance(batch_sizes, int) else list(batch_sizes)
    from dataclasses import replace

    prof = uniform_profile(3, 1e-3, 2e-3, sizes[0], model=model, device="cpu")
    return replace(prof, whole_model_s=6e-3, sum_over_whole_ratio=1.0, threads=1, repeats=1)


def _fake_calibrate(backend: str, ranks: int, **kw: Any) -> dict[str, Any]:
    return {"schema_version": 1, "device": "cpu-core",
            "link": {"name": "stand-in", "latency_s": 1e-5, "bandwidth_Bps": 1e9, "fit_max_rel_error": 0.0,
                     "best_case": {"latency_s": 1e-5}},
            "allreduce": {"algorithm": "ring", "measured": []}, "comm_overlaps_compute": False,
            "cpu_comm_occupancy": 1.0}


def _fake_measure_calibration(comm_sizes: Any, **kw: Any) -> Any:
    from stalesim.cost.calibration import MachineCalibration

    fit = {"alpha_s": 1e-5, "beta_s_per_byte": 1e-10}
    return MachineCalibration(overhead_s={"F": 1e-5}, comm={k: dict(fit) for k in ("post", "complete", "ar_post",
                                                                          "ar_complete")},
                              host_cores=2, source="calibrate")


def _fake_validate(cfg: Any, progress: Any = None, tensorboard: Any = None) -> dict[str, Any]:
    return {"rows": [], "median_abs_time_error": None, "max_abs_time_error": None,
            "load_average": {"before": 0.0}}


class _SerialPool:
    """ProcessPoolExecutor's interface, run in this process."""

    def __init__(self, max_workers: int | None = None, **kw: Any) -> None:
        self.initializer, self.initargs = kw.get("initializer"), kw.get("initargs", ())

    def __enter__(self) -> _SerialPool:
        if self.initializer is not None:
            self.initializer(*self.initargs)
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def map(self, fn: Any, items: Any, chunksize: int = 1) -> Iterator[Any]:
        return map(fn, items)

    def submit(self, fn: Any, *a: Any) -> Future:
        f: Future = Future()
        f.set_result(fn(*a))
        return f


@pytest.fixture(scope="module")
def stubbed(tmp_path_factory) -> Iterator[Path]:
    """The stand-ins above, and a scratch working folder (default output paths land there)."""
    import stalesim.cli.demo_cmd
    import stalesim.cost.calibration
    import stalesim.emulator.replay
    import stalesim.emulator.study
    import stalesim.executor.launch
    import stalesim.figures
    import stalesim.sim.sweep
    import stalesim.validate.workflow
    import stalesim.workloads.calibrate
    import stalesim.workloads.profiler

    cwd = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stalesim.emulator.replay, "Emulator", _FakeEmulator)
        mp.setattr(stalesim.emulator.study, "run_study", _fake_run_study)
        mp.setattr(stalesim.executor.launch, "run_local", _fake_run_local)
        mp.setattr(stalesim.workloads.profiler, "profile_model", _fake_profile_model)
        mp.setattr(stalesim.workloads.calibrate, "calibrate", _fake_calibrate)
        mp.setattr(stalesim.cost.calibration, "measure_calibration", _fake_measure_calibration)
        mp.setattr(stalesim.validate.workflow, "validate", _fake_validate)
        mp.setattr(stalesim.cli.demo_cmd, "run_demo", lambda args, devices: 0)
        mp.setattr(stalesim.sim.sweep, "ProcessPoolExecutor", _SerialPool)
        for name, (_, what, data) in list(stalesim.figures.FIGURES.items()):
            mp.setitem(stalesim.figures.FIGURES, name, (lambda out, ctx: [], what, data))
        mp.setenv("STALESIM_NO_DOWNLOAD", "1")
        mp.setenv("STALESIM_CACHE", str(cwd / "cache"))
        mp.delenv("TORCHELASTIC_RUN_ID", raising=False)
        mp.chdir(cwd)
        yield cwd


# ------------------------------------------------------------------ the contract
def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    """``main(argv)`` in this process: (exit status, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors (2), --help (0)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def check_contract(argv: list[str]) -> int:
    log = os.environ.get("STALESIM_FUZZ_LOG")  # a soak's record: every command line and its outcome
    try:
        code, out, err, dt = run_cli(argv)
    except BaseException as exc:
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"argv": argv, "code": "exception", "err": repr(exc)[:300]}) + "\n")
        raise
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": argv, "code": code, "s": round(dt, 3),
                                 "err": (err.strip().splitlines() or [""])[-1][:200]}) + "\n")
    shown = " ".join(map(repr, argv))
    assert "Traceback" not in err, f"traceback for: {shown}\n{err}"
    assert dt < LIMIT_S, f"{dt:.1f} s (limit {LIMIT_S} s) for: {shown}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    if code == 0:
        assert not errors, f"exit 0 with an error line for: {shown}\n{err}"
    else:
        assert code == 2, f"exit {code} for: {shown}\n{err}"
        assert len(errors) == 1 and errors[0].startswith("stalesim: error: "), \
            f"expected one 'stalesim: error:' line for: {shown}\n{err}"
        assert lines[-1] == errors[0], f"the error is not the last line for: {shown}\n{err}"
    return code


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_fuzz_arguments(command: str, files: dict[str, str], stubbed: Path) -> None:
    counter = iter(range(10**9))

    @SETTINGS
    @given(data=st.data())
    def prop(data: Any) -> None:
        fresh = str(stubbed / "outs" / f"{command}{next(counter)}")
        check_contract(data.draw(argv_for(command, files, fresh)))

    prop()


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_base_command_lines_succeed(command: str, files: dict[str, str], stubbed: Path) -> None:
    """Each working command line the fuzz starts from exits 0 (with the stand-ins), so half
    the examples vary a configuration that works and reach past the up-front checks."""
    for base in _bases(command, files, str(stubbed / "outs" / f"base-{command}")):
        assert check_contract([command, *base]) == 0, base


def test_every_flag_is_fuzzed() -> None:
    """Every action of every sub-command gets a strategy (a new flag cannot be skipped)."""
    fake = {k: f"/tmp/{k}" for k in ("profile", "hardware", "folder", "devnull", "missing", "existing", "fifo", "csv")}
    for name, p in SUBCOMMANDS.items():
        for a in _actions(p):
            if a.option_strings and a.nargs != 0:
                good, bad = _value(a, fake, "/tmp/f")
                assert good is not None and bad is not None, (name, a.dest)
    assert {"schedule", "simulate", "partition", "sweep", "emulate", "run", "study", "profile",
            "calibrate", "validate", "figures", "demo"} <= set(SUBCOMMANDS)


def test_argparse_errors_use_the_stalesim_prefix() -> None:
    for argv in (["simulate", "--loss-time", "nan"], ["nosuch"], [], ["schedule", "--stages", "0"],
                 ["partition", "--profile", "p.json"]):
        code, _, err, _ = run_cli(argv)
        assert code == 2 and err.startswith("stalesim: error: ") and err.count("\n") == 1, (argv, err)


# ------------------------------------------------------------------ JSON documents
def _mutations(doc: Any) -> st.SearchStrategy[Any]:
    """Valid documents changed in one place: a value's type, a missing or extra key, huge,
    negative, NaN or infinite numbers, deep nesting, unicode."""
    bad_values = st.one_of(
        st.sampled_from([None, True, False, "", "\u2603", [], {}, [1], {"a": 1}, -1, 0, 1, 2**63, 10**30,
                         -(10**30), 1e300, -1e300, 1e-320, math.nan, math.inf, -math.inf, 0.5, "1",
                         "nan", "cpu", "ring", [[[[[]]]]]]),
        st.recursive(st.integers(), lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=3), c,
                                                                                          max_size=2),
                     max_leaves=5),
        st.text(max_size=8),
    )

    def paths(x: Any, prefix: tuple = ()) -> list[tuple]:
        out = [prefix]
        if isinstance(x, dict):
            for k, v in x.items():
                out += paths(v, (*prefix, k))
        elif isinstance(x, list):
            for i, v in enumerate(x[:3]):
                out += paths(v, (*prefix, i))
        return out

    all_paths = paths(doc)

    @st.composite
    def mutate(draw: Any) -> Any:
        d = json.loads(json.dumps(doc))
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(all_paths))
            op = draw(st.sampled_from(["set", "set", "delete", "add", "nest"]))
            parent, key = None, None
            node = d
            try:
                for k in path:
                    parent, key, node = node, k, node[k]
            except (KeyError, IndexError, TypeError):
                continue
            if parent is None or not isinstance(parent, (dict, list)):
                continue
            if op == "delete" and isinstance(parent, dict):
                del parent[key]
            elif op == "add" and isinstance(node, dict):
                node[draw(st.text(max_size=6))] = draw(bad_values)
            elif op == "nest":
                v: Any = node
                for _ in range(draw(st.sampled_from([2, 50]))):  # deeper: through files (deep.json)
                    v = [v]
                parent[key] = v
            else:
                parent[key] = draw(bad_values)
        return d

    return mutate()


PROFILE = {"schema_version": 1, "model": "lenet5", "device": "cpu", "dtype": "float32", "batch_size": 8,
           "threads": 1, "repeats": 3, "warmup": 1, "whole_model_s": 0.01, "sum_over_whole_ratio": 1.1,
           "layers": [{"name": "a", "forward_s": 1e-3, "backward_s": 2e-3, "update_s": 1e-4,
                       "param_bytes": 100, "output_bytes": 10, "saved_bytes": 20, "flops": 1000,
                       "weight_layers": 1, "backward_flops": 2000,
                       "spread": {"forward_s": {"min": 1e-3, "max": 2e-3, "iqr": 1e-4}}},
                      {"name": "b", "forward_s": 1e-3, "backward_s": 2e-3, "update_s": 0.0,
                       "param_bytes": 0, "output_bytes": 10, "saved_bytes": 0, "flops": 10}],
           "by_batch_size": [{"batch_size": 8, "layers": [
               {"name": "a", "forward_s": 1e-3, "backward_s": 2e-3, "update_s": 1e-4, "param_bytes": 100,
                "output_bytes": 10, "saved_bytes": 20, "flops": 1000},
               {"name": "b", "forward_s": 1e-3, "backward_s": 2e-3, "update_s": 0.0, "param_bytes": 0,
                "output_bytes": 10, "saved_bytes": 0, "flops": 10}]}],
           "meta": {"note": "x"}}
HARDWARE = {"schema_version": 1,
            "device": {"name": "d", "peak_flops": {"float32": 1e12}, "mem_bandwidth_Bps": 1e11,
                       "memory_bytes": 8e9, "kind": "gpu", "copy_engines": True},
            "link": {"name": "l", "latency_s": 1e-6, "bandwidth_Bps": 1e10},
            "comm_overlaps_compute": True, "cpu_comm_occupancy": 0.0, "allreduce": {"algorithm": "ring"},
            "cluster": {"node_size": 4, "inter_link": "ib-ndr", "inter_algorithm": "tree"}}
TRAIN = {"model": "lenet5", "dataset": "synthetic", "schedule": "stale", "stages": 2, "iterations": 4,
         "batch_size": 8, "lr": 0.1, "momentum": 0.9, "seed": 1, "synthetic_size": 64, "warmup": 1,
         "ppv": [2], "microbatches": 1, "workers": 1, "device": "cpu", "dtype": "float32"}


def _only_stalesim_errors(fn: Any, doc: Any) -> None:
    from stalesim.errors import StalesimError

    t0 = time.perf_counter()
    try:
        fn(doc)
    except StalesimError as exc:
        assert "\n" not in str(exc), str(exc)
    assert time.perf_counter() - t0 < LIMIT_S


@SETTINGS
@given(doc=_mutations(PROFILE))
def test_fuzz_profile_json(doc: Any) -> None:
    from stalesim.workloads.profile import profile_from_dict

    def use(d: Any) -> None:  # read it, then do what the simulator does first
        p = profile_from_dict(d)
        p.at_batch_size(16)
        sum(p.costs())

    _only_stalesim_errors(use, doc)


@SETTINGS
@given(doc=_mutations(HARDWARE))
def test_fuzz_hardware_json(doc: Any) -> None:
    from stalesim.sim.model import SimHardware
    from stalesim.workloads.hardware import hardware_from_dict

    _only_stalesim_errors(lambda d: SimHardware.from_hardware(hardware_from_dict(d)), doc)


@SETTINGS
@given(doc=_mutations(TRAIN))
def test_fuzz_train_config_json(doc: Any) -> None:
    from stalesim.runtime.config import TrainConfig

    def use(d: Any) -> None:
        if not isinstance(d, dict):
            from stalesim.errors import StalesimError

            with pytest.raises(StalesimError):
                TrainConfig.from_dict(d)
            return
        TrainConfig.from_dict(d).check()

    _only_stalesim_errors(use, doc)


@settings(SETTINGS, max_examples=max(10, EXAMPLES // 2))
@given(doc=st.one_of(_mutations(PROFILE), _mutations(HARDWARE)), which=st.sampled_from(["profile", "hardware"]))
def test_fuzz_json_through_the_cli(doc: Any, which: str, files: dict[str, str], stubbed: Path) -> None:
    """The same documents as files given to ``simulate`` (NaN and infinity written as JSON allows)."""
    path = stubbed / f"doc-{which}.json"
    try:
        path.write_text(json.dumps(doc))
    except (ValueError, RecursionError):  # too deep for json.dumps itself: write it by hand
        path.write_text("[" * 5000 + "]" * 5000)
    argv = ["simulate", "--schedule", "stale", "-S", "2", "--profile",
            str(path) if which == "profile" else files["profile"]]
    if which == "hardware":
        argv += ["--hardware", str(path)]
    check_contract(argv)


# ------------------------------------------------------------------ reliability, third round
# Checkpoints, torch CSV cells, gpt-char sizes and locked output folders, fuzzed at the
# reader or command that takes them.
def _real_checkpoint_pickle() -> bytes:
    """The pickle part of a checkpoint shaped like ours (nested dicts, lists, tensors, floats)."""
    import torch

    buf = io.BytesIO()
    torch.save({"format": 1, "config": {"lr": 0.1, "ppv": [2]}, "run": {"losses": {0: 2.3, 1: 2.2}},
                "runtimes": [[{"state": {"w": torch.zeros(3)}, "versions_used": [0, 1]}]]}, buf)
    import zipfile

    with zipfile.ZipFile(buf) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


@settings(SETTINGS, max_examples=max(20, EXAMPLES))
@given(data=st.data())
def test_fuzz_checkpoint_pickles(data: Any, tmp_path_factory) -> None:
    """Mutated checkpoint pickles (bytes flipped, cut, repeated, deep nesting spliced in):
    ``read_checkpoint`` returns a dict or raises one-line StalesimError, fast; it never
    runs code (the planted case is in tests/integration/test_checkpoint_io.py)."""
    import zipfile

    from stalesim.checkpoint_io import read_checkpoint

    pkl = bytearray(_real_checkpoint_pickle())
    how = data.draw(st.sampled_from(["flip", "cut", "repeat", "nest", "insert"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(pkl) - 1))
            pkl[i] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del pkl[data.draw(st.integers(0, len(pkl) - 1)):]
    elif how == "repeat":
        a = data.draw(st.integers(2, len(pkl) - 2))
        pkl[a:a] = pkl[a - 2:a] * data.draw(st.integers(1, 50_000))
    elif how == "nest":
        n = data.draw(st.integers(1, 300_000))
        pkl = bytearray(b"\x80\x02}X\x06\x00\x00\x00format" + b"]" * n + b"a" * (n - 1) + b"s.")
    else:
        a = data.draw(st.integers(2, len(pkl) - 2))
        pkl[a:a] = data.draw(st.binary(min_size=1, max_size=64))
    path = tmp_path_factory.mktemp("ck") / "checkpoint.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(pkl))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    _only_stalesim_errors(lambda p: read_checkpoint(p, what="resume", steps=10, tensors=4), path)


_CELL_PARTS = st.sampled_from(["0", "1", "12", "F", "B", "I", "W", "SEND_F", "RECV_B", "UNSHARD", ";", "(", ")",
                               "OVERLAP_F_B", " ", "junk", "\u2603", "-", "x"])


@SETTINGS
@given(cells=st.lists(st.lists(_CELL_PARTS, max_size=6).map("".join), min_size=1, max_size=6))
def test_fuzz_torch_csv_cells(cells: list[str], tmp_path_factory) -> None:
    """A cell is read only when it *is* an action: whatever is read prints back as the cell."""
    from stalesim.errors import StalesimError
    from stalesim.schedule.torch_interop import read_torch_csv

    path = tmp_path_factory.mktemp("csv") / "order.csv"
    path.write_text(",".join(c.replace(",", "") for c in cells) + "\n")
    try:
        read_torch_csv(path)
    except StalesimError as exc:
        assert "\n" not in str(exc)
        return
    import re

    from torch.distributed.pipelining.schedules import _Action

    for cell in cells:
        text = cell.replace(",", "").strip()
        act = _Action.from_str(text)
        same = re.sub(r"\d+", lambda m: str(int(m.group())), text)  # 0F01 is 0F1
        assert (act is None and text == "") or repr(act) == same, (cell, act)


_GPT_OPTS = st.fixed_dictionaries({
    "n_layer": st.sampled_from([1, 2, 1024]), "n_embd": st.sampled_from([16, 576, 16384]),
    "n_head": st.sampled_from([1, 8]), "block_size": st.sampled_from([16, 4096, 65536])})


@SETTINGS
@given(opts=_GPT_OPTS, batch=st.sampled_from(["1", "8", "128", "4096"]),
       size=st.sampled_from(["4", "1024", "100000"]), cmd=st.sampled_from(["emulate", "study", "run"]))
def test_fuzz_gpt_sizes_are_refused_up_front(opts: dict, batch: str, size: str, cmd: str, stubbed: Path) -> None:
    """gpt-char options inside their documented bounds: exit 0 (stubbed training), or one line
    at once: the parameter bound or the memory preflight (against a stated 16 GiB)."""
    name = "gpt-char:" + ",".join(f"{k}={v}" for k, v in opts.items())
    argv = [cmd, "--model", name, "--dataset", "synthetic", "--iterations", "2", "--batch-size", batch,
            "--synthetic-size", size, "--out", str(stubbed / "outs" / f"gpt{abs(hash((name, batch, size, cmd)))}")]
    if cmd == "run":
        argv += ["--devices", "cpu:2", "--schedule", "gpipe", "-S", "2"]
    os.environ["STALESIM_MEMORY_BYTES"] = str(16 << 30)
    try:
        code = check_contract(argv)
    finally:
        del os.environ["STALESIM_MEMORY_BYTES"]
    from stalesim.runtime.preflight import estimate_run

    if code == 0 and cmd == "emulate":
        from stalesim.runtime.config import TrainConfig

        cfg = TrainConfig(model=name, dataset="synthetic", iterations=2, batch_size=int(batch),
                          synthetic_size=int(size))
        assert estimate_run(cfg).total <= 16 << 30  # what passed fits the stated memory


@pytest.mark.parametrize("command", ["emulate", "study", "run", "validate"])
def test_a_locked_output_folder_is_one_line(command: str, stubbed: Path) -> None:
    """Another process holds the folder (simulated by a lock on another descriptor)."""
    import fcntl

    from stalesim.outlock import LOCK_NAME

    out = stubbed / "outs" / f"locked-{command}"
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, json.dumps({"pid": 4242, "command": "stalesim study ...", "started": "today"}).encode(), 0)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        base = {"emulate": ["--model", "lenet5", "--dataset", "synthetic", "--iterations", "2"],
                "study": ["--model", "lenet5", "--dataset", "synthetic", "--iterations", "2", "--seeds", "0"],
                "run": ["--model", "lenet5", "--dataset", "synthetic", "--iterations", "2", "--devices", "cpu:2",
                        "--schedule", "gpipe", "-S", "2"],
                "validate": ["--devices", "cpu:2", "--schedules", "stale"]}[command]
        code, _, err, _ = run_cli([command, *base, "--out", str(out)])
        assert code == 2 and err.strip() == (f"stalesim: error: {out}: in use by another stalesim command "
                                             "(pid 4242, 'stalesim study ...', started today); wait for it "
                                             "to finish or choose another --out"), err
    finally:
        os.close(fd)
    assert check_contract([command, *base, "--out", str(out)]) == 0  # free again: it runs
