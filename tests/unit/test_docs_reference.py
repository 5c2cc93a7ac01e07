"""The docs are a reference a reader navigates, and the lab log is apart from it.

A reference page says what a command does, its options and outputs, how it works and its known
gaps; a measurement campaign is a dated report under ``docs/lab-log/``, listed in that folder's
index. Pages that grew by appending campaigns became unreadable (one reached 173 KB), so the size
of a page is checked, as are the things a reader outside this project cannot follow: a path on
one machine, a link to a file the repository does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LAB_LOG = DOCS / "lab-log"

# A reference page above this is a page that accretes: the issue's ~20 KB (20 KiB). A page that
# grows past it moves measurement campaigns to docs/lab-log/ or facts to the page that owns them.
MAX_PAGE_BYTES = 20_480
# Pages whose bulk is generated and checked by ``make tables`` (tests/unit/test_results_tables.py);
# their prose still counts against the limit, their generated tables do not.
GENERATED_TABLE_PAGES = {"RESULTS.md"}

MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|Users|root|tmp/[A-Za-z_]+)/[\w.-]+")
REPORT_NAME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})-([a-z0-9]+(?:-[a-z0-9]+)*)\.md$")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _generated_bytes(text: str) -> int:
    """Bytes inside markdown tables and fenced blocks: what ``make tables`` writes."""
    n, fenced = 0, False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or line.lstrip().startswith("|"):
            n += len(line.encode())
    return n


def test_every_reference_page_is_short() -> None:
    big = {}
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        size = len(text.encode())
        if page.name in GENERATED_TABLE_PAGES:
            size -= _generated_bytes(text)
        if size > MAX_PAGE_BYTES:
            big[page.name] = size
    assert not big, f"reference pages over {MAX_PAGE_BYTES} bytes (move campaigns to docs/lab-log/): {big}"


def test_no_dated_sections_on_reference_pages() -> None:
    dated = re.compile(r"^#{1,6} .*\b20\d\d-\d\d-\d\d\b", re.MULTILINE)
    hits = {p.name: dated.findall(p.read_text(encoding="utf-8"))[:2] for p in _pages()}
    hits = {k: v for k, v in hits.items() if v}
    assert not hits, f"dated headings belong in a lab-log report: {hits}"


def test_no_machine_paths_in_docs() -> None:
    hits = {}
    # stored result folders are records of the runs, commands as typed; they are not pages
    for page in [*_pages(), *sorted(LAB_LOG.glob("*.md"))]:
        found = MACHINE_PATH.findall(page.read_text(encoding="utf-8"))
        if found:
            hits[str(page.relative_to(DOCS))] = sorted(set(found))[:3]
    assert not hits, f"paths of one machine in docs: {hits}"


def test_lab_log_reports_are_named_and_indexed() -> None:
    reports = sorted(p for p in LAB_LOG.glob("*.md") if p.name != "README.md")
    assert len(reports) >= 10
    bad = [p.name for p in reports if not REPORT_NAME.match(p.name)]
    assert not bad, f"lab-log reports are named YYYY-MM-DD-<hardware>-<topic>.md: {bad}"
    index = (LAB_LOG / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in reports if f"]({p.name})" not in index]
    assert not missing, f"reports missing from docs/lab-log/README.md: {missing}"


def test_every_relative_link_in_docs_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if "results" in page.relative_to(ROOT).parts:
            continue  # stored result folders carry their own READMEs, checked with the results
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, f"links to files this repository does not have: {broken[:10]}"
