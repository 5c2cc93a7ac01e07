"""benchmarks/__main__.py: the explicit list parses, every entry takes ``--quick``, a failing
benchmark fails the run without stopping the others, and the cheapest quick runs print what
their goals need."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types

import pytest

from benchmarks.__main__ import BENCHMARKS, Benchmark, by_name, main


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda b: b.name)
def test_every_entry_parses_its_quick_arguments(bench: Benchmark, capsys: pytest.CaptureFixture[str]) -> None:
    mod = importlib.import_module(bench.module)
    params = list(inspect.signature(mod.main).parameters)
    assert params[:1] == ["argv"], f"{bench.module}.main must take argv"
    with pytest.raises(SystemExit) as exc:  # argparse's --help: every flag of the quick run is known
        mod.main([*bench.argv(quick=True), "--help"])
    assert exc.value.code == 0
    usage = capsys.readouterr().out
    for flag in bench.quick:
        assert flag in usage, f"{bench.name}: {flag} not among its options"
    assert "--quick" in bench.quick


def test_list_is_explicit_and_named_once() -> None:
    names = [b.name for b in BENCHMARKS]
    assert len(names) == len(set(names))
    assert {"sim", "scale", "emulator", "executor", "pipelining", "fidelity", "llm_peer"} <= set(names)
    assert [b.name for b in by_name(["scale", "bench_sim"])] == ["sim", "scale"]  # the list's order
    assert by_name([]) == list(BENCHMARKS)
    with pytest.raises(ValueError, match="unknown benchmark.*nope"):
        by_name(["nope"])


def test_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nope"])
    assert exc.value.code == 2
    assert "unknown benchmark(s) nope" in capsys.readouterr().err


def test_list_prints_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == [b.name for b in BENCHMARKS]


def test_a_failing_benchmark_fails_the_run_and_the_next_still_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[list[str]] = []

    def broken(argv: list[str]) -> int:
        raise RuntimeError("boom")

    def exits(argv: list[str]) -> int:
        ran.append(argv)
        raise SystemExit(3)

    def fine(argv: list[str]) -> None:
        ran.append(argv)

    for name, fn in (("broken", broken), ("exits", exits), ("fine", fine)):
        monkeypatch.setitem(sys.modules, f"benchmarks.bench_{name}", types.SimpleNamespace(main=fn))
    monkeypatch.setattr("benchmarks.__main__.BENCHMARKS", (
        Benchmark("broken", "raises"), Benchmark("exits", "exit 3", full=("--x",)), Benchmark("fine", "runs")))
    assert main([]) == 1
    assert ran == [["--x"], []]  # full mode: each entry's own arguments
    out = capsys.readouterr().out
    assert re.search(r"^broken .* FAILED: RuntimeError: boom$", out, re.M)
    assert re.search(r"^exits .* FAILED: exit status 3$", out, re.M)
    assert re.search(r"^fine .* ok$", out, re.M)
    assert main(["--quick", "fine"]) == 0
    assert ran[-1] == ["--quick"]


def _numbers(pattern: str, text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(pattern, text, re.M)]


def test_quick_run_of_the_simulator_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "sim", "scale"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^sim +[\d.]+ +ok$", out, re.M) and re.search(r"^scale +[\d.]+ +ok$", out, re.M)
    # sim: seven event-path cases, each a positive rate; the four fast-path ratios; 100 swept points
    rates = _numbers(r"actions +[\d.]+ ms +([\d,]+) actions/s$", out)
    assert len(rates) == 7 and min(rates) > 0
    assert len(_numbers(r"ratio +([\d.]+)x +\(formula", out)) == 4
    assert "sweep of 100 configurations, fast path" in out
    # scale: 1F1B with S = 8, M = 64 at F = 5 ms, B = 10 ms cannot beat its fill and drain,
    # (M + S - 1)(F + B) = 1,065 ms, and its gradient all-reduce over 512 replicas is exposed
    row = re.search(r"^1f1b +\d+ +[\d.]+ .* ([\d.]+) +([\d.]+)$", out, re.M)
    assert row is not None
    assert float(row.group(1)) >= (64 + 8 - 1) * (5 + 10)
    assert float(row.group(2)) > 0
    pd = re.search(r"^pipedream +1000 .* ([\d.]+) +([\d.]+)$", out, re.M)
    assert pd is not None and float(pd.group(1)) >= 5 + 10 + 2  # one batch's F + B + U per stage
