"""The reproduction notebooks: committed executed, with the outputs of their current sources, and
each runs top to bottom in short mode (what CI runs).

Short mode is the default (``STALESIM_NB_FULL`` unset): tiny iteration counts, synthetic data
unless ``STALESIM_DATA`` is set (a relative path is taken from the directory pytest started in).
Building and executing is ``notebooks/run_notebooks.py`` (``make notebooks``); these tests use its
``execute`` so that what CI runs is what is committed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("[0-9][0-9]_*.ipynb"))


def _runner():
    pytest.importorskip("nbformat")
    spec = importlib.util.spec_from_file_location("run_notebooks", NB_DIR / "run_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_notebooks_present():
    assert NOTEBOOKS == ["01_predict_speedup.ipynb", "02_stale_weights.ipynb", "03_validate.ipynb",
                         "04_pipe_sgd.ipynb", "05_local_updates.ipynb", "06_own_model.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_committed_with_current_outputs(name):
    """The committed outputs come from the current cell sources (`make notebooks` after any edit of
    build_notebooks.py), every code cell ran in order without an error, and a figure is shown."""
    nbformat = pytest.importorskip("nbformat")
    run = _runner()
    built = run.books()[name]
    book = nbformat.read(NB_DIR / name, as_version=4)
    assert [(c.cell_type, c.source) for c in book.cells] == [(c.cell_type, c.source) for c in built.cells], \
        f"{name}: sources differ from notebooks/build_notebooks.py: run `make notebooks`"
    code = [c for c in book.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{name}: not executed in order"
    assert not run.errors(book), f"{name}: {run.errors(book)}"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), f"{name}: no figure"
    meta = book.metadata["stalesim"]
    assert meta["mode"] in ("short", "full") and meta["commit"] and meta["executed"]
    assert "STALESIM_NB_FULL" in book.cells[1].source, f"{name}: parameters cell must come second"


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_short(name):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    run = _runner()
    book = run.execute(run.books()[name], full=False)
    assert not run.errors(book)
