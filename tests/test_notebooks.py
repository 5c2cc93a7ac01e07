"""Execute every reproduction notebook top to bottom in short mode (what CI runs).

Short mode is the default (``STALESIM_NB_FULL`` unset): tiny iteration counts,
synthetic data unless ``STALESIM_DATA`` is set (a relative path is taken from the
directory pytest started in). The five together are meant to take a few minutes on
2 idle cores; each has its own timeout.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stalesim.runtime.datapaths import DATA_ENV, absolute

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("[0-9][0-9]_*.ipynb"))
TIMEOUT_S = {"03_validate.ipynb": 420, "04_pipe_sgd.ipynb": 420}


def test_notebooks_present():
    assert NOTEBOOKS == ["01_predict_speedup.ipynb", "02_stale_weights.ipynb", "03_validate.ipynb",
                         "04_pipe_sgd.ipynb", "05_local_updates.ipynb", "06_own_model.ipynb"]


def test_notebooks_committed_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    for name in NOTEBOOKS:
        book = nbformat.read(NB_DIR / name, as_version=4)
        for cell in book.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{name}: clear outputs"
        assert "STALESIM_NB_FULL" in book.cells[1].source, f"{name}: parameters cell must come second"


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_short(name, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.delenv("STALESIM_NB_FULL", raising=False)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel starts in notebooks/: a relative $STALESIM_DATA (the README's
    # ../shared/data) is made absolute here, against the directory pytest started in
    if os.environ.get(DATA_ENV):
        monkeypatch.setenv(DATA_ENV, str(absolute(os.environ[DATA_ENV])))
    book = nbformat.read(NB_DIR / name, as_version=4)
    client = nbclient.NotebookClient(book, timeout=TIMEOUT_S.get(name, 300), kernel_name="python3",
                                     resources={"metadata": {"path": str(NB_DIR)}})
    client.execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
