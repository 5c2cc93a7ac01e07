"""Every flag of ``plan``, ``sweep`` and ``simulate`` (with and without ``--workload``) refuses an
out-of-range, a wrong-type and an inapplicable value in one ``stalesim: error:`` line naming it,
exit 2, nothing on stdout (stalesim.cli.flagcheck).

The flags come from the parser itself; each flag's bad values come from its own declaration (an
argparse type's ``bounds``, ``choices`` or ``item``, argparse ``choices``, a switch) or, for the
free-text flags, from :data:`FREE` below. A flag with neither fails :func:`test_every_flag_has_a_check`,
so a flag added tomorrow must say how it is checked. "Inapplicable": an LLM flag without
``--workload``, and with it any flag the closed form does not read.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from stalesim.cli import build_parser, main
from stalesim.cli.flagcheck import LLM_GROUP, WORKLOAD_READS
from stalesim.workloads.profile import uniform_profile

COMMANDS = ("plan", "sweep", "simulate")
LLM = ["--workload", "llama2-7b", "--node", "dgx-h100"]
# a command line of each command and mode that is fine as it stands (PROFILE, OUT: filled in per test)
BASE = {
    ("plan", True): ["plan", *LLM, "--devices", "8"],
    ("plan", False): ["plan", "--devices", "2", "--target-loss", "1.0", "--out", "OUT"],
    ("sweep", True): ["sweep", *LLM, "--schedules", "1f1b"],
    ("sweep", False): ["sweep", "--profile", "PROFILE", "--schedules", "1f1b", "-S", "2"],
    ("simulate", True): ["simulate", *LLM, "--schedule", "1f1b"],
    ("simulate", False): ["simulate", "--profile", "PROFILE", "--schedule", "1f1b", "-S", "2"],
}
# free-text flags by dest: (a bad value or None where any text is the user's own name, a good value).
# A path the command reads is bad when missing; a name of a catalog or registry is bad when unknown.
MISSING = "/no/such/file.json"
FREE: dict[str, tuple[str | None, str]] = {
    "profile": (MISSING, "PROFILE"),
    "hardware": (MISSING, MISSING),
    "calibration": (MISSING, MISSING),
    "model_spec": (MISSING, MISSING),
    "schedule_file": (MISSING, MISSING),
    "workload": ("gpt-9", "llama2-7b"),
    "node": ("nosuch", "dgx-a100"),
    "target": ("nosuch", "h100-sxm"),
    "targets": ("nosuch", "h100-sxm"),
    "link": ("nosuch", "nvlink4"),
    "links": ("nosuch", "nvlink4"),
    "intra_link": ("nosuch", "nvlink4"),
    "inter_link": ("nosuch", "ib-ndr"),
    "schedule": ("nosuch", "gpipe"),
    "model": ("nosuch", "lenet5"),
    "dataset": ("nosuch", "synthetic"),
    "emulate_device": ("gpu", "cuda"),
    "optimizers": ("sgd,nosuch", "adam"),
    "mitigations": ("nosuch", "all"),
    "ffn_type": ("relu", "gelu"),
    "stage_layers": ("x", "first-last"),
    "seeds": ("-1", "4"),
    "warmups": ("-1", "5"),
    "switches": ("0", "5"),
    "ppv": ("x", "3"),
    "ppv_candidates": ("x", "3"),
    "stages": ("0", "4"),
    "microbatches": ("0", "4"),
    "workers": ("0", "2"),
    "stages_per_device": ("0", "2"),
    "devices": ("0", "16"),
    # output paths and folders: any name is the user's (a bad folder is tested where it is written)
    "out": (None, "OUT"),
    "csv": (None, "OUT/rows.csv"),
    "plot": (None, "OUT/plot.png"),
    "trace": (None, "OUT/trace.json"),
    "data_dir": (None, "/tmp"),
    "tensorboard": (None, "OUT/tb"),
    # the launcher's own names (checked by stalesim.cli.launch_args)
    "slurm_partition": (None, "gpu"),
    "slurm_config": (None, MISSING),
    "ray_address": (None, "auto"),
    "launcher": ("nosuch", "slurm"),
}
LIMIT_S = 20  # a refusal is immediate; longer means the command started work before checking


def _parsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {c: sub.choices[c] for c in COMMANDS}


PARSERS = _parsers()


def _options(cmd: str) -> list[argparse.Action]:
    return [a for a in PARSERS[cmd]._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _llm(cmd: str) -> set[str]:
    return {a.dest for g in PARSERS[cmd]._action_groups if g.title == LLM_GROUP for a in g._group_actions}


def _declared(a: argparse.Action) -> tuple[list[str], str | None]:
    """(bad values, a good value other than the default) from the flag's own declaration."""
    t = a.type
    bounds = getattr(t, "bounds", None)
    choices = getattr(t, "choices", None)
    choices = list(choices() if callable(choices) else choices) if choices is not None else a.choices
    if isinstance(a, (argparse._StoreTrueAction, argparse._StoreConstAction)):
        return [], ""
    if bounds is not None:
        kind, lo, hi = bounds[:3]
        below = lo - 1 if kind == "int" else (lo if len(bounds) > 3 and bounds[3] else lo - 1)
        good = lo if lo != a.default and lo > 0 else lo + 1
        return [str(below), str(hi * 10 + 1) if kind == "int" else f"{hi * 10:g}", "x"], str(good)
    if choices:
        names = [str(c) for c in choices]
        return ["nosuch"], next(c for c in names if c != str(a.default))
    if getattr(t, "__name__", "") == "_yes_no":
        return ["maybe"], "yes"
    return [], None


def _values(cmd: str, a: argparse.Action) -> tuple[list[str], str | None]:
    bad, good = _declared(a)
    if a.dest in FREE:
        free_bad, free_good = FREE[a.dest]
        bad = bad + ([free_bad] if free_bad is not None and free_bad not in bad else [])
        good = free_good if good is None else good
    return bad, good


def test_every_flag_has_a_check():
    """A flag with no declared range or choices and no entry in FREE: say how it is checked."""
    missing = [(cmd, a.option_strings[0]) for cmd in COMMANDS for a in _options(cmd)
               if _values(cmd, a) == ([], None)]
    assert missing == []


def _cases() -> Iterator[Any]:
    for cmd in COMMANDS:
        llm = _llm(cmd)
        reads = set(WORKLOAD_READS[cmd]) | llm
        for a in _options(cmd):
            flag = next((s for s in a.option_strings if s.startswith("--")), a.option_strings[0])
            if a.dest in ("workload", "model_spec"):
                continue  # the mode itself
            bad, good = _values(cmd, a)
            workload = a.dest in llm or a.dest in reads
            for v in bad:
                yield pytest.param(cmd, workload, [flag, v], a, id=f"{cmd}{'-llm' if workload else ''} {flag} {v}")
            if good is None:
                continue
            given = [flag] + ([good] if good != "" else [])
            if a.dest in llm:  # without --workload
                yield pytest.param(cmd, False, given, a, id=f"{cmd} {flag} without --workload")
            elif a.dest not in reads:  # with it
                yield pytest.param(cmd, True, given, a, id=f"{cmd}-llm {flag} inapplicable")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("flags")
    prof = d / "p.json"
    uniform_profile(8, 1e-3, 2e-3, 128, output_bytes=10_000).to_json(prof)
    (d / "out").mkdir()
    return {"PROFILE": str(prof), "OUT": str(d / "out")}


def _fill(argv: list[str], paths: dict[str, str]) -> list[str]:
    out = []
    for x in argv:
        for k, v in paths.items():
            x = x.replace(k, v) if x.startswith(k) else x
        out.append(x)
    return out


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str, str]:
    def too_long(*_: Any) -> None:
        raise TimeoutError(f"still running after {LIMIT_S} s: {' '.join(argv)}")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(LIMIT_S)
    try:
        try:
            rc: Any = main(argv)
        except SystemExit as exc:
            rc = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _names_flag(line: str, a: argparse.Action) -> bool:
    """The line names the flag: one of its spellings, or its field (``profile: ...``, ``profile 'p.json': ...``)."""
    names = {*a.option_strings, f"{a.dest}:", f"--{a.dest.replace('_', '-')}"}
    return any(n in line for n in names) or line.startswith(f"stalesim: error: {a.dest} ")


@pytest.mark.parametrize("cmd,workload,extra,action", list(_cases()))
def test_bad_flag_is_one_line_naming_it(cmd, workload, extra, action, paths, capsys):
    argv = _fill(BASE[(cmd, workload)] + extra, paths)
    rc, out, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2, (argv, err)
    assert out == ""
    assert len(lines) == 1 and lines[0].startswith("stalesim: error:"), err
    assert _names_flag(lines[0], action), lines[0]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_bases_are_fine(cmd, paths, capsys):
    """The command lines the cases start from succeed as they stand (so a refusal is the flag's)."""
    rc, out, err = _run(_fill(BASE[(cmd, True)], paths), capsys)
    assert rc == 0, err
    assert out
    if cmd != "plan":  # plan without --workload emulates (minutes): its base is never run here
        rc, out, err = _run(_fill(BASE[(cmd, False)], paths), capsys)
        assert rc == 0, err


# combinations that cannot apply, each refused naming the flag that cannot (the cases and kin)
COMBOS = [
    (["plan", *LLM, "--devices", "8", "--tp", "1", "--sp"], "sp:"),
    (["plan", *LLM, "--devices", "8", "--batch-size", "7"], "--batch-size: 7 is not divisible by dp x micro_batch"),
    (["plan", *LLM, "--devices", "8", "--tp", "3"], "devices: 8 GPUs are not a multiple of tp x cp x pp = 3"),
    (["plan", "--workload", "llama2-7b", "--target", "h100-sxm", "--link", "nvlink4", "--node-size", "3",
      "--inter-link", "ib-ndr", "--devices", "8"], "node_size: 8 GPUs (tp x cp x pp x dp) do not fill whole nodes"),
    (["plan", *LLM, "--devices", "8", "--zero", "0", "--lr", "0.1"], "--lr: does not apply to --workload"),
    (["sweep", *LLM, "--schedules", "1f1b", "--tp", "1,3"], "--tp: 3 fits no point of the grid: tp: 3 must divide"),
    (["sweep", *LLM, "--schedules", "1f1b,dp"], "--schedules: dp fits no point of the grid"),
    (["sweep", *LLM, "--schedules", "1f1b", "--tp", "8", "--pp", "8", "-P", "4", "--gpus", "64"],
     "--workers: give either --gpus or --workers"),
    (["sweep", *LLM, "--schedules", "1f1b", "--zero", "1"], "zero: stage 1 shards over the data-parallel ranks"),
    (["sweep", *LLM, "--schedules", "1f1b", "-j", "2"], "--jobs: does not apply to --workload"),
    (["simulate", *LLM, "--schedule", "1f1b", "--tp", "2", "--pp", "2", "-P", "2", "-B", "3"],
     "--batch-size: 3 is not divisible"),
    (["simulate", *LLM, "--schedule", "1f1b", "-P", "12"], "node_size: 12 GPUs"),
    (["simulate", *LLM, "--schedule", "1f1b", "--zero", "1"], "zero: stage 1 shards over the data-parallel ranks"),
    (["simulate", *LLM, "--schedule", "1f1b", "--method", "fast"], "--method: does not apply to --workload"),
    (["simulate", *LLM, "--schedule", "dp"], "schedule: 'dp' has no LLM estimate"),
]


@pytest.mark.parametrize("argv,needle", COMBOS, ids=[" ".join(c[0][4:]) for c in COMBOS])
def test_combinations_that_cannot_apply(argv, needle, capsys):
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("stalesim: error: ") and needle in err, err


def test_sweep_leaves_out_points_that_cannot_apply_with_a_warning(capsys):
    """A value some grid points can use stays; the points that cannot are named on stderr."""
    rc, out, err = _run(["sweep", *LLM, "--schedules", "1f1b", "--tp", "1,2", "-P", "1,2", "--zero", "0,1",
                         "--json"], capsys)
    assert rc == 0, err
    import json

    rows = json.loads(out)
    assert {(r["tp"], r["dp"], r["zero"]) for r in rows} == {(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 0),
                                                             (1, 2, 1), (2, 2, 1)}
    assert "2 grid point(s) cannot apply" in err and "zero: stage 1 shards" in err


def _timeout_flags() -> Iterator[Any]:
    """Every seconds-valued deadline of every command (``--timeout``, ``--check-timeout``, ...)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for cmd, parser in sorted(sub.choices.items()):
        for a in parser._actions:
            if any("timeout" in s or "deadline" in s for s in a.option_strings):
                yield pytest.param(cmd, a, id=f"{cmd} {a.option_strings[0]}")


TIMEOUT_FLAGS = list(_timeout_flags())


def test_the_timeout_flags_are_found():
    assert {p.id for p in TIMEOUT_FLAGS} >= {"run --timeout", "calibrate --timeout", "plan --check-timeout"}


@pytest.mark.parametrize("cmd,action", TIMEOUT_FLAGS)
def test_timeout_flags_refuse_less_than_a_rank_group_needs(cmd, action, capsys):
    """A timeout below :data:`MIN_RANK_TIMEOUT_S` is refused before any work, in one line naming the
    flag (``run --timeout 0.001`` used to start the ranks and fail at their first barrier)."""
    from stalesim.limits import MIN_RANK_TIMEOUT_S

    bounds = getattr(action.type, "bounds", None)
    assert bounds is not None and bounds[1] >= MIN_RANK_TIMEOUT_S, (cmd, bounds)
    flag = action.option_strings[0]
    for bad in ("0", "0.001", "-1", "nan", "x"):
        rc, out, err = _run([cmd, flag, bad], capsys)
        lines = err.strip().splitlines()
        assert rc == 2 and out == "", (cmd, bad, err)
        assert len(lines) == 1 and lines[0].startswith("stalesim: error:") and flag in lines[0], err
