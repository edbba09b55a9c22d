"""The fused wrappers import fla's and mamba_ssm's kernel submodules without those packages' heavy __init__
(model/ops/_backend.py: packages_without_init). A package of our own making stands in for them here."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from model.ops._backend import packages_without_init


@pytest.fixture
def heavy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`heavy`: its __init__ and heavy.ops's record that they ran; heavy.ops.kernel reads the package's
    __version__ as fla.utils does; kernel() is what a wrapper would call."""
    root = tmp_path / "heavy"
    (root / "ops").mkdir(parents=True)
    (root / "__init__.py").write_text(
        "import builtins\nbuiltins.heavy_inits.append('heavy')\n__version__ = '9'\n"
    )
    (root / "ops" / "__init__.py").write_text("import builtins\nbuiltins.heavy_inits.append('heavy.ops')\n")
    (root / "ops" / "kernel.py").write_text(
        textwrap.dedent("""\
            from heavy import __version__
            def kernel():
                return 'kernel ' + __version__
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.heavy_inits", [], raising=False)
    yield
    for name in [m for m in sys.modules if m == "heavy" or m.startswith("heavy.")]:
        del sys.modules[name]


def test_a_submodule_imports_without_its_packages_inits(heavy_package, monkeypatch):
    import builtins

    monkeypatch.setattr("model.ops._backend._version_of", lambda package: "1.2")
    with packages_without_init(("heavy", "heavy.ops")):
        kernel = importlib.import_module("heavy.ops.kernel").kernel
    assert builtins.heavy_inits == []  # neither __init__ ran
    assert kernel() == "kernel 1.2"  # the bare package carried the version its submodule reads
    assert "heavy" not in sys.modules and "heavy.ops" not in sys.modules  # the bare packages are gone


def test_a_later_plain_import_gets_the_whole_real_package(heavy_package):
    import builtins

    with packages_without_init(("heavy", "heavy.ops")):
        kernel = importlib.import_module("heavy.ops.kernel").kernel
    assert not [m for m in sys.modules if m.startswith("heavy")]  # nothing of it is left to half-import
    import heavy.ops.kernel  # what a user's workload would write

    assert builtins.heavy_inits == ["heavy", "heavy.ops"]  # both real __init__s ran
    assert heavy.__version__ == "9" and heavy.ops.kernel.kernel() == "kernel 9"
    assert kernel() == "kernel " + kernel.__globals__["__version__"]  # what we took keeps working


def test_a_package_already_imported_is_left_as_it_is(heavy_package):
    import builtins

    import heavy

    with packages_without_init(("heavy", "heavy.ops")):
        importlib.import_module("heavy.ops.kernel")
    assert sys.modules["heavy"] is heavy
    assert builtins.heavy_inits == ["heavy"]  # heavy.ops was still made bare


def test_a_package_not_installed_is_reported_by_the_import_itself():
    with pytest.raises(ModuleNotFoundError), packages_without_init(("no_such_pkg_xyz",)):
        importlib.import_module("no_such_pkg_xyz.ops")
