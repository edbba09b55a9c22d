"""A user's own workload: named by file or module from any folder, its model settings, the protocol's
defaults, the loop's Dataset batches, and every bad workload refused in one line (exit 2) before any work.

The examples under examples/ are the workloads a user copies; tests/test_examples.py trains and searches
them end to end.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray
import torch
import yaml
from torch.utils.data import TensorDataset

import model as project_model
from tests.user_env import user_env
from trainables.config import ConfigError, load_config, make_config
from trainables.data import CharWindows, datasets
from trainables.training.loop import train
from trainables.workloads.workload import Job, check_workload, load_workload
from trainables.workloads.workload_fields import fields_markdown
from tuner import search
from tuner.config import load_search_config
from tuner.space.domains import fit_to_workload

REPO = Path(__file__).resolve().parents[1]
NANOGPT = REPO / "examples" / "nanogpt"
SMALL = {"seq_len": 16, "batch_size": 4, "tokens": 4 * 16 * 6, "eval_tokens": 64, "eval_batch_size": 4,
         "timing_warmup_steps": 2, "log_interval": 2, "eval_interval": 0}  # fmt: skip
GOOD = """
import torch
import yaml
from torch import nn
from torch.nn import functional as F

class Job:
    def __init__(self, cfg):
        self.cfg = cfg
    def build_model(self):
        return nn.Sequential(nn.Embedding(8, 16), nn.Linear(16, 8))
    def train_dataset(self):
        x = torch.randint(8, (64, self.cfg.seq_len))
        return torch.utils.data.TensorDataset(x, (x + 1) % 8)
    def loss(self, model, batch):
        x, y = batch
        return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())

def make_workload(cfg):
    return Job(cfg)
"""


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind.\n" * 200)
    return path


def write_job(folder: Path, text: str, name: str = "job.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))
    return folder / name


def cfg_for(workload: str, corpus: Path | None = None, **values):
    return make_config({**SMALL, "workload": workload, "data": str(corpus) if corpus else None, **values})


# --- bad workloads: one line, exit 2, before any work ---------------------------------------------------

BAD = {
    "missing method": (GOOD.replace("def loss(", "def lossy("), "has no method loss()"),
    "wrong return type of build_model": (
        GOOD.replace("return nn.Sequential(nn.Embedding(8, 16), nn.Linear(16, 8))", "return {'w': 1}"),
        "build_model() returned dict, expected a torch.nn.Module",
    ),
    "loss not a scalar": (
        GOOD.replace("y.flatten())", "y.flatten(), reduction='none')"),
        "loss(model, batch) returned a tensor of shape",
    ),
    "factory returns no workload": (GOOD.replace("return Job(cfg)", "return None"), "returned NoneType"),
    "train_dataset not a dataset": (
        GOOD.replace("return torch.utils.data.TensorDataset(x, (x + 1) % 8)", "return 3"),
        "train_dataset() returned int, expected a map-style torch Dataset",
    ),
    "raises on import": ("import no_such_dependency_23\n" + GOOD, "ModuleNotFoundError: No module named"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_workload_is_one_line_before_any_work(case, tmp_path):
    text, expected = BAD[case]
    job = write_job(tmp_path / "user", text)
    with pytest.raises(ConfigError) as err:
        check_workload(cfg_for(f"{job}:make_workload"))
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("missing/job.py:make_workload", "file not found:"),
        ("no_such_module_23.jobs:make_workload", "no module named 'no_such_module_23'"),
        ("model:make_workload", "is a name of this project's own packages"),
        ("hybrid_lm", "expected 'hybrid', 'path/to/file.py:function' or 'package.module:function'"),
        (f"{NANOGPT / 'job.py'}:make_workloads", "has no 'make_workloads'"),
    ],
)
def test_a_workload_that_cannot_be_found_is_one_line(spec, expected):
    with pytest.raises(ConfigError) as err:
        check_workload(cfg_for(spec))
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "train.model.n_layr=2",
            "unknown config key 'train.model.n_layr'; did you mean 'train.model.n_layer'?",
        ),
        ("train.model.n_layer=two", "config key 'train.model.n_layer': Input should be a valid integer"),
        ("train.kernels=auto", "config key 'train.kernels': 'auto' does nothing for workload"),
        ("train.workload=no_such_module_23:make", "no module named 'no_such_module_23'"),
        ("train.workload=gone/job.py:make", "file not found:"),
    ],
)
def test_the_search_refuses_a_bad_workload_before_ray_starts(override, expected, tmp_path, corpus, capsys):
    out = tmp_path / "out"
    argv = ["--config", str(NANOGPT / "search.yaml"), "--out", str(out), "--data", str(corpus)]
    assert search.main([*argv, "--set", override]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") and expected in last, last
    assert not ray.is_initialized() and not (out / "state.json").exists()


def test_the_training_cli_refuses_a_bad_workload_in_one_line(tmp_path, corpus):
    job = write_job(tmp_path / "user", BAD["missing method"][0])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainables.train",
            "--data",
            str(corpus),
            "--set",
            f"workload={job}:make_workload",
        ],
        cwd=tmp_path,
        env={**user_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: workload '{job}:make_workload': Job has no method loss()"
    ]


def test_a_factory_without_settings_refuses_them():
    with pytest.raises(ConfigError, match="'model': .* takes no model settings"):
        load_workload(cfg_for("toy_workload:make_workload", model={"width": 3}))


# --- named by file or module, from anywhere; a user's model.py is theirs ----------------------------------


def test_a_file_workload_finds_its_own_model_py_and_the_projects_model_stays(corpus, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    workload = load_workload(cfg_for(f"{NANOGPT / 'job.py'}:make_workload", corpus, model={"n_layer": 1}))
    built = workload.build_model()
    assert type(built).__name__ == "GPT" and len(built.transformer.h) == 1
    assert sys.modules["model"] is project_model and hasattr(sys.modules["model"], "HybridLM")
    assert "_workload_" in type(workload).__module__  # loaded under a name of its own, not as `job`


def test_model_settings_change_the_built_model(corpus):
    def params(**settings) -> int:
        workload = load_workload(cfg_for(f"{NANOGPT / 'job.py'}:make_workload", corpus, model=settings))
        return sum(p.numel() for p in workload.build_model().parameters())

    assert params(n_layer=2, n_embd=64) < params(n_layer=1) < params(n_layer=2)


def test_a_relative_workload_path_is_read_from_the_config_files_folder(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "train.yaml").write_text("workload: ../jobs/job.py:make_workload\n")
    (tmp_path / "search.yaml").write_text(
        "train: {workload: jobs/job.py:make_workload}\nsearch: {space: {batch_size: [1, 2]}}\n"
    )
    monkeypatch.chdir(tmp_path / "cfg")  # from the command line, a path is the working directory's
    expected = f"{(tmp_path / 'jobs' / 'job.py').resolve()}:make_workload"
    assert load_config(tmp_path / "cfg" / "train.yaml").workload == expected
    assert load_search_config(str(tmp_path / "search.yaml")).train.workload == expected
    assert (
        load_config(None, ["workload=job.py:fn"]).workload == f"{(tmp_path / 'cfg' / 'job.py').resolve()}:fn"
    )


def test_a_module_workload_beside_its_own_model_py_runs_from_that_folder(corpus):
    """`python -m` puts the working directory first on sys.path: nanoGPT's model.py would stand in for the
    project's `model` package; the project imports its own by file, the workload gets nanoGPT's."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainables.train", "--config", "search.yaml", "--data", str(corpus), "--json",
         "--set", "workload=job:make_workload", "--set", "tokens=2048", "--set", "model.n_layer=1"],
        cwd=NANOGPT,
        env={**user_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "workload: NanoGPT" in proc.stderr


# --- the protocol's defaults and the loop's Dataset batches ------------------------------------------------


def test_the_least_a_workload_writes_trains(tmp_path):
    job = write_job(tmp_path / "user", GOOD)
    cfg = cfg_for(f"{job}:make_workload", lr=1e-2, tokens=4 * 16 * 30)
    info = check_workload(cfg)
    assert info.supports == {"loader", "num_workers", "pin_memory"}  # a TensorDataset: the loop's knobs
    assert info.unsupported == ["activation_checkpointing", "compile_scope", "kernels", "mamba_lr_mult"]
    result = train(cfg, log=None)
    assert result.status == "ok" and result.val_loss < 1.5, result


def test_dataset_batches_are_the_same_whatever_the_loader(tmp_path):
    job = write_job(tmp_path / "user", GOOD)
    cpu = torch.device("cpu")

    def first(**knobs) -> list:
        j = Job(
            load_workload(cfg_for(f"{job}:make_workload", **knobs)), cfg_for(f"{job}:make_workload", **knobs)
        )
        torch.manual_seed(0)  # the dataset's random tokens: the same for each
        batches = j.train_batches(cpu, start_step=3)
        return [next(batches)[0] for _ in range(2)]

    plain = first()
    for knobs in ({"num_workers": 1}, {"loader": "device"}):
        assert all(torch.equal(a, b) for a, b in zip(plain, first(**knobs))), knobs


def test_without_a_val_dataset_the_last_tenth_is_held_out(tmp_path):
    job = write_job(tmp_path / "user", GOOD)
    cfg = cfg_for(f"{job}:make_workload", eval_tokens=16 * 4)
    j = Job(load_workload(cfg), cfg)
    val = j.val_batches(torch.device("cpu"))
    assert sum(b[0].shape[0] for b in val) == 4  # eval_tokens // seq_len examples
    indices = torch.cat([b[0] for b in val])
    assert all(any(torch.equal(row, j.train_set()[i][0]) for i in range(58, 64)) for row in indices)


# --- loader=device for whatever indexable dataset a workload returns ---------------------------------------


def _rule(start: int, n: int = 17) -> torch.Tensor:
    return (start + torch.arange(n)) % 8  # next token = token + 1 (mod 8): learnable in a few steps


# The forms of train_dataset() a README-style adapter returns; every one batches on the device.
DATASETS = {
    "CharWindows": lambda: CharWindows((torch.arange(400) * 5 % 8).to(torch.uint8), seq_len=16),
    "TensorDataset": lambda: TensorDataset(torch.stack([_rule(i)[:-1] for i in range(64)]),
                                           torch.stack([_rule(i)[1:] for i in range(64)])),
    "list of tensors": lambda: [_rule(i) for i in range(64)],
    "list of dicts": lambda: [{"input_ids": _rule(i)[:-1], "labels": _rule(i)[1:]} for i in range(64)],
    "list of tuples with a number": lambda: [(_rule(i)[:-1], _rule(i)[1:], i) for i in range(64)],
}  # fmt: skip


class Examples:
    """A workload whose train_dataset() is any indexable of examples, and a loss for each form of batch."""

    def __init__(self, dataset):
        self.dataset = dataset

    def build_model(self):
        return torch.nn.Sequential(torch.nn.Embedding(8, 16), torch.nn.Linear(16, 8))

    def train_dataset(self):
        return self.dataset

    def loss(self, model, batch):
        if isinstance(batch, dict):
            x, y = batch["input_ids"], batch["labels"]
        elif isinstance(batch, torch.Tensor):
            x, y = batch[:, :-1], batch[:, 1:]
        else:
            x, y = batch[0], batch[1]
        return torch.nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())


def same(a, b) -> bool:
    """Equal batches: the same nesting and types, equal tensors of one dtype."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("form", sorted(DATASETS))
def test_every_dataset_of_tensor_examples_is_offered_the_device_loader_and_batches_the_same(form):
    dataset = DATASETS[form]()
    cfg = cfg_for("job.py:make_workload", loader="device")
    assert "loader" in check_workload(cfg, workload=Examples(dataset)).supports

    def batches(loader: str) -> list:
        knobs = cfg_for("job.py:make_workload", loader=loader)
        it = Job(Examples(dataset), knobs).train_batches(torch.device("cpu"), start_step=3)
        return [next(it) for _ in range(3)]

    device, plain = batches("device"), batches("dataloader")
    assert all(same(a, b) for a, b in zip(device, plain)), form


def test_a_run_on_a_materialised_dataset_trains_to_the_dataloaders_loss():
    dataset = DATASETS["list of dicts"]()
    runs = {}
    for loader in ("dataloader", "device"):
        cfg = cfg_for("job.py:make_workload", loader=loader, lr=1e-2, tokens=4 * 16 * 30)
        runs[loader] = train(cfg, workload=Examples(dataset), log=None)
    assert runs["device"].status == "ok" and runs["device"].val_loss < 1.5, runs["device"]
    assert (runs["device"].train_loss, runs["device"].val_loss) == (
        runs["dataloader"].train_loss,
        runs["dataloader"].val_loss,
    )


def test_the_device_loader_is_not_offered_where_it_cannot_batch_the_data(monkeypatch):
    monkeypatch.setattr(datasets, "MATERIALISE_MAX_BYTES", 4096)  # a list of 64 x 17 int64 is 8.5 KiB
    with_text = [{"input_ids": _rule(i)[:-1], "labels": _rule(i)[1:], "text": "abc"} for i in range(64)]
    too_large = DATASETS["list of tensors"]()
    cases = {
        "its examples (dict) are not tensors": with_text,
        "its 64 examples would take 8.5 KiB, over 4.0 KiB (give the dataset to(device) and gather": too_large,
    }
    for why, dataset in cases.items():
        info = check_workload(cfg_for("job.py:make_workload"), workload=Examples(dataset))
        assert "loader" not in info.supports and {"num_workers", "pin_memory"} <= info.supports
        with pytest.raises(ConfigError) as err:
            check_workload(cfg_for("job.py:make_workload", loader="device"), workload=Examples(dataset))
        line = str(err.value)
        assert line.startswith("config key 'loader': 'device' does nothing") and why in line, line
        assert "\n" not in line
    # CharWindows gathers from its tokens: its windows (98 KiB here) are never copied, so no cap applies
    windows = Examples(DATASETS["CharWindows"]())
    assert "loader" in check_workload(cfg_for("job.py:make_workload"), workload=windows).supports


# --- the contract's documentation ------------------------------------------------------------------------


def test_docs_list_every_trainconfig_field_a_workload_can_read():
    text = (REPO / "docs" / "workloads.md").read_text()
    assert fields_markdown() in text, "regenerate the table: python -m trainables.workloads.workload"


# --- the search fits the workload --------------------------------------------------------------------------


def test_knobs_the_workload_lacks_leave_the_space_with_one_line(tmp_path, corpus):
    cfg = load_search_config(
        str(NANOGPT / "search.yaml"), ["search.space.kernels=[torch, fused]"], str(corpus)
    )
    info = check_workload(cfg.train, "train")
    fitted = fit_to_workload(cfg, info)
    assert "kernels" not in fitted.search.space and "num_workers" in fitted.search.space
    assert fitted.search.space["loader"] == ["dataloader", "device"]  # CharWindows batches on the device
    assert "compile_scope" in info.supports  # the example names its blocks (compile_regions)
    (line,) = fitted.search.left_out.items()
    # its named blocks also bring activation checkpointing, which the loop applies over them
    assert line[0] == "kernels, mamba_lr_mult" and "does not implement" in line[1]


def test_the_hybrids_search_is_unchanged_by_the_fit():
    cfg = load_search_config(str(REPO / "configs" / "smoke.yaml"))
    assert fit_to_workload(cfg, check_workload(cfg.train)) == cfg


# --- runs that work where they are printed ------------------------------------------------------------------


def test_the_rayjob_ships_a_file_workloads_folder_and_runs_it_from_there(tmp_path, corpus):
    from tests.k8s import checks
    from tuner import emit

    cfg = cfg_for(f"{NANOGPT / 'job.py'}:make_workload", corpus, model={"n_layer": 1})
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(cfg.model_dump()))
    objects = checks.load(emit.render_rayjob(best))
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap", "RayJob"]
    for obj in objects:
        assert not checks.problems(obj), (obj["kind"], checks.problems(obj))
    config, code = objects[0], objects[1]
    shipped = yaml.safe_load(config["data"]["best.yaml"])
    assert shipped["workload"] == f"{emit.WORKLOAD_DIR}/job.py:make_workload" and shipped["model"] == {
        "n_layer": 1
    }
    assert set(code["data"]) == {"job.py", "model.py"} and "class GPT" in code["data"]["model.py"]
    for _, pod in checks.pod_specs(objects):
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert emit.WORKLOAD_DIR in mounts


def test_the_rayjob_refuses_a_workload_too_large_for_a_configmap(tmp_path):
    from tuner import emit

    job = write_job(tmp_path / "big", GOOD)
    (job.parent / "weights_as_code.py").write_text("X = 1\n" * 200_000)
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(cfg_for(f"{job}:make_workload").model_dump()))
    with pytest.raises(ConfigError, match="more than a ConfigMap carries .* build it into the image"):
        emit.render_rayjob(best)
