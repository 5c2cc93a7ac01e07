"""Every shell command in README.md's code blocks runs, in a short mode, and prints what the
README says it prints: the README and the code cannot drift apart.

Commands come from the ```bash blocks (a ``\\`` continuation joins lines, ``#`` starts a comment);
the ```text block right after a command block is what that command prints (shortened). Short mode
rewrites lengths, not the steps that run: ``--epochs`` becomes a few ``--iterations``, seeds and
repeats become one, and the commands with long defaults get their short flags (demo: ``--quick``
on LeNet-5; validate: few iterations, one repeat).
``make T`` runs the Makefile's recipe for T (not its ``install`` prerequisite) with this Python,
so the README's make targets are checked too. Outputs under ``runs/`` go to a temporary folder.

Not run, with the reason: ``make install`` (this test runs inside the installed environment; CI
runs ``make install`` first), ``make test`` (the suite this test is part of; CI runs it,
``.ci/run``), ``source`` (activation; the test calls the environment's Python directly).
``export`` lines set the variable for the later commands, except that a value already in the
environment wins (CI exports an absolute ``STALESIM_DATA``; the README's is relative to a clone
with ``../shared`` beside it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NOT_RUN = {
    ("make", "install"): "this test runs inside the installed environment (CI runs make install first)",
    ("make", "test"): "the suite this test is part of (CI runs it: .ci/run)",
}
# long flags -> their short-mode value (a callable gets the README's value)
SHORT_VALUE = {
    "--iterations": lambda v: "4",  # validate's steady-state window needs 4
    "--seeds": lambda v: v.split(",")[0],
    "--max-horizon": lambda v: "4",  # plan: one round of emulations
    "--repeats": lambda v: "1",
    "--jobs": lambda v: "1",
}
# commands whose defaults are long: short flags added when the README does not give them
SHORT_EXTRA = {
    # the demo's model is what it profiles (ResNet-20 at four batch sizes, alone and contended):
    # LeNet-5 runs the same steps in a fraction of the time
    "demo": ["--quick", "--model", "lenet5", "--iterations", "4", "--repeats", "1", "--study-iterations", "6"],
    "plan": ["--smooth", "2"],
    "validate": ["--iterations", "4", "--repeats", "1", "--emulate-iterations", "2", "--profile-repeats", "1"],
}
TIMEOUT_S = 840  # per command; on a loaded 2-core machine the slow ones took 150-300 s (quiet: far less)
# each takes 10-40 s even in short mode on 2 idle cores (profiling, calibration, CPU ranks, a pool of
# emulations): kept out of `make test-fast`, still run by `make test` and CI
SLOW = {"demo", "validate", "plan"}


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def commands_with_output(text: str) -> list[tuple[list[str], str | None]]:
    """Each command (as argv) of the ```bash blocks, with the ```text block that follows its block
    (for the block's last command)."""
    out: list[tuple[list[str], str | None]] = []
    blocks = readme_blocks(text)
    for i, (lang, body) in enumerate(blocks):
        if lang not in ("bash", "sh"):
            continue
        argvs = [shlex.split(line, comments=True) for line in body.replace("\\\n", " ").splitlines()]
        argvs = [a for a in argvs if a]
        printed = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None
        out += [(a, printed if k == len(argvs) - 1 else None) for k, a in enumerate(argvs)]
    return out


def make_recipe(target: str) -> list[list[str]]:
    """The Makefile recipe of ``target`` as argv lists, with this Python for $(PY)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}\s*:", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        cmd = line.strip().lstrip("@").replace("$(PY)", sys.executable)
        recipe.append(shlex.split(cmd))
    assert recipe and all("$(" not in " ".join(a) for a in recipe), f"make {target}: {recipe}"
    return recipe


def shorten(argv: list[str], tmp: Path) -> list[str]:
    """The short-mode argv: lengths cut, outputs under runs/ moved to ``tmp``."""
    out: list[str] = []
    args = iter(argv)
    for a in args:
        if a == "--epochs":  # a few iterations instead of whole epochs
            next(args)
            out += ["--iterations", "4"]
        elif a in SHORT_VALUE:
            out += [a, SHORT_VALUE[a](next(args))]
        elif a.startswith("runs/"):
            out.append(str(tmp / a))
        else:
            out.append(a)
    sub = out[out.index("stalesim") + 1] if "stalesim" in out else None
    for flag, *value in _pairs(SHORT_EXTRA.get(sub, [])):
        if flag not in out:
            out += [flag, *value]
    if sub == "demo" and "--out" not in out:
        out += ["--out", str(tmp / "runs" / "demo")]  # its default, moved like the others
    return out


def _pairs(flags: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for f in flags:
        if f.startswith("--"):
            groups.append([f])
        else:
            groups[-1].append(f)
    return groups


def runnable(argv: list[str]) -> list[list[str]]:
    """The argv lists that run one README command (``stalesim`` through this Python)."""
    if argv[0] == "make":
        return [a for t in argv[1:] for a in make_recipe(t)]
    if argv[0] == "stalesim":
        return [[sys.executable, "-m", "stalesim", *argv[1:]]]
    return [argv]


def printed_labels(printed: str) -> list[str]:
    """What must appear in a command's output: each line of the README's text block up to its
    first digit (the labels, headers and row names, never the measured numbers), spaces
    collapsed; lines that start with a number or are shorter than 4 characters say nothing."""
    labels = []
    for line in printed.splitlines():
        label = " ".join(re.split(r"\d", line, maxsplit=1)[0].split())
        if len(label) >= 4:
            labels.append(label)
    return labels


README_TEXT = README.read_text()
COMMANDS = commands_with_output(README_TEXT)


def test_readme_has_one_command_per_job():
    firsts = [" ".join(a[:2]) for a, _ in COMMANDS]
    for job in ("make demo", "stalesim simulate", "stalesim study", "stalesim validate", "stalesim plan",
                "make test"):
        assert job in firsts, f"README: no `{job}` command"
    assert "[docs/api.md](docs/api.md)" in README_TEXT  # your own model
    head = [line for line in README_TEXT.split("```")[0].splitlines() if line.strip()]
    assert len(head) == 4 and head[0] == "# stalesim", "README: a title and three lines on what a user gets"


def test_ci_runs_the_readme_test_command():
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines() if line.strip()]
    readme_test = [a for a, _ in COMMANDS if a[0] == "make" and "test" in a]
    assert readme_test == [["make", "test"]] and ci[-1] == "make test", "CI ends with the README's test command"
    assert re.search(r"^test: install$", (ROOT / "Makefile").read_text(), flags=re.M), "make test installs first"


def test_short_mode_rewrites(tmp_path):
    argv = shlex.split("stalesim study --epochs 2 --seeds 0,1,2 --jobs 2 --out runs/study")
    assert shorten(argv, tmp_path) == ["stalesim", "study", "--iterations", "4", "--seeds", "0",
                                       "--jobs", "1", "--out", str(tmp_path / "runs/study")]
    demo = shorten(["stalesim", "demo", "--repeats", "5"], tmp_path)
    assert demo[:4] == ["stalesim", "demo", "--repeats", "1"] and "--quick" in demo
    assert demo[-2:] == ["--out", str(tmp_path / "runs" / "demo")]
    assert printed_labels("iteration time   1.422 ms\n  1 pipedream S=2\n| stale | (2) |") == [
        "iteration time", "| stale | ("]


def _param(argv: list[str], printed: str | None):
    sub = argv[argv.index("stalesim") + 1] if "stalesim" in argv else argv[1] if argv[0] == "make" else ""
    return pytest.param(argv, printed, id=" ".join(argv[:2]), marks=[pytest.mark.slow] if sub in SLOW else [])


@pytest.mark.parametrize("argv,printed", [_param(a, p) for a, p in COMMANDS])
def test_readme_command_runs(argv, printed, tmp_path):
    if tuple(argv[:2]) in NOT_RUN:
        pytest.skip(NOT_RUN[tuple(argv[:2])])
    if argv[0] in ("source", "export"):
        pytest.skip("sets the environment: applied to every command here")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    for name, value in _exports():
        env.setdefault(name, str((ROOT / value).resolve()) if not value.startswith("/") else value)
    if "mnist" in argv and not Path(env.get("STALESIM_DATA", "")).is_dir():
        msg = f"real datasets not found (STALESIM_DATA={env.get('STALESIM_DATA')!r})"
        if os.environ.get("STALESIM_REQUIRE_DATA", "") not in ("", "0"):
            pytest.fail(msg + " but STALESIM_REQUIRE_DATA=1")
        pytest.skip(msg)
    stdout = ""
    for cmd in runnable(argv):
        cmd = shorten(cmd, tmp_path)
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert r.returncode == 0, f"{shlex.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        stdout += r.stdout
    if printed:
        seen = " ".join(stdout.replace(f"{tmp_path}/", "").split())  # paths as the README writes them
        missing = [label for label in printed_labels(printed) if label not in seen]
        assert not missing, f"README shows output the command no longer prints: {missing}\n{stdout[-3000:]}"


def _exports() -> list[tuple[str, str]]:
    return [tuple(a[1].split("=", 1)) for a, _ in COMMANDS if a[0] == "export" and "=" in a[1]]
