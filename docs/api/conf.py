"""Sphinx configuration of the API reference (``make docs``).

The pages are generated from the package's docstrings by autodoc; they are written in
reST with Sphinx's cross-reference roles (``:func:``, ``:class:``), so no docstring
extension (napoleon) is needed. The command-line reference (``cli.rst``) is generated from
``stalesim.cli.build_parser()`` by sphinx-argparse, so an option's entry is its ``--help``
text and cannot drift from the parser. The build runs with warnings as errors, so a
docstring or a help text that does not parse fails CI.
"""

from __future__ import annotations

import os
import re
import sys

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform

# the package from this checkout, whether or not it is installed
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import stalesim  # noqa: E402 (after the path above)

project = "stalesim"
author = "the stalesim authors"
copyright = "the stalesim authors"
release = version = stalesim.__version__

# sphinxarg.ext: the ``argparse`` directive of the command-line reference (cli.rst)
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode", "sphinxarg.ext"]

# Types in the signatures, shortened to their names; the package uses
# ``from __future__ import annotations``, so a type imported only for type checking stays
# the text the source wrote. Defaults as written (``DEFAULT_THREADS``, not its value).
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
python_use_unqualified_type_names = True
add_module_names = False
toc_object_entries = False

html_theme = "alabaster"
html_title = "stalesim API reference"
html_show_sourcelink = False
html_copy_source = False
templates_path: list[str] = []
exclude_patterns = ["_build"]


_OPAQUE_DEFAULT = re.compile(r"= <(?:[^<>]|<[^<>]*>)*>")


def _opaque_defaults(app: Sphinx, what: str, name: str, obj: object, options: object,
                      signature: str | None, return_annotation: str | None) -> tuple[str | None, str | None]:
    """A default whose repr is not Python (a dataclass's ``<factory>``, a ``<function ...
    <lambda>>``) makes Sphinx print the whole signature raw, every type in full; ``...``
    parses, and says as much (a default the class builds)."""
    if signature is not None:
        signature = _OPAQUE_DEFAULT.sub("= ...", signature)
    return signature, return_annotation


def _namedtuple_aliases(app: Sphinx, what: str, name: str, obj: object, skip: bool,
                        options: object) -> bool | None:
    """A NamedTuple's fields carry the docstring Python writes (``Alias for field number 0``);
    the class signature already lists them, so the entries only repeat it."""
    doc = getattr(obj, "__doc__", None) or ""
    return True if doc.startswith("Alias for field number") else None


# the page rendered from the argparse parsers (cli.rst)
CLI_PAGE = "cli"


class _CliPageAsTerminal(SphinxTransform):
    """The command-line page shows each help text as ``--help`` prints it, so a reader can
    copy an option or a command from it.

    Smart quotes would print ``--schedule`` as an en dash and ``schedule`` (and curl the
    quotes); the page is marked ``support_smartquotes=False`` before that transform (750)
    runs. A help text writes a command in single backticks, which reST reads with the
    default role, a citation in italics; they become literals. A ``default-role`` directive
    on the page cannot do it: sphinx-argparse parses each help text as a document of its
    own, and docutils forgets the default role at the end of every such parse."""

    default_priority = 740

    def apply(self, **kwargs: object) -> None:
        if self.env.docname != CLI_PAGE:
            return
        self.document["support_smartquotes"] = False
        for cited in list(self.document.findall(nodes.title_reference)):
            cited.replace_self(nodes.literal(cited.rawsource, cited.astext()))


def setup(app: Sphinx) -> None:
    app.add_transform(_CliPageAsTerminal)
    app.connect("autodoc-process-signature", _opaque_defaults)
    app.connect("autodoc-skip-member", _namedtuple_aliases)
