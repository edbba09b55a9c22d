"""The training side, by what each part serves: the loop (`training`), what it trains (`workloads`), the
corpus and its batches (`data`), what every part uses (`common`), the run's config (`config`), the CLI
(`train`) and the Ray trainable (`trainable`). Importing it makes sure `model` is this project's package.

A user who runs the CLIs from their own folder has it first on sys.path (`python -m` puts the working
directory there); a `model.py` of theirs (nanoGPT's) would then stand in for the project's `model`
package. So the project's is imported here, before anything imports `model` by name, with the sys.path
entries that hold a `model` of their own left out of that one search. A workload's own `model.py` is
imported under a private name (trainables/workloads/user_folder.py).
"""

import importlib
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_MODEL = _ROOT / "model" / "__init__.py"


def _project_model_first() -> None:
    loaded = sys.modules.get("model")
    if loaded is None:
        hidden = [(i, p) for i, p in enumerate(sys.path) if _holds_another_model(p)]
        for i, _ in reversed(hidden):
            del sys.path[i]
        try:
            loaded = importlib.import_module("model")
        finally:
            for i, entry in hidden:
                sys.path.insert(i, entry)
    if Path(getattr(loaded, "__file__", "") or "").resolve() != _MODEL:
        raise ImportError(
            f"a module named 'model' ({getattr(loaded, '__file__', loaded)}) was imported before this "
            f"project, whose own 'model' package is at {_MODEL.parent}: import the project first, or load "
            "your model by file (train.workload: 'path/to/job.py:make_workload')"
        )


def _holds_another_model(entry: str) -> bool:
    """Whether a sys.path entry (a folder; '' is the working directory) holds a `model` that is not ours."""
    folder = Path(entry or ".")
    if not folder.is_dir() or folder.resolve() == _ROOT:
        return False
    return (folder / "model.py").exists() or (folder / "model" / "__init__.py").exists()


_project_model_first()
