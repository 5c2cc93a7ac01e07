"""Where things go: ``benchmarks/`` holds benchmarks only, ``figures/`` generated outputs only.

A table builder in ``benchmarks/`` or an input under ``figures/`` is what this repository once
had: tests imported builders from a folder of timings, and ``make figures`` read files from its
own output folder. Builders belong in ``lab/reproduce/``, checks in ``lab/checks/``,
stored inputs in ``stalesim/data/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_benchmarks_holds_benchmarks_and_their_helpers_only() -> None:
    mods = sorted((ROOT / "benchmarks").glob("*.py"))
    benches = [p for p in mods if p.stem.startswith("bench_")]
    assert len(benches) >= 8
    used = set().union(*(_imported_modules(p) for p in benches))
    strays = [p.name for p in mods if p.stem not in ("__init__", "__main__") and not p.stem.startswith("bench_")
              and f"benchmarks.{p.stem}" not in used]
    assert not strays, f"not a benchmark nor a benchmark's helper (move it out of benchmarks/): {strays}"


def test_figures_holds_generated_outputs_only() -> None:
    entries = sorted((ROOT / "figures").iterdir())
    assert any(p.suffix == ".png" for p in entries)
    others = [p.name for p in entries if not (p.is_file() and (p.suffix in (".csv", ".png") or p.name == "README.md"))]
    assert not others, f"inputs or folders in figures/ (stored inputs go to stalesim/data/): {others}"


def test_shape_profiles_are_package_data() -> None:
    from stalesim.figures.common import SHAPE_PROFILES

    assert SHAPE_PROFILES == ROOT / "stalesim" / "data" / "shape_profiles"
    assert {p.name for p in SHAPE_PROFILES.glob("*.json")} >= {"resnet56_b8_shape.json", "lenet5_b8_shape.json"}
    assert "**/*.json" in (ROOT / "pyproject.toml").read_text()  # shipped with the installed package
