"""A user's workload folder whose files are named like this project's packages (`model.py`, `trainables.py`,
`tuner.py`): its job.py gets its own, the project keeps its own, in this process, in a fresh one started
from elsewhere and in a Ray trial; and nothing in the package writes into `sys.modules`."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import model as project_model
import trainables as project_trainables
import tuner as project_tuner
from tests.test_workloads import GOOD
from tests.user_env import user_env
from trainables.config import make_config
from trainables.training.loop import train
from trainables.workloads import user_folder
from trainables.workloads.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
SMALL = {"seq_len": 8, "batch_size": 4, "tokens": 4 * 8 * 4, "eval_tokens": 32, "eval_batch_size": 4,
         "timing_warmup_steps": 1, "log_interval": 2, "eval_interval": 0}  # fmt: skip

FILES = {
    "model.py": "import torch\nclass Net(torch.nn.Sequential):\n    WHOSE = 'theirs'\n",
    "trainables.py": "WHOSE = 'theirs'\n",
    "tuner.py": "from trainables import WHOSE as TRAINABLES_WHOSE\nWHOSE = 'theirs'\n",
    "helpers/__init__.py": "from .width import WIDTH\n",
    "helpers/width.py": "WIDTH = 16\n",
    "plain.py": GOOD,  # tests/test_workloads.py's least workload, which job.py builds on
    "job.py": textwrap.dedent(
        """
        import torch
        import trainables
        import tuner
        from helpers import WIDTH
        from model import Net
        from plain import Job as Plain

        class Job(Plain):
            def __init__(self, cfg):
                super().__init__(cfg)
                self.whose = (Net.WHOSE, trainables.WHOSE, tuner.WHOSE, tuner.TRAINABLES_WHOSE)
            def build_model(self):
                return Net(torch.nn.Embedding(8, WIDTH), torch.nn.Linear(WIDTH, 8))

        def make_workload(cfg):
            return Job(cfg)
        """
    ),
}


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "their project"  # a space in the path, as users' folders have
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_their_job_gets_their_modules_and_the_project_keeps_its_own(folder):
    cfg = make_config({**SMALL, "workload": f"{folder / 'job.py'}:make_workload"})
    workload = load_workload(cfg)
    assert workload.whose == ("theirs",) * 4, "job.py, and tuner.py in turn, imported their folder's files"
    assert sys.modules["model"] is project_model and hasattr(project_model, "HybridLM")
    assert sys.modules["trainables"] is project_trainables and sys.modules["tuner"] is project_tuner
    assert type(workload).__module__ == f"{user_folder.package_name(folder)}.job"
    assert user_folder.folder_of(user_folder.package_name(folder)) == folder.resolve()
    assert str(folder) not in sys.path, "their folder is never put on the path"
    result = train(cfg, log=None)
    assert result.status == "ok" and result.val_loss is not None


def test_a_fresh_process_started_elsewhere_trains_it(folder, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.run(
        [sys.executable, "-m", "trainables.train", "--json", *sets, "--set", f"workload={folder / 'job.py'}:make_workload"],
        cwd=elsewhere,
        env={**user_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"status": "ok"' in proc.stdout


def test_a_ray_worker_loads_it_under_the_same_private_name(folder, module_cpu_ray):
    """A trial loads the workload itself, as the driver does: the same private module, their classes and the
    project's `model` side by side; an object of their class comes back to the driver whole (pickled by its
    private name, which any process that imported trainables finds the folder from)."""
    import ray

    spec = f"{folder / 'job.py'}:make_workload"

    @ray.remote(num_cpus=1)
    def load_there(spec):
        import model

        job = load_workload(make_config({**SMALL, "workload": spec}))
        return job.whose, type(job).__module__, hasattr(model, "HybridLM"), job.build_model()

    whose, module, ours, net = ray.get(load_there.remote(spec))
    assert (whose, ours) == (("theirs",) * 4, True)
    assert module == f"{user_folder.package_name(folder)}.job"
    assert type(net).__module__ == f"{user_folder.package_name(folder)}.model" and net.WHOSE == "theirs"


# The one place left (issue 45 asks for none): importing fla's and mamba_ssm's kernels without their
# packages' __init__ (13 s and 10 s of imports per process), then taking those bare packages out again so
# that a user's own `import fla` gets the whole package.
BARE_PACKAGES = "model/ops/_backend.py"


def test_nothing_in_the_package_writes_into_sys_modules_but_the_bare_kernel_imports():
    writes = []
    for package in ("model", "trainables", "tuner"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if _writes_sys_modules(node):
                    writes.append(str(path.relative_to(REPO)))
    assert writes and set(writes) == {BARE_PACKAGES}, writes  # the finder sees the one there is


def _writes_sys_modules(node: ast.AST) -> bool:
    """`sys.modules[k] = ...`, `del sys.modules[k]`, or `sys.modules.update/pop/setdefault/clear(...)`."""

    def is_sys_modules(expr: ast.AST) -> bool:
        return ast.unparse(expr) == "sys.modules"

    if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        return any(isinstance(t, ast.Subscript) and is_sys_modules(t.value) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        mutators = ("update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__")
        return node.func.attr in mutators and is_sys_modules(node.func.value)
    return False
