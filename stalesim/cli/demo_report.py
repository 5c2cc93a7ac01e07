"""The demo's one report: ``report.md`` and ``report.html`` with every step's table.

Why both: the markdown pastes into a paper's notes or a pull request and links the
figures beside it; the HTML opens offline in any browser with the figures inside it
(base64 ``data:`` URIs, no network, no other file), so it can be mailed or archived alone.
Tables are the plain-text tables the demo prints (monospaced, kept as they are), each
under its step's heading. Both files are written atomically (:mod:`stalesim.atomic`).
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Section:
    """One step of the report: a heading, its table as printed, the figures it wrote."""

    title: str
    text: str
    figures: tuple[Path, ...] = field(default=())


def render_markdown(title: str, sections: Sequence[Section], base: Path) -> str:
    """Markdown; figures linked relative to ``base`` (the folder the report is written to)."""
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", "", "```text", s.text.rstrip("\n"), "```", ""]
        for fig in s.figures:
            rel = Path(os.path.relpath(fig, base)).as_posix()
            lines += [f"![{fig.stem}]({rel})", ""]
    return "\n".join(lines)


def _data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def render_html(title: str, sections: Sequence[Section]) -> str:
    """One self-contained HTML page: tables in ``<pre>``, figures embedded as data URIs."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        body += [f"<h2>{html.escape(s.title)}</h2>", f"<pre>{html.escape(s.text.rstrip())}</pre>"]
        for fig in s.figures:
            body.append(f'<figure><img alt="{html.escape(fig.stem)}" src="{_data_uri(fig)}">'
                        f"<figcaption>{html.escape(fig.name)}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;padding:0 1em}"
             "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:12px}"
             "img{max-width:100%}figcaption{font-size:11px;color:#555}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_report(out: Path, title: str, sections: Sequence[Section]) -> tuple[Path, Path]:
    """Write ``out/report.md`` and ``out/report.html``; a figure that is missing (a step
    that drew nothing) is left out of both rather than failing the demo at its end."""
    from stalesim.atomic import write_text_atomic

    kept = [Section(s.title, s.text, tuple(f for f in s.figures if f.is_file())) for s in sections]
    md = write_text_atomic(out / "report.md", render_markdown(title, kept, out))
    page = write_text_atomic(out / "report.html", render_html(title, kept))
    return md, page
