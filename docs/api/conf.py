"""Sphinx configuration of the API reference (``make docs``).

The pages are generated from the package's docstrings by autodoc; they are written in
reST with Sphinx's cross-reference roles (``:func:``, ``:class:``), so no docstring
extension (napoleon) is needed. The build runs with warnings as errors, so a docstring
that does not parse fails CI.
"""

from __future__ import annotations

import os
import re
import sys

from sphinx.application import Sphinx

# the package from this checkout, whether or not it is installed
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import stalesim  # noqa: E402 (after the path above)

project = "stalesim"
author = "the stalesim authors"
copyright = "the stalesim authors"
release = version = stalesim.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]

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


def setup(app: Sphinx) -> None:
    app.connect("autodoc-process-signature", _opaque_defaults)
    app.connect("autodoc-skip-member", _namedtuple_aliases)
