"""Importing a user's workload factory, by file (`path/to/job.py:make_workload`) or by module (`pkg.mod:fn`).

The project's top-level packages are `model`, `trainables` and `tuner`. A user's folder may hold a file of
the same name (nanoGPT's `model.py`): a workload file is imported as a module of its folder's private
package (trainables/workloads/user_folder.py), where `from model import GPT` finds THEIR `model.py` and the project's
`model` stays the project's; so is a workload module whose folder holds such a file. Where this cannot help
(a workload module itself named like a project package), one line says the fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from trainables.config import ConfigError, is_file_spec
from trainables.workloads import user_folder

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("model", "trainables", "tuner")


@dataclass(frozen=True)
class WorkloadSpec:
    """`train.workload` taken apart: a file (absolute path) or a module name, and the factory's name."""

    text: str
    file: Path | None  # the workload's .py file, or None for a module
    module: str | None  # the module name, or None for a file
    attr: str

    @property
    def code_root(self) -> Path:
        """The folder the workload's code is imported from: the file's folder, or where the top-level
        package or module lives (what a run elsewhere must have on its path)."""
        if self.file is not None:
            return self.file.parent
        return _module_root(self.module_name, self.text)

    @property
    def module_name(self) -> str:
        """The module a spec without a file names (parse_spec gives a spec one or the other)."""
        assert self.module is not None, self.text
        return self.module


def parse_spec(text: str, key: str = "workload") -> WorkloadSpec:
    """A factory's address; ConfigError (one line) when it is neither form."""
    target, sep, attr = text.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(
            f"config key {key!r}: expected 'hybrid', 'path/to/file.py:function' or 'package.module:function', "
            f"got {text!r}"
        )
    if is_file_spec(text):
        return WorkloadSpec(text, Path(target).resolve(), None, attr)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(f"config key {key!r}: {target!r} is not a module name (a file ends in .py)")
    return WorkloadSpec(text, None, target, attr)


def load_factory(spec: WorkloadSpec, key: str = "workload") -> Callable:
    """The factory the spec names; ConfigError (one line, with the fix where there is one) if it cannot be."""
    module = _load_file(spec, spec.file, key) if spec.file is not None else _load_module(spec, key)
    factory = getattr(module, spec.attr, None)
    if factory is None:
        where = spec.file or spec.module
        raise ConfigError(f"config key {key!r}: {where} has no {spec.attr!r} (in {spec.text!r})")
    if not callable(factory):
        raise ConfigError(f"config key {key!r}: {spec.attr!r} in {spec.text!r} is not callable")
    return factory


def _load_file(spec: WorkloadSpec, path: Path, key: str) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"config key {key!r}: file not found: {path} (in {spec.text!r})")
    if not path.stem.isidentifier():
        raise ConfigError(f"config key {key!r}: {path.name!r} is not a Python module name (in {spec.text!r})")
    try:
        return user_folder.import_in(path.parent, path.stem)
    except Exception as err:  # noqa: BLE001 - whatever the user's import raised becomes one line
        raise ConfigError(_import_failed(key, spec, err, path.parent)) from None


def _load_module(spec: WorkloadSpec, key: str) -> ModuleType:
    """A module by name, where the path finds it; from a folder that holds a file named like one of this
    project's packages, privately, as a file is (trainables/workloads/user_folder.py)."""
    module = spec.module_name
    top = module.partition(".")[0]
    if top in PROJECT_PACKAGES:
        raise ConfigError(
            f"config key {key!r}: {module!r} is a name of this project's own packages "
            f"({', '.join(PROJECT_PACKAGES)}); rename it, or name the file: 'path/to/{top}.py:{spec.attr}'"
        )
    root = _module_root(module, spec.text, key)
    try:
        if _clashes(root):
            return user_folder.import_in(root, module)
        return importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - whatever the user's import raised becomes one line
        raise ConfigError(_import_failed(key, spec, err, root)) from None


def _module_root(module: str, text: str, key: str = "workload") -> Path:
    top = module.partition(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.submodule_search_locations:  # a package: its folder's parent
        return Path(list(found.submodule_search_locations)[0]).resolve().parent
    if found is None or not found.origin:
        raise ConfigError(
            f"config key {key!r}: no module named {top!r} (in {text!r}); put its folder on PYTHONPATH "
            f"or name the file: 'path/to/{top}.py:{text.rpartition(':')[2]}'"
        )
    return Path(found.origin).resolve().parent


def needs_path(root: Path) -> bool:
    """Whether a run elsewhere must put `root` on sys.path to import the workload (not for installed code
    or the project's own folder)."""
    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    return root.resolve() not in installed | {PROJECT_ROOT}


def _clashes(folder: Path) -> list[str]:
    """The project's package names that `folder` holds a module or package of its own by."""
    return [n for n in PROJECT_PACKAGES if (folder / f"{n}.py").exists() or (folder / n).is_dir()]


def _import_failed(key: str, spec: WorkloadSpec, err: Exception, folder: Path) -> str:
    where = _origin(err)
    line = f"config key {key!r}: importing {spec.text!r} failed: {type(err).__name__}: {_first(err)}{where}"
    clashes = _clashes(folder)
    if isinstance(err, ImportError) and (err.name or "").partition(".")[0] in PROJECT_PACKAGES and clashes:
        line += (
            f" ({folder} holds {', '.join(clashes)} of its own, which hide this project's packages from "
            "that code: rename them)"
        )
    return line


def _origin(err: Exception) -> str:
    """' (file:line)' of the innermost frame of the user's code that raised, if any."""
    tb, last = err.__traceback__, None
    while tb is not None:
        if "importlib" not in tb.tb_frame.f_code.co_filename:
            last = tb
        tb = tb.tb_next
    if last is None or Path(last.tb_frame.f_code.co_filename).resolve().is_relative_to(
        PROJECT_ROOT / "trainables"
    ):
        return ""
    return f" ({last.tb_frame.f_code.co_filename}:{last.tb_lineno})"


def _first(err: BaseException) -> str:
    lines = str(err).splitlines()
    return lines[0] if lines else ""
