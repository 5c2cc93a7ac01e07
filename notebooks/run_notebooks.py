"""Build the reproduction notebooks from build_notebooks.py and execute them in place.

    make notebooks                     # all five, short mode (what is committed)
    make notebooks NB=02 NB_FULL=1     # one notebook, full mode

The notebooks are committed executed so that a reader sees every table and figure on the
repository page without installing anything. Executing needs only the test extras of
`make install` (nbclient comes with nbmake, plus ipykernel); jupyter and nbconvert are not
dependencies. `tests/e2e/test_notebooks.py` checks that the committed outputs belong to the current
cell sources and runs each notebook again in short mode (in memory) with the same `execute`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build_notebooks import books  # noqa: E402

from stalesim.atomic import write_text_atomic  # noqa: E402

# the whole notebook, per mode; 03 and 04 start CPU ranks
TIMEOUT_S = {"short": 420, "full": 3 * 3600}


def kernel_env(full: bool) -> dict[str, str]:
    """The environment a notebook kernel gets: the mode, a fixed hash seed, no display, and an
    absolute $STALESIM_DATA (the kernel starts in notebooks/, so the README's relative
    ../shared/data is taken from the directory this command started in)."""
    from stalesim.runtime.datapaths import DATA_ENV, absolute

    env = {"PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "STALESIM_NB_FULL": "1" if full else ""}
    if os.environ.get(DATA_ENV):
        env[DATA_ENV] = str(absolute(os.environ[DATA_ENV]))
    return env


def execute(book: nbformat.NotebookNode, *, full: bool = False) -> nbformat.NotebookNode:
    """Run ``book`` top to bottom in a fresh kernel started in notebooks/ (outputs filled in)."""
    import nbclient

    saved = dict(os.environ)
    os.environ.update(kernel_env(full))
    if not os.environ["STALESIM_NB_FULL"]:
        del os.environ["STALESIM_NB_FULL"]
    try:
        client = nbclient.NotebookClient(book, timeout=TIMEOUT_S["full" if full else "short"],
                                         kernel_name="python3", record_timing=False,
                                         resources={"metadata": {"path": str(HERE)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return book


def errors(book: nbformat.NotebookNode) -> list[str]:
    """The error outputs of an executed notebook, as 'ename: evalue'."""
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in book.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def _commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("only", nargs="*", help="notebook number prefixes (01 .. 05); default all")
    ap.add_argument("--full", action="store_true", help="full mode (STALESIM_NB_FULL=1)")
    args = ap.parse_args(argv)
    for name, book in books().items():
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        print(f"executing {name} ({'full' if args.full else 'short'} mode) ...", flush=True)
        execute(book, full=args.full)
        if errors(book):
            print(f"{name}: {errors(book)}", file=sys.stderr)
            return 1
        # where the committed outputs come from (the sources are checked against build_notebooks)
        book.metadata["stalesim"] = {"mode": "full" if args.full else "short", "commit": _commit(),
                                     "executed": datetime.date.today().isoformat(),
                                     "real_data": bool(os.environ.get("STALESIM_DATA"))}
        # atomic: an interrupted run keeps the previous notebook
        write_text_atomic(HERE / name, nbformat.writes(book) + "\n")
        print("wrote", HERE / name, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
