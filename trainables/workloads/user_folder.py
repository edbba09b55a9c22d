"""A user's workload folder imported under a private package name, so that its files never meet this project's.

The project installs `model`, `trainables` and `tuner` as top-level packages. A user's folder may hold files
of the same names (nanoGPT's `model.py`). Its files are therefore imported as modules of a package of their
own, `_workload_<folder>` (the folder's path, base32-encoded: any process that imported `trainables` finds
the folder from the name, so their classes unpickle there), whose `__path__` is the folder.
Their absolute imports of a name the folder holds (`from model import GPT`) resolve inside that package:
the import statement in their code calls an `__import__` of the folder's own (a module's `__builtins__`),
as if the folder were first on `sys.path`. Nothing here changes `sys.path` or `sys.modules` (a finder on
`sys.meta_path` serves the private names; the import system records the modules as it records any other).
"""

from __future__ import annotations

import base64
import builtins
import importlib
import importlib.abc
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

PREFIX = "_workload_"


def package_name(folder: Path) -> str:
    """The private package name of `folder` (absolute)."""
    return PREFIX + base64.b32encode(str(folder.resolve()).encode()).decode().rstrip("=").lower()


def folder_of(package: str) -> Path | None:
    """The folder a private package name stands for (None: not such a name)."""
    if not package.startswith(PREFIX):
        return None
    code = package[len(PREFIX) :].upper()
    try:
        return Path(base64.b32decode(code + "=" * (-len(code) % 8)).decode())
    except ValueError:
        return None


def own_names(folder: Path) -> frozenset[str]:
    """The top-level module names the folder holds: `name.py` files and packages (`name/__init__.py`)."""
    files = {p.stem for p in folder.glob("*.py") if p.stem.isidentifier()}
    packages = {p.parent.name for p in folder.glob("*/__init__.py") if p.parent.name.isidentifier()}
    return frozenset(files | packages)


def import_in(folder: Path, module: str) -> ModuleType:
    """`module` (dotted, as the folder would give it on sys.path) imported from `folder`, privately."""
    return importlib.import_module(f"{package_name(folder)}.{module}")


class _FolderLoader(importlib.machinery.SourceFileLoader):
    """A source file of the user's folder, run with the folder's own `__import__`."""

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__builtins__"] = _builtins_for(module.__name__.partition(".")[0])
        super().exec_module(module)


class _PackageLoader(importlib.abc.Loader):
    """The private package itself: an empty module whose `__path__` is the folder."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        pass


class _FolderFinder(importlib.abc.MetaPathFinder):
    """Finds `_workload_<folder>` and the modules under it; every other name is the next finder's."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top, dot, _ = fullname.partition(".")
        folder = folder_of(top)
        if folder is None or not folder.is_dir():
            return None
        if not dot:
            spec = importlib.machinery.ModuleSpec(top, _PackageLoader(), is_package=True)
            spec.submodule_search_locations = [str(folder)]
            return spec
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if (
            found is None
            or found.origin is None
            or not isinstance(found.loader, importlib.machinery.SourceFileLoader)
        ):
            return found
        found.loader = _FolderLoader(fullname, found.origin)
        return found


def _builtins_for(package: str) -> dict[str, Any]:
    """Python's builtins with an `__import__` that takes the names `package`'s folder holds from it."""
    folder = folder_of(package)
    own = own_names(folder) if folder is not None else frozenset()
    plain = builtins.__import__

    def folder_import(name, globals=None, locals=None, fromlist=(), level=0):
        head = name.partition(".")[0]
        if level != 0 or head not in own:
            return plain(name, globals, locals, fromlist, level)
        module = importlib.import_module(f"{package}.{name}")
        return module if fromlist else importlib.import_module(f"{package}.{head}")

    return {**builtins.__dict__, "__import__": folder_import}


def install() -> None:
    """Puts the finder first on `sys.meta_path`, once per process."""
    if not any(isinstance(f, _FolderFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FolderFinder())


install()
