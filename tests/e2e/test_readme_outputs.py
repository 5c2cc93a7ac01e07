"""The README's example commands, and those of the pages its commands moved to (docs/commands.md,
docs/install.md), write only into git-ignored places (runs/) or absolute paths: a newcomer who
follows them must not end with untracked, not-ignored files in the checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/commands.md", "docs/install.md")
OUTPUT_FLAGS = r"(?:-o|--output|--out|--csv|--plot|--trace|--to-torch-csv)"


def _outputs(text: str) -> list[str]:
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S)
    return [m for b in blocks for m in re.findall(rf"(?:^|\s){OUTPUT_FLAGS}[ =](\S+)", b, flags=re.M)]


def test_readme_outputs_are_ignored_or_absolute():
    outs = [o for page in PAGES for o in _outputs((ROOT / page).read_text())]
    assert {"runs/order.csv", "runs/prof.json", "runs/study", "runs/plan"} <= set(outs)  # the parser sees them
    # `make figures` / `stalesim figures --out figures` rewrites the committed figures on purpose
    bad = [o for o in outs if not (o.startswith("/") or o == "figures"
                                   or _ignored(o))]
    assert bad == [], f"README examples write into the checkout, untracked and not ignored: {bad}"


def _ignored(path: str) -> bool:
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    return r.returncode == 0
