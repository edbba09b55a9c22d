"""The environment is written for libraries in one place (model/library_env.py), and Ray's printer patch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ray

from model import library_env
from tuner.session import ray_noise

ROOT = Path(__file__).resolve().parents[1]
ENV_WRITE = re.compile(r"os\.environ\[[^]]+\]\s*=[^=]|os\.environ\.(setdefault|update|pop)\(|os\.putenv\(")


def test_only_library_env_writes_the_environment():
    writers = [
        str(path.relative_to(ROOT))
        for package in ("model", "trainables", "tuner")
        for path in sorted((ROOT / package).rglob("*.py"))
        if ENV_WRITE.search(path.read_text())
    ]
    assert writers == ["model/library_env.py"]


def test_the_trials_get_the_searchs_caches_unless_the_user_exported_their_own(monkeypatch, tmp_path):
    for var in (*library_env.COMPILE_CACHE_VARS.values(), library_env.COMPILE_THREADS_VAR):
        monkeypatch.delenv(var, raising=False)
    env, own = library_env.trial_env(tmp_path, 3)
    assert own and env[library_env.COMPILE_CACHE_VAR] == str(tmp_path)  # a root each trial keys itself
    assert "TRITON_CACHE_DIR" not in env and "TORCHINDUCTOR_CACHE_DIR" not in env
    assert env[library_env.COMPILE_THREADS_VAR] == "3"
    monkeypatch.setenv("TRITON_CACHE_DIR", "/theirs/triton")
    monkeypatch.setenv(library_env.COMPILE_THREADS_VAR, "1")
    env, own = library_env.trial_env(tmp_path, 3)
    assert not own and env["TRITON_CACHE_DIR"] == "/theirs/triton"
    assert env[library_env.COMPILE_THREADS_VAR] == "1"


def test_compile_caches_are_pointed_by_dir_name(monkeypatch, tmp_path):
    for var in library_env.COMPILE_CACHE_VARS.values():
        monkeypatch.delenv(var, raising=False)
    library_env.point_compile_caches({"triton": tmp_path / "t"})
    assert library_env.compile_cache_dirs() == {"triton": str(tmp_path / "t")}
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "t")


def test_the_raylets_death_notices_are_dropped_and_the_rest_printed(monkeypatch):
    printed: list[dict] = []
    monkeypatch.setattr(ray._private.worker, "print_to_stdstream", lambda data, _: printed.append(data))
    # Fails when a Ray upgrade moves the printer: the notices would be back (see drop_raylet_notices).
    assert ray_noise.drop_raylet_notices()
    assert ray_noise.drop_raylet_notices()  # wrapped once, however often called
    show = ray._private.worker.print_to_stdstream
    show({"pid": "raylet", "lines": ["A worker died or was killed while executing a task"]}, False)
    show({"pid": "raylet", "lines": ["Raylet is terminated. Termination is unexpected."]}, False)
    show({"pid": "raylet", "lines": ["node 1 was marked dead"]}, False)
    show({"pid": 123, "lines": ["A worker died or was killed"]}, False)  # a trial's own output
    assert [d["lines"][0] for d in printed] == ["node 1 was marked dead", "A worker died or was killed"]


# Run in a process of its own: Dynamo's import is what sets the variable, once per process, and the test
# process may have imported it already.
CHECKS_THEN_TRIAL_ENV = """
import json, os, sys
from pathlib import Path
from tuner import search
args = search.build_parser().parse_args(sys.argv[1:])
cfg, _, _ = search.read_config(args, Path("out"))
env, named = search.trial_env(cfg, str(Path("cache").resolve()))
print(json.dumps({"after_checks": {v: os.environ.get(v) for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")},
                  "named": named, "env": env}))
"""


def test_the_checks_before_work_leave_a_file_workloads_compile_cache_to_the_search(tmp_path):
    """Issue 56: building a user's model on the meta device imports torch._dynamo, whose import sets
    TORCHINDUCTOR_CACHE_DIR to Inductor's default (/tmp/torchinductor_<user>); the search then took it for
    the user's own export, and its trials compiled unkeyed, outside the search's cache, best.yaml naming none."""
    env = {k: v for k, v in os.environ.items() if k not in library_env.COMPILE_CACHE_VARS.values()}
    env["PYTHONPATH"] = str(ROOT)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 400)
    config = ROOT / "examples" / "nanogpt" / "search.yaml"
    args = ["--config", str(config), "--data", str(corpus), "--set", "train.model.n_layer=1"]
    proc = subprocess.run(
        [sys.executable, "-c", CHECKS_THEN_TRIAL_ENV, *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["after_checks"] == {"TORCHINDUCTOR_CACHE_DIR": None, "TRITON_CACHE_DIR": None}
    assert found["named"] == str(tmp_path / "cache")  # best.yaml's compile_cache
    assert found["env"][library_env.COMPILE_CACHE_VAR] == str(tmp_path / "cache")  # keyed by each trial
    assert "TORCHINDUCTOR_CACHE_DIR" not in found["env"]
    assert "the dirs you exported" not in proc.stderr
