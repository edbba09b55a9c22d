"""The environment is written for libraries in one place (model/library_env.py), and Ray's printer patch."""

from __future__ import annotations

import os
import re
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
