"""A user's factory that calls ``sys.exit()`` (at import, in the factory, or while its model
trains) is the user's error in one line, status 2: never the command's status 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from stalesim.errors import StalesimError
from stalesim.plugins import DEBUG_ENV, call_factory, resolve, user_exit

ROOT = Path(__file__).resolve().parents[2]

USER_CODE = """
import sys


def exits():
    sys.exit(0)


def quits():
    exit("bye")


def helper():
    sys.exit(5)
"""


@pytest.fixture
def mod(tmp_path, monkeypatch):
    name = f"usermod_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_CODE))
    (tmp_path / f"{name}_atimport.py").write_text("import sys\nsys.exit(0)\ndef f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_factory_that_exits_is_one_line_naming_it(mod):
    with pytest.raises(StalesimError) as exc:
        call_factory(f"{mod}:exits", "--model")
    assert str(exc.value) == f"--model: {mod}:exits() called sys.exit(0); a factory must return its object"
    with pytest.raises(StalesimError, match=r"quits\(\) called sys.exit\('bye'\)"):
        call_factory(f"{mod}:quits", "--dataset")


def test_a_module_that_exits_at_import_is_one_line(mod):
    with pytest.raises(StalesimError, match=rf"^--model: importing '{mod}_atimport' called sys.exit\(0\); "):
        resolve(f"{mod}_atimport:f", "--model")


def test_user_exit_tells_the_users_exits_from_the_tools(mod):
    helper = resolve(f"{mod}:helper", "--model")
    with pytest.raises(SystemExit) as got:
        helper()
    said = user_exit(got.value)
    assert said is not None and said.startswith("user code called sys.exit(5) at usermod_") and "(in helper)" in said
    # argparse's exit (standard library) called by the tool's own parser: the tool's status
    from stalesim.cli import build_parser

    with pytest.raises(SystemExit) as tool:
        build_parser().parse_args(["--nope"])
    assert tool.value.code == 2 and user_exit(tool.value) is None
    assert user_exit(SystemExit(0)) is None  # no traceback: nothing to blame


def test_the_debug_switch_prints_the_users_traceback(mod, monkeypatch, capsys):
    monkeypatch.setenv(DEBUG_ENV, "1")
    with pytest.raises(StalesimError):
        call_factory(f"{mod}:exits", "--model")
    err = capsys.readouterr().err
    assert "Traceback" in err and f"{mod}.py" in err and "sys.exit(0)" in err
    monkeypatch.setenv(DEBUG_ENV, "0")
    with pytest.raises(StalesimError):
        call_factory(f"{mod}:exits", "--model")
    assert capsys.readouterr().err == ""


def test_a_model_that_exits_while_training_fails_the_command(tmp_path):
    """The real command: emulate trains a model whose forward calls sys.exit(0)."""
    (tmp_path / "quitting.py").write_text(textwrap.dedent("""
        import sys
        from torch import nn


        class Quits(nn.Module):
            def forward(self, x):
                sys.exit(0)


        def model():
            seq = nn.Sequential(nn.Flatten(), nn.Linear(4, 10), Quits())
            seq.input_shape = (4,)
            return seq
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(DEBUG_ENV, None)
    got = subprocess.run([sys.executable, "-m", "stalesim", "emulate", "--model", "quitting:model", "--iterations",
                          "2", "--batch-size", "8"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 2, got.stderr
    assert got.stderr == ("stalesim: error: user code called sys.exit(0) at quitting.py:8 (in forward); "
                          "the command did not finish\n")
