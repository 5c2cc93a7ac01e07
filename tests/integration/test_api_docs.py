"""The API reference (``make docs``): it builds with warnings as errors and covers the public names.

The reference is generated from the docstrings (``docs/api/``, Sphinx autodoc), so a docstring
that does not parse as reST fails the build here as it fails CI. Each page lists its names by
hand, grouped for a reader; the coverage test below makes a name newly exported from a public
package (``__all__``) fail until its page lists it, so the reference cannot fall behind the code.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("sphinxarg")  # the command-line page (docs/api/cli.rst) needs sphinx-argparse

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "docs" / "api"
ANCHOR = re.compile(r'\bid="(stalesim\.[\w.]+)"')

# public package -> the page that documents its ``__all__``
PAGES = {"stalesim": "stalesim", "stalesim.schedule": "schedule", "stalesim.sim": "sim",
         "stalesim.inject": "inject"}
# names a package re-exports from another public package; documented once, on that one's page
DOCUMENTED_ELSEWHERE = {("stalesim", "ScheduleConfig"): "stalesim.schedule.ScheduleConfig"}


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference built once, as ``make docs`` builds it (fresh, warnings as errors)."""
    out = tmp_path_factory.mktemp("api-html")
    cmd = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", str(SOURCE), str(out)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, f"sphinx-build failed (warnings are errors):\n{p.stderr[-4000:]}"
    return out


def _anchors(html: Path, page: str) -> set[str]:
    return set(ANCHOR.findall((html / f"{page}.html").read_text(encoding="utf-8")))


def test_build_is_clean_and_has_every_page(html: Path) -> None:
    pages = {p.stem for p in SOURCE.glob("*.rst")}
    assert {"index", "stalesim", "schedule", "sim", "cost", "plan", "inject", "workloads"} <= pages
    built = {p.stem for p in html.glob("*.html")}
    assert pages <= built, f"pages not built: {sorted(pages - built)}"
    index = (html / "index.html").read_text(encoding="utf-8")
    for page in pages - {"index"}:
        assert f'href="{page}.html"' in index, f"{page} is not in the index's table of contents"


def test_known_public_names_are_documented(html: Path) -> None:
    assert {"stalesim.profile", "stalesim.simulate", "stalesim.emulate", "stalesim.run",
            "stalesim.TrainConfig", "stalesim.StalesimError"} <= _anchors(html, "stalesim")
    assert {"stalesim.schedule.build_schedule", "stalesim.schedule.ScheduleConfig",
            "stalesim.schedule.Schedule"} <= _anchors(html, "schedule")
    assert "stalesim.inject.StalePipeline.attach" in _anchors(html, "inject")
    assert "stalesim.cost.apply.predict" in _anchors(html, "cost")
    assert "stalesim.cost.calibration.MachineCalibration" in _anchors(html, "cost")
    assert "stalesim.workloads.profile.Profile" in _anchors(html, "workloads")
    # the docstring's text is there, not only the name
    text = (html / "stalesim.html").read_text(encoding="utf-8")
    assert "checked by the IR" in text  # stalesim.load_schedule's docstring


@pytest.mark.parametrize("package", sorted(PAGES))
def test_every_exported_name_has_an_entry(html: Path, package: str) -> None:
    exported = [n for n in importlib.import_module(package).__all__ if not n.startswith("__")]
    assert exported, package
    documented = set().union(*(_anchors(html, p) for p in set(PAGES.values())))
    missing = [n for n in exported
               if DOCUMENTED_ELSEWHERE.get((package, n), f"{package}.{n}") not in documented]
    assert not missing, f"{package} exports {missing}, absent from docs/api/{PAGES[package]}.rst"

