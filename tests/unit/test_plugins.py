"""``pkg.module:factory``: the resolver every command, the emulator and the ranks go through."""

from __future__ import annotations

import sys
import textwrap
import uuid

import pytest

from stalesim.errors import StalesimError
from stalesim.plugins import add_import_roots, call_factory, import_roots, is_plugin, resolve, split_spec


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A package ``<name>.sub`` in tmp_path, importable (tmp_path on sys.path)."""
    name = f"userpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / name / "sub").mkdir(parents=True)
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "sub" / "__init__.py").write_text("")
    (tmp_path / name / "sub" / "models.py").write_text(textwrap.dedent("""
        VALUE = 3

        def build():
            return "built"

        def broken():
            raise RuntimeError("no weights here\\nsecond line")

        class Zoo:
            @staticmethod
            def tiny():
                return "tiny"
    """))
    (tmp_path / name / "bad.py").write_text("import not_a_module_anywhere_xyz\n")
    (tmp_path / name / "raises.py").write_text("raise ValueError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[mod]


@pytest.mark.parametrize("text, ok", [
    ("pkg.module:factory", True), ("m:f", True), ("a.b:Cls.method", True), (" m:f ", True),
    ("lenet5", False), ("gpt-char:n_layer=2", False), ("resnet20", False), ("m:", False), (":f", False),
    ("m:f:g", False), ("./file.py:f", False), (None, False), (3, False),
])
def test_is_plugin(text, ok):
    assert is_plugin(text) is ok


def test_split_spec_names_the_flag():
    assert split_spec("a.b:c", "--model") == ("a.b", "c")
    with pytest.raises(StalesimError, match=r"^--dataset: expected pkg.module:factory"):
        split_spec("nope", "--dataset")


def test_resolve_function_and_dotted_attribute(pkg):
    assert resolve(f"{pkg}.sub.models:build", "--model")() == "built"
    assert call_factory(f"{pkg}.sub.models:Zoo.tiny", "--model") == "tiny"


@pytest.mark.parametrize("attr, needle", [
    ("missing", "has no attribute 'missing'"),
    ("VALUE", "is a int, not a callable"),
])
def test_resolve_bad_attribute(pkg, attr, needle):
    with pytest.raises(StalesimError, match=r"^--model: ") as exc:
        resolve(f"{pkg}.sub.models:{attr}", "--model")
    assert needle in str(exc.value)


def test_resolve_missing_module_is_one_line(pkg):
    with pytest.raises(StalesimError) as exc:
        resolve(f"{pkg}.nothere:build", "--model")
    assert str(exc.value).startswith(f"--model: cannot import module '{pkg}.nothere'")
    # a module that itself fails to import names what it could not import
    with pytest.raises(StalesimError, match=r"importing .*bad' failed: ModuleNotFoundError"):
        resolve(f"{pkg}.bad:x", "--dataset")
    with pytest.raises(StalesimError, match=r"importing .*raises' failed: ValueError: broken at import"):
        resolve(f"{pkg}.raises:x", "--model")


def test_factory_raising_is_one_line(pkg):
    with pytest.raises(StalesimError) as exc:
        call_factory(f"{pkg}.sub.models:broken", "--model")
    assert str(exc.value) == f"--model: {pkg}.sub.models:broken() raised RuntimeError: no weights here"


def test_start_folder_is_searched(tmp_path, monkeypatch):
    """The folder the command started in is searched, as with python -m (a console script
    would not put it on sys.path)."""
    name = f"startdir_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def f():\n    return 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert call_factory(f"{name}:f", "--model") == 7
    finally:
        sys.modules.pop(name, None)


def test_import_roots_of_a_package_module(pkg, tmp_path):
    resolve(f"{pkg}.sub.models:build", "--model")
    assert import_roots([f"{pkg}.sub.models:build", "lenet5", None, "synthetic"]) == [str(tmp_path)]
    import importlib

    importlib.import_module(f"{pkg}.sub")
    assert import_roots([f"{pkg}.sub:x"]) == [str(tmp_path)]  # a package's __init__.py


def test_main_module_is_refused_for_other_processes():
    with pytest.raises(StalesimError, match="defined in __main__"):
        import_roots(["__main__:make_net"])


def test_add_import_roots_puts_them_first(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", ["/x"])
    add_import_roots([str(tmp_path), "/y"])
    assert sys.path[:2] == [str(tmp_path), "/y"]
    add_import_roots([str(tmp_path)])
    assert sys.path.count(str(tmp_path)) == 1
