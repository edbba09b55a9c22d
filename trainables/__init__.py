"""Data, the training loop and the Ray trainable. Importing it makes sure `model` is this project's package.

A user who runs the CLIs from their own folder has it first on sys.path (`python -m` puts the working
directory there); a `model.py` of theirs (nanoGPT's) would then stand in for the project's `model`
package. The project's is imported by its file here, before anything imports `model` by name.
"""

import importlib.util
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _project_model_first() -> None:
    init = _ROOT / "model" / "__init__.py"
    loaded = sys.modules.get("model")
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() != init:
            raise ImportError(
                f"a module named 'model' ({getattr(loaded, '__file__', loaded)}) was imported before this "
                f"project, whose own 'model' package is at {init.parent}: import the project first, or load "
                "your model by file (train.workload: 'path/to/job.py:make_workload')"
            )
        return
    found = importlib.util.find_spec("model")
    if found is not None and found.origin and Path(found.origin).resolve() == init:
        return
    spec = importlib.util.spec_from_file_location(
        "model", init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)


_project_model_first()
